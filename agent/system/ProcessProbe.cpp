#include "ProcessProbe.h"

namespace gleaner::agent {

ProcessProbe::~ProcessProbe() = default;

QStringList FakeProcessProbe::running(const QStringList& names)
{
    QStringList found;
    for (const QString& name : names) {
        if (runningPrograms.contains(name, Qt::CaseInsensitive) && !found.contains(name))
            found.append(name);
    }
    return found;
}

} // namespace gleaner::agent
