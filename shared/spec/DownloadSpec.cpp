#include "spec/DownloadSpec.h"

#include "spec/JsonFields.h"

using namespace Qt::StringLiterals;

namespace gleaner {

Result<DownloadSpec> DownloadSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"density"_s});
    DownloadSpec spec;
    // Below 1e-4 a publication would move a model of ten thousand values by one: such a density is a typo.
    fields.readNumber(u"density", spec.density, NumberRange::atLeast(1e-4).atMost(1), Need::Required);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject DownloadSpec::toJson() const
{
    return QJsonObject{{u"density"_s, density}};
}

} // namespace gleaner
