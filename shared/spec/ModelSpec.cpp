#include "spec/ModelSpec.h"

#include "spec/JsonFields.h"

#include <QJsonArray>
#include <QRegularExpression>

using namespace Qt::StringLiterals;

namespace gleaner {
namespace {

// In the order of the Architecture enumerators, so an index from readChoice() converts directly.
const QStringList& architectureNames()
{
    static const QStringList names{u"mlp"_s, u"cnn"_s, u"resnet"_s, u"torchscript"_s};
    return names;
}

constexpr IntRange kShapeDim{1, 4096};
constexpr IntRange kNumClasses{2, 100000};
constexpr IntRange kHiddenWidth{1, 65536};
constexpr IntRange kConvChannels{1, 1024};
constexpr IntRange kResNetWidth{1, 1024};
constexpr qint64 kMaxImageChannels = 64;
// 9n + 2 up to ResNet-1001, the deepest pre-activation ResNet published; deeper would not train on a
// volunteer's machine anyway.
constexpr int kMaxResNetDepth = 1001;

QString onlyUsedBy(const QString& archs)
{
    return u"only used by arch "_s + archs;
}

// cnn and resnet take one image [C, H, W]; their pooling / striding puts a floor (and for cnn a divisor) on H
// and W.
void checkImageShape(JsonFields& fields, const ModelSpec& spec)
{
    const QString arch = u"arch \"%1\""_s.arg(architectureName(spec.arch));
    const QList<qint64>& shape = spec.inputShape;
    if (shape.size() != 3) {
        fields.fail(u"input_shape",
                    arch + u" needs [channels, height, width], got %1 value(s)"_s.arg(shape.size()));
        return;
    }
    if (shape[0] > kMaxImageChannels) {
        fields.failElement(u"input_shape", 0,
                           arch + u" takes 1 to %1 channels, got %2"_s.arg(kMaxImageChannels).arg(shape[0]));
        return;
    }
    const QString sides[] = {u"height"_s, u"width"_s};
    for (qsizetype i = 1; i < 3; ++i) {
        const QString got = u", got %1"_s.arg(shape[i]);
        if (spec.arch == Architecture::Cnn && (shape[i] < 8 || shape[i] % 4 != 0)) {
            const QString why = u" (two 2x2 max-pools halve it twice)"_s;
            fields.failElement(u"input_shape", i,
                               arch + u" needs a %1 divisible by 4 and at least 8"_s.arg(sides[i - 1]) + why +
                                   got);
            return;
        }
        if (spec.arch == Architecture::ResNet && shape[i] < 8) {
            const QString why = u" (two of its stages halve it)"_s;
            fields.failElement(u"input_shape", i,
                               arch + u" needs a %1 of at least 8"_s.arg(sides[i - 1]) + why + got);
            return;
        }
    }
}

void readDepth(JsonFields& fields, int& depth)
{
    if (!fields.ok() || !fields.has(u"depth"))
        return;
    const QJsonValue value = fields.value(u"depth");
    const auto integer = exactInteger(value);
    if (!integer || *integer < 11 || *integer > kMaxResNetDepth || (*integer - 2) % 9 != 0) {
        const QString what = u"9n + 2 with n >= 1 (11, 20, 29, 38, ... up to %1)"_s.arg(kMaxResNetDepth);
        fields.fail(u"depth", u"expected "_s + what + u", got "_s + describeJsonValue(value));
        return;
    }
    depth = int(*integer);
}

QJsonArray toJsonArray(const auto& values)
{
    QJsonArray array;
    for (const auto value : values)
        array.append(qint64(value));
    return array;
}

} // namespace

QString architectureName(Architecture arch)
{
    switch (arch) {
    case Architecture::Mlp:
        return u"mlp"_s;
    case Architecture::Cnn:
        return u"cnn"_s;
    case Architecture::ResNet:
        return u"resnet"_s;
    case Architecture::TorchScript:
        return u"torchscript"_s;
    }
    return u"unknown"_s;
}

QString ModelSpec::archiveSha256() const
{
    return torchscript.startsWith(u"sha256:") ? torchscript.mid(7) : QString();
}

QString ModelSpec::archiveFile() const
{
    return !archivePath.isEmpty() || torchscript.startsWith(u"sha256:") ? archivePath : torchscript;
}

bool ModelSpec::operator==(const ModelSpec& other) const
{
    return arch == other.arch && inputShape == other.inputShape && numClasses == other.numClasses &&
           hidden == other.hidden && channels == other.channels && depth == other.depth && width == other.width &&
           torchscript == other.torchscript;
}

Result<ModelSpec> ModelSpec::fromJson(const QJsonObject& json, const QString& path)
{
    JsonFields fields(json, path);
    fields.allowOnly({u"arch"_s, u"input_shape"_s, u"num_classes"_s, u"hidden"_s, u"channels"_s, u"depth"_s,
                      u"width"_s, u"torchscript"_s});

    ModelSpec spec;
    int arch = int(Architecture::TorchScript);
    const bool script = fields.has(u"torchscript");
    fields.readChoice(u"arch", arch, architectureNames(), script ? Need::Optional : Need::Required);
    if (!fields.ok())
        return fields.failure();
    spec.arch = Architecture(arch);
    if (script && spec.arch != Architecture::TorchScript)
        fields.refuse(u"torchscript", u"names a TorchScript archive, which arch \"%1\" does not take"_s.arg(
                                          architectureName(spec.arch)));
    if (spec.arch == Architecture::TorchScript) {
        for (const char16_t* field : {u"hidden", u"channels", u"depth", u"width"})
            fields.refuse(QStringView(field), u"a TorchScript model's sizes are in its archive"_s);
        fields.readString(u"torchscript", spec.torchscript, Need::Required, 4096);
        if (fields.ok() && spec.torchscript.trimmed().isEmpty())
            fields.fail(u"torchscript", u"expected the path of an archive written by torch.jit.save"_s);
        if (fields.ok() && spec.torchscript.startsWith(u"sha256:")) {
            static const QRegularExpression hex(u"^[0-9a-f]{64}$"_s);
            if (!hex.match(spec.archiveSha256()).hasMatch())
                fields.fail(u"torchscript", u"expected \"sha256:\" and 64 lowercase hex digits"_s);
        }
    }

    // The fields of another architecture are refused, not ignored: a "depth" on a cnn means the admin expects
    // a model this spec would not build.
    if (spec.arch == Architecture::ResNet)
        fields.refuse(u"hidden", onlyUsedBy(u"\"mlp\" and \"cnn\""_s));
    if (spec.arch != Architecture::Cnn)
        fields.refuse(u"channels", onlyUsedBy(u"\"cnn\""_s));
    if (spec.arch != Architecture::ResNet) {
        fields.refuse(u"depth", onlyUsedBy(u"\"resnet\""_s));
        fields.refuse(u"width", onlyUsedBy(u"\"resnet\""_s));
    }

    // The input shape and the classes come from the dataset: a default would silently mismatch it.
    fields.readIntList(u"input_shape", spec.inputShape, kShapeDim, Need::Required, 1, 4);
    fields.readInt(u"num_classes", spec.numClasses, kNumClasses, Need::Required);
    switch (spec.arch) {
    case Architecture::Cnn:
        fields.readIntList(u"channels", spec.channels, kConvChannels, Need::Optional, 2, 2);
        [[fallthrough]];
    case Architecture::Mlp:
        fields.readIntList(u"hidden", spec.hidden, kHiddenWidth);
        break;
    case Architecture::ResNet:
        readDepth(fields, spec.depth);
        fields.readInt(u"width", spec.width, kResNetWidth);
        break;
    case Architecture::TorchScript:
        break;
    }
    if (fields.ok() && (spec.arch == Architecture::Cnn || spec.arch == Architecture::ResNet))
        checkImageShape(fields, spec);
    if (!fields.ok())
        return fields.failure();
    return spec;
}

QJsonObject ModelSpec::toJson() const
{
    QJsonObject json{
        {u"arch"_s, architectureName(arch)},
        {u"input_shape"_s, toJsonArray(inputShape)},
        {u"num_classes"_s, numClasses},
    };
    switch (arch) {
    case Architecture::Cnn:
        json.insert(u"channels"_s, toJsonArray(channels));
        [[fallthrough]];
    case Architecture::Mlp:
        json.insert(u"hidden"_s, toJsonArray(hidden));
        break;
    case Architecture::ResNet:
        json.insert(u"depth"_s, depth);
        json.insert(u"width"_s, width);
        break;
    case Architecture::TorchScript:
        json.insert(u"torchscript"_s, torchscript);
        break;
    }
    return json;
}

} // namespace gleaner
