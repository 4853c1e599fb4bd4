#include "format/SafeTensors.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QJsonValue>
#include <QSaveFile>
#include <QSet>
#include <QStringList>
#include <QtEndian>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

namespace gleaner::SafeTensors {
namespace {

constexpr qint64 kLengthBytes = 8;
constexpr qint64 kDataAlignment = 8;
constexpr QStringView kMetadataKey = u"__metadata__";

// Names come from untrusted files: a megabyte-long name must not make a megabyte-long message.
QString quoted(const QString& name)
{
    constexpr qsizetype kMaxShown = 120;
    if (name.size() <= kMaxShown)
        return u'"' + name + u'"';
    return u'"' + name.left(kMaxShown) + QStringLiteral("...\"");
}

QString tensorLabel(const QString& name)
{
    return QStringLiteral("tensor ") + quoted(name);
}

QString offsetsText(qint64 begin, qint64 end)
{
    return QStringLiteral("[%1, %2]").arg(begin).arg(end);
}

// ---- reader ----------------------------------------------------------------------------------------------

// Decodes one JSON string literal (quotes included) taken from text Qt has already accepted.
std::optional<QString> decodeJsonString(QByteArrayView literal)
{
    if (literal.size() < 2)
        return std::nullopt;
    const QByteArrayView inner = literal.sliced(1, literal.size() - 2);
    if (!inner.contains('\\'))
        return QString::fromUtf8(inner); // the common case: no escapes, and the UTF-8 was checked already
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson('[' + literal.toByteArray() + ']', &error);
    if (error.error != QJsonParseError::NoError || !doc.array().at(0).isString())
        return std::nullopt;
    return doc.array().at(0).toString();
}

// The top-level keys in the order the file lists them. QJsonObject sorts its keys and silently keeps the last
// of two duplicates, so both the order and any duplicate have to be read from the text. Qt has accepted the
// text as JSON already, so tracking strings and nesting is enough to find every key: it is the string that
// precedes a ':' at depth 1.
Result<QStringList> topLevelKeys(QByteArrayView json)
{
    QStringList keys;
    int depth = 0;
    QByteArrayView lastString;
    for (qsizetype i = 0; i < json.size(); ++i) {
        switch (json[i]) {
        case '"': {
            const qsizetype begin = i;
            for (++i; i < json.size() && json[i] != '"'; ++i) {
                if (json[i] == '\\')
                    ++i;
            }
            if (i >= json.size())
                return fail(QStringLiteral("header has an unterminated string"));
            lastString = json.sliced(begin, i + 1 - begin);
            break;
        }
        case '{':
        case '[':
            ++depth;
            break;
        case '}':
        case ']':
            --depth;
            break;
        case ':':
            if (depth == 1) {
                const auto key = decodeJsonString(lastString);
                if (!key)
                    return fail(QStringLiteral("header has a key that cannot be decoded"));
                keys.append(*key);
            }
            break;
        default:
            break;
        }
    }
    return keys;
}

// Shape dimensions and offsets: non-negative whole numbers that fit in qint64.
Result<qint64> readCount(const QJsonValue& value, const QString& what)
{
    if (!value.isDouble())
        return fail(what + QStringLiteral(" is not a number"));
    const qint64 count = value.toInteger(-1); // -1 also stands for "not a whole number within qint64"
    if (count >= 0)
        return count;
    const QString text = QString::number(value.toDouble(), 'g', 17);
    if (value.toDouble() < 0)
        return fail(QStringLiteral("%1 is negative (%2)").arg(what, text));
    return fail(QStringLiteral("%1 (%2) is not a whole number that fits in 64 bits").arg(what, text));
}

// One header entry. The returned offset is still relative to the data buffer.
Result<TensorEntry> parseEntry(const QString& name, const QJsonValue& value, qint64 dataLength)
{
    const QString label = tensorLabel(name);
    auto bad = [&label](const QString& why) { return fail(label + QStringLiteral(": ") + why); };
    if (!value.isObject())
        return bad(QStringLiteral("entry is not a JSON object"));
    const QJsonObject object = value.toObject();

    const QJsonValue dtypeValue = object.value(u"dtype");
    if (dtypeValue.isUndefined())
        return bad(QStringLiteral("has no \"dtype\""));
    if (!dtypeValue.isString())
        return bad(QStringLiteral("\"dtype\" is not a string"));
    const auto dtype = dtypeFromName(dtypeValue.toString());
    if (!dtype)
        return bad(QStringLiteral("unknown dtype %1 (expected one of BOOL, U8, I8, I16, U16, F16, BF16, "
                                  "I32, U32, F32, F64, I64, U64)")
                       .arg(quoted(dtypeValue.toString())));

    const QJsonValue shapeValue = object.value(u"shape");
    if (shapeValue.isUndefined())
        return bad(QStringLiteral("has no \"shape\""));
    if (!shapeValue.isArray())
        return bad(QStringLiteral("\"shape\" is not an array"));
    const QJsonArray shapeArray = shapeValue.toArray();
    QList<qint64> shape;
    shape.reserve(shapeArray.size());
    for (qsizetype i = 0; i < shapeArray.size(); ++i) {
        const auto dim = readCount(shapeArray.at(i), QStringLiteral("shape dimension %1").arg(i));
        if (!dim)
            return bad(dim.error());
        shape.append(*dim);
    }

    const QJsonValue offsetsValue = object.value(u"data_offsets");
    if (offsetsValue.isUndefined())
        return bad(QStringLiteral("has no \"data_offsets\""));
    if (!offsetsValue.isArray())
        return bad(QStringLiteral("\"data_offsets\" is not an array"));
    const QJsonArray offsets = offsetsValue.toArray();
    if (offsets.size() != 2)
        return bad(
            QStringLiteral("\"data_offsets\" holds %1 values instead of [BEGIN, END]").arg(offsets.size()));
    const auto begin = readCount(offsets.at(0), QStringLiteral("data_offsets BEGIN"));
    if (!begin)
        return bad(begin.error());
    const auto end = readCount(offsets.at(1), QStringLiteral("data_offsets END"));
    if (!end)
        return bad(end.error());
    if (*begin > *end)
        return bad(QStringLiteral("data_offsets %1 end before they begin").arg(offsetsText(*begin, *end)));
    if (*end > dataLength)
        return bad(QStringLiteral("data_offsets %1 run past the end of the %2-byte data buffer")
                       .arg(offsetsText(*begin, *end))
                       .arg(dataLength));

    const auto count = shapeElementCount(shape);
    if (!count)
        return bad(
            QStringLiteral("shape %1 has more elements than 64 bits can count").arg(shapeToString(shape)));
    const int elementSize = dtypeSize(*dtype);
    if (*count > std::numeric_limits<qint64>::max() / elementSize)
        return bad(QStringLiteral("shape %1 of %2 needs more bytes than 64 bits can count")
                       .arg(shapeToString(shape), dtypeName(*dtype)));
    const qint64 byteSize = *count * elementSize;
    if (byteSize != *end - *begin)
        return bad(QStringLiteral("shape %1 holds %2 %3 values = %4 bytes, but data_offsets %5 span %6")
                       .arg(shapeToString(shape))
                       .arg(*count)
                       .arg(dtypeName(*dtype))
                       .arg(byteSize)
                       .arg(offsetsText(*begin, *end))
                       .arg(*end - *begin));
    return TensorEntry{name, *dtype, shape, *begin, byteSize};
}

Result<QMap<QString, QString>> parseMetadata(const QJsonValue& value)
{
    if (!value.isObject())
        return fail(QStringLiteral("\"__metadata__\" is not a JSON object"));
    QMap<QString, QString> metadata;
    const QJsonObject object = value.toObject();
    for (auto it = object.begin(); it != object.end(); ++it) {
        if (!it.value().isString())
            return fail(QStringLiteral("\"__metadata__\" value of %1 is not a string").arg(quoted(it.key())));
        if (!it.key().isValidUtf16() || !it.value().toString().isValidUtf16())
            return fail(QStringLiteral("\"__metadata__\" entry %1 holds an unpaired surrogate escape")
                            .arg(quoted(it.key())));
        metadata.insert(it.key(), it.value().toString());
    }
    return metadata;
}

// The reference's rule: sorted by offsets, each tensor starts where the previous one ended, the first at 0,
// and the last ends at the end of the buffer. This refuses overlaps (two tensors sharing bytes), holes and
// trailing bytes, so every byte of the file belongs to exactly one tensor.
Status checkContiguous(const QList<TensorEntry>& entries, qint64 dataLength)
{
    QList<qsizetype> order(entries.size());
    std::iota(order.begin(), order.end(), qsizetype(0));
    std::sort(order.begin(), order.end(), [&entries](qsizetype a, qsizetype b) {
        const TensorEntry& x = entries[a];
        const TensorEntry& y = entries[b];
        return std::pair(x.offset, x.offset + x.byteSize) < std::pair(y.offset, y.offset + y.byteSize);
    });
    qint64 expected = 0;
    const TensorEntry* previous = nullptr;
    for (qsizetype index : order) {
        const TensorEntry& entry = entries[index];
        const QString range = offsetsText(entry.offset, entry.offset + entry.byteSize);
        if (entry.offset < expected)
            return fail(QStringLiteral("%1: data_offsets %2 overlap %3, which ends at %4")
                            .arg(tensorLabel(entry.name), range, tensorLabel(previous->name))
                            .arg(expected));
        if (entry.offset > expected)
            return fail(QStringLiteral("%1: data_offsets %2 leave a hole of %3 bytes after %4")
                            .arg(tensorLabel(entry.name), range)
                            .arg(entry.offset - expected)
                            .arg(previous ? tensorLabel(previous->name)
                                          : QStringLiteral("the start of the data buffer")));
        expected = entry.offset + entry.byteSize;
        previous = &entry;
    }
    if (expected != dataLength)
        return fail(
            QStringLiteral("the data buffer holds %1 bytes but the tensors cover %2: %3 trailing bytes")
                .arg(dataLength)
                .arg(expected)
                .arg(dataLength - expected));
    return {};
}

// ---- writer ----------------------------------------------------------------------------------------------

void appendJsonString(QByteArray& out, const QString& text)
{
    static constexpr char kHex[] = "0123456789abcdef";
    out += '"';
    for (const char c : text.toUtf8()) {
        const auto byte = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (byte < 0x20) {
            out += "\\u00";
            out += kHex[byte >> 4];
            out += kHex[byte & 0xf];
        } else {
            out += c;
        }
    }
    out += '"';
}

struct PlannedLayout
{
    QByteArray lengthAndHeader; // the 8-byte length followed by the padded header
    QList<qsizetype> dataOrder; // indexes into entries(), in the order their bytes are written
};

// The header and data order for tensors that checkDescribed() accepted.
PlannedLayout planLayout(const QList<TensorEntry>& entries, const QMap<QString, QString>& metadata)
{
    PlannedLayout layout;
    layout.dataOrder.resize(entries.size());
    std::iota(layout.dataOrder.begin(), layout.dataOrder.end(), qsizetype(0));
    // Element sizes are powers of two and every tensor's byte size is a multiple of its own, so placing the
    // largest elements first keeps every tensor aligned for its type (the reference writer does the same).
    std::stable_sort(layout.dataOrder.begin(), layout.dataOrder.end(), [&entries](qsizetype a, qsizetype b) {
        return dtypeSize(entries[a].dtype) > dtypeSize(entries[b].dtype);
    });
    QList<qint64> relativeOffset(entries.size());
    qint64 position = 0;
    for (qsizetype index : layout.dataOrder) {
        relativeOffset[index] = position;
        position += entries[index].byteSize;
    }

    QByteArray& out = layout.lengthAndHeader;
    out.fill('\0', kLengthBytes);
    out += '{';
    bool first = true;
    if (!metadata.isEmpty()) {
        out += "\"__metadata__\":{";
        for (auto it = metadata.begin(); it != metadata.end(); ++it) {
            if (it != metadata.begin())
                out += ',';
            appendJsonString(out, it.key());
            out += ':';
            appendJsonString(out, it.value());
        }
        out += '}';
        first = false;
    }
    for (qsizetype i = 0; i < entries.size(); ++i) {
        const TensorEntry& entry = entries[i];
        if (!first)
            out += ',';
        first = false;
        appendJsonString(out, entry.name);
        out += ":{\"dtype\":\"" + dtypeName(entry.dtype).toLatin1() + "\",\"shape\":[";
        for (qsizetype d = 0; d < entry.shape.size(); ++d)
            out += (d ? "," : "") + QByteArray::number(entry.shape[d]);
        out += "],\"data_offsets\":[" + QByteArray::number(relativeOffset[i]) + ',' +
               QByteArray::number(relativeOffset[i] + entry.byteSize) + "]}";
    }
    out += '}';
    // Spaces after the JSON are whitespace to every JSON parser and put the data buffer on an 8-byte
    // boundary.
    const qsizetype padding = (kDataAlignment - out.size() % kDataAlignment) % kDataAlignment;
    out.append(padding, ' ');
    qToLittleEndian<quint64>(quint64(out.size() - kLengthBytes), out.data());
    return layout;
}

// What the writer needs of tensors before it plans a layout; `bufferSize` (when the bytes are at hand) bounds
// where each one lies.
Status checkDescribed(const QList<TensorEntry>& entries, const QMap<QString, QString>& metadata,
                      std::optional<qint64> bufferSize)
{
    QSet<QString> names;
    names.reserve(entries.size());
    for (const TensorEntry& entry : entries) {
        const QString label = tensorLabel(entry.name);
        if (entry.name == kMetadataKey)
            return fail(label + QStringLiteral(": the name is reserved for the file's metadata"));
        if (!entry.name.isValidUtf16())
            return fail(label + QStringLiteral(": the name holds an unpaired surrogate"));
        if (names.contains(entry.name))
            return fail(label + QStringLiteral(": the name appears twice"));
        names.insert(entry.name);
        const auto count = shapeElementCount(entry.shape);
        const int elementSize = dtypeSize(entry.dtype);
        if (!count || *count > std::numeric_limits<qint64>::max() / elementSize ||
            *count * elementSize != entry.byteSize)
            return fail(label + QStringLiteral(": shape %1 of %2 does not match its %3 bytes")
                                    .arg(shapeToString(entry.shape), dtypeName(entry.dtype))
                                    .arg(entry.byteSize));
        if (bufferSize &&
            (entry.offset < 0 || entry.offset > *bufferSize || entry.byteSize > *bufferSize - entry.offset))
            return fail(label + QStringLiteral(": bytes [%1, +%2) lie outside the %3-byte buffer")
                                    .arg(entry.offset)
                                    .arg(entry.byteSize)
                                    .arg(*bufferSize));
    }
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
        if (!it.key().isValidUtf16() || !it.value().isValidUtf16())
            return fail(QStringLiteral("metadata %1 holds an unpaired surrogate").arg(quoted(it.key())));
    }
    return {};
}

Result<PlannedLayout> planChecked(const QList<TensorEntry>& entries, const QMap<QString, QString>& metadata,
                           std::optional<qint64> bufferSize)
{
    if (Status described = checkDescribed(entries, metadata, bufferSize); !described)
        return fail(described.error());
    PlannedLayout layout = planLayout(entries, metadata);
    // A reader, ours included, refuses a longer header, so writing one would only make an unreadable file.
    if (layout.lengthAndHeader.size() - kLengthBytes > kMaxHeaderBytes)
        return fail(QStringLiteral("the header would be %1 bytes, over the limit of %2 bytes")
                        .arg(layout.lengthAndHeader.size() - kLengthBytes)
                        .arg(kMaxHeaderBytes));
    return layout;
}

Result<PlannedLayout> plan(const TensorBundle& bundle)
{
    return planChecked(bundle.entries(), bundle.metadata(), bundle.buffer().size());
}

} // namespace

Result<Header> parseHeader(QByteArrayView fileStart, qint64 fileSize)
{
    if (fileSize < kLengthBytes)
        return fail(
            QStringLiteral("the file is %1 bytes, shorter than the 8-byte header length a safetensors "
                           "file starts with")
                .arg(fileSize));
    const quint64 headerLength = qFromLittleEndian<quint64>(fileStart.data());
    if (headerLength > quint64(kMaxHeaderBytes))
        return fail(QStringLiteral("header length %1 is over the limit of %2 bytes")
                        .arg(headerLength)
                        .arg(kMaxHeaderBytes));
    if (headerLength > quint64(fileSize - kLengthBytes))
        return fail(QStringLiteral("header length %1 runs past the end of the file (%2 bytes follow the "
                                   "length)")
                        .arg(headerLength)
                        .arg(fileSize - kLengthBytes));
    const qint64 dataStart = kLengthBytes + qint64(headerLength);
    const qint64 dataLength = fileSize - dataStart;
    if (fileStart.size() < dataStart)
        return fail(QStringLiteral("the file ended inside its header; was it changed while it was read?"));
    const QByteArrayView header(fileStart.data() + kLengthBytes, qsizetype(headerLength));

    if (header.isEmpty() || header.front() != '{')
        return fail(QStringLiteral("the header does not start with '{'"));
    if (!header.isValidUtf8())
        return fail(QStringLiteral("the header is not valid UTF-8"));
    QJsonParseError jsonError;
    const QJsonDocument document =
        QJsonDocument::fromJson(QByteArray::fromRawData(header.data(), header.size()), &jsonError);
    if (jsonError.error != QJsonParseError::NoError)
        return fail(QStringLiteral("the header is not valid JSON: %1 at byte %2 of the header")
                        .arg(jsonError.errorString())
                        .arg(jsonError.offset));
    if (!document.isObject())
        return fail(QStringLiteral("the header is not a JSON object"));
    const QJsonObject object = document.object();

    auto keys = topLevelKeys(header);
    if (!keys)
        return fail(keys.error());
    if (keys->size() != object.size()) {
        QSet<QString> seen;
        for (const QString& key : std::as_const(*keys)) {
            if (seen.contains(key))
                return fail(QStringLiteral("the header lists %1 more than once").arg(quoted(key)));
            seen.insert(key);
        }
        return fail(
            QStringLiteral("the header lists %1 keys but holds %2").arg(keys->size()).arg(object.size()));
    }

    QList<TensorEntry> entries;
    entries.reserve(keys->size());
    QMap<QString, QString> metadata;
    for (const QString& key : std::as_const(*keys)) {
        const QJsonValue value = object.value(key);
        if (value.isUndefined())
            return fail(QStringLiteral("the header key %1 cannot be looked up").arg(quoted(key)));
        if (key == kMetadataKey) {
            auto parsed = parseMetadata(value);
            if (!parsed)
                return fail(parsed.error());
            metadata = std::move(*parsed);
            continue;
        }
        if (!key.isValidUtf16())
            return fail(
                QStringLiteral("a tensor name holds an unpaired surrogate escape: %1").arg(quoted(key)));
        auto entry = parseEntry(key, value, dataLength);
        if (!entry)
            return fail(entry.error());
        entries.append(std::move(*entry));
    }
    if (Status contiguous = checkContiguous(entries, dataLength); !contiguous)
        return fail(contiguous.error());

    for (TensorEntry& entry : entries)
        entry.offset += dataStart;
    return Header{std::move(entries), std::move(metadata), dataStart};
}

Result<TensorBundle> parse(QByteArray fileBytes)
{
    if (fileBytes.size() < kLengthBytes)
        return fail(
            QStringLiteral("the file is %1 bytes, shorter than the 8-byte header length a safetensors "
                           "file starts with")
                .arg(fileBytes.size()));
    auto header = parseHeader(fileBytes, fileBytes.size());
    if (!header)
        return fail(header.error());
    return TensorBundle::fromBuffer(std::move(fileBytes), std::move(header->entries), std::move(header->metadata));
}

Result<Header> loadHeader(const QString& path)
{
    if (QFileInfo(path).isDir())
        return fail(path + QStringLiteral(": is a folder, not a safetensors file"));
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot open for reading: %2").arg(path, file.errorString()));
    const qint64 size = file.size();
    QByteArray start = file.read(kLengthBytes);
    if (start.size() < kLengthBytes)
        return fail(QStringLiteral("%1: the file is %2 bytes, shorter than the 8-byte header length a "
                                   "safetensors file starts with")
                        .arg(path)
                        .arg(size));
    // Only as much as the header claims, and never past the limit or the file: parseHeader() names the
    // problem of a length that is too large.
    const quint64 claimed = qFromLittleEndian<quint64>(start.constData());
    const qint64 wanted = qint64(std::min<quint64>(claimed, quint64(std::min(kMaxHeaderBytes, size - kLengthBytes))));
    start += file.read(wanted);
    return parseHeader(start, size).context(path);
}

Result<TensorBundle> load(const QString& path)
{
    QFile file(path);
    if (QFileInfo(path).isDir())
        return fail(path + QStringLiteral(": is a folder, not a safetensors file"));
    // Unbuffered: QFile's own buffer would be a second copy of every byte.
    if (!file.open(QIODevice::ReadOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot open for reading: %2").arg(path, file.errorString()));
    const qint64 size = file.size();
    if (size > std::numeric_limits<qsizetype>::max())
        return fail(QStringLiteral("%1: the file is too large (%2 bytes)").arg(path).arg(size));
    QByteArray bytes(qsizetype(size), Qt::Uninitialized);
    qint64 done = 0;
    while (done < size) {
        const qint64 got = file.read(bytes.data() + done, size - done);
        if (got < 0)
            return fail(QStringLiteral("%1: read failed: %2").arg(path, file.errorString()));
        if (got == 0)
            return fail(QStringLiteral("%1: the file ended after %2 of %3 bytes; was it changed while it was "
                                       "read?")
                            .arg(path)
                            .arg(done)
                            .arg(size));
        done += got;
    }
    return parse(std::move(bytes)).context(path);
}

Status checkWritable(const TensorBundle& bundle)
{
    if (auto layout = plan(bundle); !layout)
        return fail(layout.error());
    return {};
}

QByteArray serialize(const TensorBundle& bundle)
{
    const auto planned = plan(bundle);
    if (!planned)
        return {};
    const PlannedLayout& layout = *planned;
    QByteArray file;
    file.reserve(layout.lengthAndHeader.size() + bundle.tensorBytes());
    file += layout.lengthAndHeader;
    for (qsizetype index : layout.dataOrder)
        file += bundle.data(bundle.entries()[index]);
    return file;
}

Result<Layout> layout(const QList<TensorEntry>& entries, const QMap<QString, QString>& metadata)
{
    auto planned = planChecked(entries, metadata, std::nullopt);
    if (!planned)
        return fail(planned.error());
    Layout out;
    out.lengthAndHeader = planned->lengthAndHeader;
    out.offsets.resize(entries.size());
    qint64 position = out.lengthAndHeader.size();
    for (qsizetype index : planned->dataOrder) {
        out.offsets[index] = position;
        position += entries[index].byteSize;
    }
    return out;
}

Status save(const QString& path, const TensorBundle& bundle)
{
    const auto planned = plan(bundle);
    if (!planned)
        return fail(path + QStringLiteral(": ") + planned.error());
    const PlannedLayout& layout = *planned;
    QSaveFile file(path);
    // Unbuffered: tensors go from the bundle to the kernel without a stop in QFileDevice's buffer.
    if (!file.open(QIODevice::WriteOnly | QIODevice::Unbuffered))
        return fail(QStringLiteral("%1: cannot open for writing: %2").arg(path, file.errorString()));
    auto write = [&file](QByteArrayView bytes) {
        return bytes.isEmpty() || file.write(bytes.data(), bytes.size()) == bytes.size();
    };
    bool written = write(layout.lengthAndHeader);
    for (qsizetype i = 0; written && i < layout.dataOrder.size(); ++i)
        written = write(bundle.data(bundle.entries()[layout.dataOrder[i]]));
    if (!written)
        return fail(QStringLiteral("%1: write failed: %2").arg(path, file.errorString()));
    if (!file.commit())
        return fail(QStringLiteral("%1: cannot finish writing: %2").arg(path, file.errorString()));
    return {};
}

} // namespace gleaner::SafeTensors
