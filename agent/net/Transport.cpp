#include "Transport.h"

namespace gleaner::agent {

QByteArray TransportResponse::header(QByteArrayView name) const
{
    for (const auto& [key, value] : headers)
        if (key.compare(name, Qt::CaseInsensitive) == 0)
            return value;
    return {};
}

} // namespace gleaner::agent
