#include "spec/AugmentSpec.h"

#include "spec/JsonFields.h"

#include <QStringList>

#include <algorithm>

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// Half of ModelSpec's largest input dimension (4096): a larger padding fits no model.
constexpr IntRange kCropPadding{0, 2048};

QString shapeText(const QList<qint64>& shape)
{
    QStringList parts;
    for (qint64 dim : shape)
        parts.append(QString::number(dim));
    return u'[' + parts.join(u", "_s) + u']';
}

} // namespace

Result<AugmentSpec> AugmentSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"crop_padding"_s, u"flip"_s});
    AugmentSpec spec;
    fields.readInt(u"crop_padding", spec.cropPadding, kCropPadding);
    fields.readBool(u"flip", spec.flip);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject AugmentSpec::toJson() const
{
    return QJsonObject{{u"crop_padding"_s, cropPadding}, {u"flip"_s, flip}};
}

Status AugmentSpec::checkInput(const QList<qint64>& inputShape, const QString& path) const
{
    if (!enabled())
        return {};
    if (inputShape.size() != 3)
        return fail(u"%1: augmentation is for images, a model input_shape [C, H, W]; this model's is %2: "
                    u"remove \"augment\" or use an image model"_s.arg(path, shapeText(inputShape)));
    const qint64 limit = std::min(inputShape.at(1), inputShape.at(2)) / 2;
    if (cropPadding > limit)
        return fail(
            u"%1.crop_padding: %2 is more than half the image (input_shape %3 allows at most %4)"_s.arg(path)
                .arg(cropPadding)
                .arg(shapeText(inputShape))
                .arg(limit));
    return {};
}

} // namespace gleaner
