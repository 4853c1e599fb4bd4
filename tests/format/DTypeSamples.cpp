#include "DTypeSamples.h"

#include <QFloat16>

#include <bit>
#include <cmath>
#include <cstring>

using namespace Qt::StringLiterals;

// Element bytes are written and read with memcpy, which is the file's little-endian order only on a
// little-endian host; every platform Gleaner ships on is one.
static_assert(std::endian::native == std::endian::little);

namespace gleaner::test {
namespace {

template <typename T> void appendRaw(QByteArray& out, T value)
{
    out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T> T readRaw(const char* p)
{
    T value;
    std::memcpy(&value, p, sizeof(T)); // memcpy: tensors from other writers need not be aligned
    return value;
}

bool sameReal(double got, const QString& expected)
{
    const double want = expected.toDouble();
    return std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
}

bool sameElement(DType dtype, const char* p, const QString& expected)
{
    switch (dtype) {
    case DType::Bool:
        return readRaw<quint8>(p) == (expected == u"true" ? 1 : 0);
    case DType::U8:
        return readRaw<quint8>(p) == expected.toLongLong();
    case DType::I8:
        return readRaw<qint8>(p) == expected.toLongLong();
    case DType::I16:
        return readRaw<qint16>(p) == expected.toLongLong();
    case DType::U16:
        return readRaw<quint16>(p) == expected.toLongLong();
    case DType::I32:
        return readRaw<qint32>(p) == expected.toLongLong();
    case DType::U32:
        return readRaw<quint32>(p) == expected.toLongLong();
    case DType::I64:
        return readRaw<qint64>(p) == expected.toLongLong();
    case DType::U64:
        return readRaw<quint64>(p) == expected.toULongLong();
    case DType::F16:
        return sameReal(double(float(readRaw<qfloat16>(p))), expected);
    case DType::BF16:
        return sameReal(double(std::bit_cast<float>(quint32(readRaw<quint16>(p)) << 16)), expected);
    case DType::F32:
        return sameReal(double(readRaw<float>(p)), expected);
    case DType::F64:
        return sameReal(readRaw<double>(p), expected);
    }
    return false;
}

} // namespace

QList<DTypeSample> dtypeSamples()
{
    return {
        {u"BOOL"_s, DType::Bool, {2, 2}, {u"true"_s, u"false"_s, u"false"_s, u"true"_s}},
        {u"U8"_s, DType::U8, {2, 3}, {u"0"_s, u"1"_s, u"127"_s, u"128"_s, u"254"_s, u"255"_s}},
        {u"I8"_s, DType::I8, {5}, {u"-128"_s, u"-1"_s, u"0"_s, u"1"_s, u"127"_s}},
        {u"I16"_s, DType::I16, {4}, {u"-32768"_s, u"-2"_s, u"300"_s, u"32767"_s}},
        {u"U16"_s, DType::U16, {3}, {u"0"_s, u"40000"_s, u"65535"_s}},
        {u"F16"_s, DType::F16, {5}, {u"1.5"_s, u"-2"_s, u"65504"_s, u"-0.0"_s, u"inf"_s}},
        {u"BF16"_s, DType::BF16, {4}, {u"1.5"_s, u"-2"_s, u"3.3895313892515355e+38"_s, u"-inf"_s}},
        {u"I32"_s, DType::I32, {4}, {u"-2147483648"_s, u"2147483647"_s, u"0"_s, u"42"_s}},
        {u"U32"_s, DType::U32, {3}, {u"0"_s, u"4294967295"_s, u"123456789"_s}},
        {u"F32"_s,
         DType::F32,
         {2, 3},
         {u"1.5"_s, u"-2"_s, u"3.4028234663852886e+38"_s, u"1.401298464324817e-45"_s, u"-0.0"_s, u"nan"_s}},
        {u"F64"_s, DType::F64, {3}, {u"0.1"_s, u"-1e308"_s, u"5e-324"_s}},
        {u"I64"_s, DType::I64, {3}, {u"-9223372036854775808"_s, u"9223372036854775807"_s, u"0"_s}},
        {u"U64"_s, DType::U64, {2}, {u"18446744073709551615"_s, u"1"_s}},
        {u"F32 scalar"_s, DType::F32, {}, {u"3.25"_s}},
        {u"F32 zero-sized"_s, DType::F32, {0, 3}, {}},
        {u"I64 zero-sized"_s, DType::I64, {4, 0}, {}},
    };
}

QByteArray encodeValues(DType dtype, const QStringList& values)
{
    QByteArray out;
    for (const QString& text : values) {
        const double real = text.toDouble();
        switch (dtype) {
        case DType::Bool:
            appendRaw<quint8>(out, text == u"true" ? 1 : 0);
            break;
        case DType::U8:
            appendRaw(out, quint8(text.toUShort()));
            break;
        case DType::I8:
            appendRaw(out, qint8(text.toShort()));
            break;
        case DType::I16:
            appendRaw(out, text.toShort());
            break;
        case DType::U16:
            appendRaw(out, text.toUShort());
            break;
        case DType::F16:
            appendRaw(out, qfloat16(float(real)));
            break;
        case DType::BF16: // the samples are exact in BF16, so dropping the low F32 bits does not round
            appendRaw(out, quint16(std::bit_cast<quint32>(float(real)) >> 16));
            break;
        case DType::I32:
            appendRaw(out, text.toInt());
            break;
        case DType::U32:
            appendRaw(out, text.toUInt());
            break;
        case DType::F32:
            appendRaw(out, float(real));
            break;
        case DType::F64:
            appendRaw(out, real);
            break;
        case DType::I64:
            appendRaw(out, text.toLongLong());
            break;
        case DType::U64:
            appendRaw(out, text.toULongLong());
            break;
        }
    }
    return out;
}

QString compareSample(const TensorBundle& bundle, const DTypeSample& sample)
{
    const TensorEntry* entry = bundle.find(sample.name);
    if (!entry)
        return u"no tensor \"%1\""_s.arg(sample.name);
    if (entry->dtype != sample.dtype || entry->shape != sample.shape)
        return u"\"%1\" is %2 %3, expected %4 %5"_s.arg(sample.name, dtypeName(entry->dtype),
                                                        shapeToString(entry->shape), dtypeName(sample.dtype),
                                                        shapeToString(sample.shape));
    const QByteArrayView bytes = bundle.data(*entry);
    const int size = dtypeSize(sample.dtype);
    if (bytes.size() != sample.values.size() * size)
        return u"\"%1\" holds %2 bytes, expected %3"_s.arg(sample.name)
            .arg(bytes.size())
            .arg(sample.values.size() * size);
    for (qsizetype i = 0; i < sample.values.size(); ++i) {
        if (!sameElement(sample.dtype, bytes.data() + i * size, sample.values[i]))
            return u"\"%1\" value %2 differs from %3"_s.arg(sample.name).arg(i).arg(sample.values[i]);
    }
    return {};
}

TensorBundle sampleBundle()
{
    TensorBundle bundle;
    for (const DTypeSample& sample : dtypeSamples()) {
        if (!bundle.add(sample.name, sample.dtype, sample.shape, encodeValues(sample.dtype, sample.values)))
            qFatal("bad sample %s", qPrintable(sample.name));
    }
    bundle.setMetadata(u"format"_s, u"pt"_s);
    bundle.setMetadata(u"note \u00fc"_s, u"\"quoted\" \\ line\nbreak \x1f \U0001F600"_s);
    return bundle;
}

} // namespace gleaner::test
