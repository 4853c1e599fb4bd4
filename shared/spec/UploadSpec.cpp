#include "spec/UploadSpec.h"

#include "spec/JsonFields.h"

using namespace Qt::StringLiterals;

namespace gleaner {

const QStringList& UploadSpec::encodingNames()
{
    // In the order of UploadSpec::Encoding, so an index from readChoice() converts directly.
    static const QStringList names{u"fp32"_s, u"fp16"_s, u"int8"_s, u"topk"_s};
    Q_ASSERT(names.size() == kEncodings);
    return names;
}

QString UploadSpec::describe() const
{
    QString text = encodingName();
    if (encoding == Encoding::TopK)
        text += u" %1%"_s.arg(density * 100.0, 0, 'g', 3);
    if (isUpdate()) {
        if (errorFeedback)
            text += u" +ef"_s;
        if (zstd)
            text += u" +zstd"_s;
    }
    return text;
}

Result<UploadSpec> UploadSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"encoding"_s, u"density"_s, u"error_feedback"_s, u"zstd"_s});
    UploadSpec spec;
    int encoding = 0;
    if (!fields.readChoice(u"encoding", encoding, encodingNames(), Need::Required))
        return fields.failure();
    spec.encoding = Encoding(encoding);
    if (spec.encoding != Encoding::TopK)
        fields.refuse(u"density", u"only used by the topk encoding"_s);
    if (!spec.isUpdate()) {
        for (const auto key : {u"error_feedback", u"zstd"})
            fields.refuse(key,
                          u"only used by the update encodings (fp16, int8, topk); fp32 sends full weights"_s);
    }
    // Below 1e-6 a tensor of a million values would send one; such a density is a typo.
    fields.readNumber(u"density", spec.density, NumberRange::atLeast(1e-6).atMost(1));
    fields.readBool(u"error_feedback", spec.errorFeedback);
    fields.readBool(u"zstd", spec.zstd);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject UploadSpec::toJson() const
{
    QJsonObject json{{u"encoding"_s, encodingName()}};
    if (encoding == Encoding::TopK)
        json.insert(u"density"_s, density);
    if (isUpdate()) {
        json.insert(u"error_feedback"_s, errorFeedback);
        json.insert(u"zstd"_s, zstd);
    }
    return json;
}

} // namespace gleaner
