#include "ml/data/NumPyReader.h"

#include <QFile>

#include <zlib.h>

#include <cstring>
#include <optional>

namespace gleaner::ml::NumPy {
namespace {

// --- .npy --------------------------------------------------------------------------------------------------------

struct Header
{
    QString descr;
    bool fortranOrder = false;
    QList<qint64> shape;
};

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }. This parses
// exactly that grammar, nothing Python would evaluate beyond it.
class HeaderParser
{
public:
    explicit HeaderParser(QByteArrayView text) : m_text(text) {}

    Result<Header> parse()
    {
        Header header;
        bool seenDescr = false, seenOrder = false, seenShape = false;
        skipSpace();
        if (!take('{'))
            return problem(QStringLiteral("does not start with '{'"));
        for (;;) {
            skipSpace();
            if (take('}'))
                break;
            auto key = string();
            if (!key)
                return problem(QStringLiteral("has a key that is not a quoted string"));
            skipSpace();
            if (!take(':'))
                return problem(QStringLiteral("has no ':' after '%1'").arg(*key));
            skipSpace();
            if (*key == u"descr") {
                auto value = string();
                if (!value)
                    return problem(QStringLiteral("has a 'descr' that is not a string (a structured dtype?)"));
                header.descr = *value;
                seenDescr = true;
            } else if (*key == u"fortran_order") {
                if (takeWord("True"))
                    header.fortranOrder = true;
                else if (takeWord("False"))
                    header.fortranOrder = false;
                else
                    return problem(QStringLiteral("has a 'fortran_order' that is neither True nor False"));
                seenOrder = true;
            } else if (*key == u"shape") {
                auto shape = tuple();
                if (!shape)
                    return problem(QStringLiteral("has a 'shape' that is not a tuple of non-negative integers"));
                header.shape = *shape;
                seenShape = true;
            } else {
                return problem(QStringLiteral("has an unknown key '%1'").arg(*key));
            }
            skipSpace();
            if (take(','))
                continue;
            skipSpace();
            if (take('}'))
                break;
            return problem(QStringLiteral("has something other than ',' or '}' after a value"));
        }
        while (m_at < m_text.size() && (m_text[m_at] == ' ' || m_text[m_at] == '\n' || m_text[m_at] == '\t' ||
                                        m_text[m_at] == '\r' || m_text[m_at] == '\0'))
            ++m_at;
        if (m_at != m_text.size())
            return problem(QStringLiteral("has text after the dictionary"));
        if (!seenDescr || !seenOrder || !seenShape)
            return problem(QStringLiteral("lacks 'descr', 'fortran_order' or 'shape'"));
        return header;
    }

private:
    Error problem(const QString& what) const { return Error{QStringLiteral("the header %1").arg(what)}; }
    void skipSpace()
    {
        while (m_at < m_text.size() && (m_text[m_at] == ' ' || m_text[m_at] == '\t' || m_text[m_at] == '\n'))
            ++m_at;
    }
    bool take(char c)
    {
        if (m_at < m_text.size() && m_text[m_at] == c) {
            ++m_at;
            return true;
        }
        return false;
    }
    bool takeWord(const char* word)
    {
        const qsizetype n = qsizetype(std::strlen(word));
        if (m_text.size() - m_at >= n && std::memcmp(m_text.data() + m_at, word, size_t(n)) == 0) {
            m_at += n;
            return true;
        }
        return false;
    }
    std::optional<QString> string()
    {
        if (m_at >= m_text.size() || (m_text[m_at] != '\'' && m_text[m_at] != '"'))
            return std::nullopt;
        const char quote = m_text[m_at++];
        const qsizetype start = m_at;
        while (m_at < m_text.size() && m_text[m_at] != quote) {
            const unsigned char c = static_cast<unsigned char>(m_text[m_at]);
            if (c == '\\' || c < 0x20 || c > 0x7e) // no escapes: numpy's keys and type codes need none
                return std::nullopt;
            ++m_at;
        }
        if (m_at >= m_text.size() || m_at - start > 64)
            return std::nullopt;
        return QString::fromLatin1(m_text.data() + start, m_at++ - start);
    }
    std::optional<QList<qint64>> tuple()
    {
        if (!take('('))
            return std::nullopt;
        QList<qint64> shape;
        for (;;) {
            skipSpace();
            if (take(')'))
                return shape;
            qint64 value = 0;
            qsizetype digits = 0;
            while (m_at < m_text.size() && m_text[m_at] >= '0' && m_text[m_at] <= '9') {
                if (value > (qint64(1) << 53))
                    return std::nullopt;
                value = value * 10 + (m_text[m_at++] - '0');
                ++digits;
            }
            if (digits == 0 || shape.size() >= 32)
                return std::nullopt;
            take('L'); // Python 2's long integers, in files numpy wrote long ago
            shape << value;
            skipSpace();
            if (take(','))
                continue;
            skipSpace();
            if (take(')'))
                return shape;
            return std::nullopt;
        }
    }

    QByteArrayView m_text;
    qsizetype m_at = 0;
};

// numpy's type codes this reader takes, in the spelling numpy writes them.
std::optional<DType> dtypeFor(const QString& descr)
{
    static const QList<std::pair<QString, DType>> known{
        {QStringLiteral("|b1"), DType::Bool}, {QStringLiteral("|u1"), DType::U8},  {QStringLiteral("|i1"), DType::I8},
        {QStringLiteral("<i2"), DType::I16},  {QStringLiteral("<u2"), DType::U16}, {QStringLiteral("<f2"), DType::F16},
        {QStringLiteral("<i4"), DType::I32},  {QStringLiteral("<u4"), DType::U32}, {QStringLiteral("<f4"), DType::F32},
        {QStringLiteral("<f8"), DType::F64},  {QStringLiteral("<i8"), DType::I64}, {QStringLiteral("<u8"), DType::U64}};
    for (const auto& [code, type] : known)
        if (code == descr)
            return type;
    return std::nullopt;
}

QString refusedDescr(const QString& descr)
{
    if (descr.contains(u'O'))
        return QStringLiteral("holds Python objects (dtype '%1'), which only pickle can read; Gleaner never loads "
                              "pickle: save a numeric array instead")
            .arg(descr);
    if (descr.startsWith(u'>'))
        return QStringLiteral("is big-endian (dtype '%1'); save it little-endian, e.g. a.astype('<%2')")
            .arg(descr, descr.mid(1));
    return QStringLiteral("has the dtype '%1', which Gleaner does not read; use bool, an integer type, float16, "
                          "float32 or float64")
        .arg(descr);
}

quint32 le16(const uchar* p) { return quint32(p[0]) | quint32(p[1]) << 8; }
quint32 le32(const uchar* p) { return le16(p) | quint32(le16(p + 2)) << 16; }
quint64 le64(const uchar* p) { return quint64(le32(p)) | quint64(le32(p + 4)) << 32; }

} // namespace

Status parseNpyInto(TensorBundle& bundle, const QString& name, QByteArrayView bytes, const QString& what)
{
    const auto bad = [&](const QString& why) { return fail(QStringLiteral("%1: %2").arg(what, why)); };
    static const char kMagic[] = "\x93NUMPY";
    if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
        return bad(QStringLiteral("is not a NumPy .npy file (no \\x93NUMPY magic)"));
    const auto* p = reinterpret_cast<const uchar*>(bytes.data());
    const int major = p[6];
    qint64 headerLength = 0;
    qint64 headerStart = 0;
    if (major == 1) {
        headerLength = le16(p + 8);
        headerStart = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12)
            return bad(QStringLiteral("ends inside its header"));
        headerLength = le32(p + 8);
        headerStart = 12;
    } else {
        return bad(QStringLiteral("has format version %1.%2; Gleaner reads 1.0, 2.0 and 3.0").arg(major).arg(p[7]));
    }
    if (headerLength > kMaxHeaderBytes)
        return bad(QStringLiteral("has a header of %1 bytes, more than the %2 allowed").arg(headerLength).arg(kMaxHeaderBytes));
    if (headerStart + headerLength > bytes.size())
        return bad(QStringLiteral("ends inside its header"));
    auto header = HeaderParser(bytes.sliced(headerStart, headerLength)).parse();
    if (!header)
        return bad(header.error());
    const auto dtype = dtypeFor(header->descr);
    if (!dtype)
        return bad(refusedDescr(header->descr));
    if (header->fortranOrder && header->shape.size() > 1)
        return bad(QStringLiteral("is in Fortran order; save it in C order (np.ascontiguousarray(a))"));
    const auto size = TensorBundle::byteSizeFor(*dtype, header->shape);
    if (!size)
        return bad(QStringLiteral("has a shape %1 too large to hold").arg(shapeToString(header->shape)));
    const qint64 dataStart = headerStart + headerLength;
    const qint64 have = bytes.size() - dataStart;
    if (have != *size)
        return bad(QStringLiteral("holds %1 bytes of data where its shape %2 of %3 needs %4")
                       .arg(have)
                       .arg(shapeToString(header->shape), header->descr)
                       .arg(*size));
    if (const Status added = bundle.add(name, *dtype, header->shape, bytes.sliced(dataStart)); !added)
        return bad(added.error());
    return {};
}

Result<TensorBundle> loadNpy(const QString& path, const QString& name)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot be read: %2").arg(path, file.errorString()));
    const QByteArray bytes = file.readAll();
    TensorBundle bundle;
    if (const Status parsed = parseNpyInto(bundle, name, bytes, path); !parsed)
        return Error{parsed.error()};
    return bundle;
}

// --- .npz: a ZIP archive ---------------------------------------------------------------------------------------

Result<TensorBundle> parseNpz(QByteArrayView archive, const QString& what, qint64 maxBytes)
{
    const auto bad = [&](const QString& why) { return Error{QStringLiteral("%1: %2").arg(what, why)}; };
    const auto* base = reinterpret_cast<const uchar*>(archive.data());
    const qint64 size = archive.size();
    const auto within = [size](qint64 at, qint64 length) { return at >= 0 && length >= 0 && at <= size && length <= size - at; };

    // The end-of-central-directory record: the last 22 bytes, or before a comment of up to 65,535 bytes.
    qint64 eocd = -1;
    for (qint64 at = size - 22; at >= 0 && at >= size - 22 - 65535; --at)
        if (le32(base + at) == 0x06054b50u && at + 22 + qint64(le16(base + at + 20)) <= size) {
            eocd = at;
            break;
        }
    if (eocd < 0)
        return bad(QStringLiteral("is not a .npz file (no ZIP directory at its end)"));
    if (le16(base + eocd + 4) != 0 || le16(base + eocd + 6) != 0)
        return bad(QStringLiteral("is a ZIP archive split over several files"));
    quint64 entries = le16(base + eocd + 10);
    quint64 directorySize = le32(base + eocd + 12);
    quint64 directoryOffset = le32(base + eocd + 16);
    if (entries == 0xffff || directorySize == 0xffffffffu || directoryOffset == 0xffffffffu) {
        // ZIP64: a locator just before the record points at the 64-bit record.
        if (eocd < 20 || le32(base + eocd - 20) != 0x07064b50u)
            return bad(QStringLiteral("has a ZIP64 directory without its locator"));
        const quint64 record = le64(base + eocd - 20 + 8);
        if (!within(qint64(std::min<quint64>(record, quint64(size))), 56) || le32(base + record) != 0x06064b50u)
            return bad(QStringLiteral("has a ZIP64 directory record out of place"));
        entries = le64(base + record + 32);
        directorySize = le64(base + record + 40);
        directoryOffset = le64(base + record + 48);
    }
    if (directoryOffset > quint64(size) || directorySize > quint64(size) - directoryOffset)
        return bad(QStringLiteral("has a ZIP directory outside the file (truncated?)"));
    if (entries > 100000)
        return bad(QStringLiteral("has %1 members; a dataset has a few").arg(entries));

    TensorBundle bundle;
    qint64 at = qint64(directoryOffset);
    const qint64 directoryEnd = qint64(directoryOffset + directorySize);
    qint64 inflatedTotal = 0;
    for (quint64 i = 0; i < entries; ++i) {
        if (!within(at, 46) || at + 46 > directoryEnd || le32(base + at) != 0x02014b50u)
            return bad(QStringLiteral("has a damaged ZIP directory (entry %1)").arg(i));
        const quint32 flags = le16(base + at + 8);
        const quint32 method = le16(base + at + 10);
        const quint32 crc = le32(base + at + 16);
        quint64 packed = le32(base + at + 20);
        quint64 unpacked = le32(base + at + 24);
        const qint64 nameLength = le16(base + at + 28);
        const qint64 extraLength = le16(base + at + 30);
        const qint64 commentLength = le16(base + at + 32);
        quint64 local = le32(base + at + 42);
        const qint64 next = at + 46 + nameLength + extraLength + commentLength;
        if (next > directoryEnd)
            return bad(QStringLiteral("has a damaged ZIP directory (entry %1)").arg(i));
        const QString member = QString::fromUtf8(reinterpret_cast<const char*>(base + at + 46), nameLength);
        // ZIP64 sizes and offset, for the fields marked 0xffffffff, in this order.
        for (qint64 e = at + 46 + nameLength; e + 4 <= at + 46 + nameLength + extraLength;) {
            const quint32 id = le16(base + e);
            const qint64 length = le16(base + e + 2);
            if (e + 4 + length > at + 46 + nameLength + extraLength)
                return bad(QStringLiteral("member %1 has a damaged extra field").arg(member));
            if (id == 0x0001) {
                qint64 field = e + 4;
                for (quint64* value : {&unpacked, &packed, &local}) {
                    if (*value != 0xffffffffu)
                        continue;
                    if (field + 8 > e + 4 + length)
                        return bad(QStringLiteral("member %1 has a short ZIP64 field").arg(member));
                    *value = le64(base + field);
                    field += 8;
                }
            }
            e += 4 + length;
        }
        at = next;
        if (flags & 1)
            return bad(QStringLiteral("member %1 is encrypted").arg(member));
        if (!member.endsWith(QStringLiteral(".npy")) || member.size() == 4)
            return bad(QStringLiteral("member %1 is not an .npy array; a .npz holds only those").arg(member));
        if (local > quint64(size) || !within(qint64(local), 30) || le32(base + local) != 0x04034b50u)
            return bad(QStringLiteral("member %1's local header is out of place (truncated?)").arg(member));
        const qint64 dataAt = qint64(local) + 30 + le16(base + local + 26) + le16(base + local + 28);
        if (packed > quint64(size) || !within(dataAt, qint64(packed)))
            return bad(QStringLiteral("member %1 runs past the end of the file (truncated?)").arg(member));
        if (unpacked > quint64(maxBytes - inflatedTotal))
            return bad(QStringLiteral("member %1 would inflate past the %2 bytes allowed").arg(member).arg(maxBytes));
        inflatedTotal += qint64(unpacked);

        QByteArray inflated;
        QByteArrayView data(reinterpret_cast<const char*>(base + dataAt), qsizetype(packed));
        if (method == 0) {
            if (packed != unpacked)
                return bad(QStringLiteral("member %1 is stored with two different sizes").arg(member));
        } else if (method == 8) {
            // Deflate cannot shrink data more than about 1032 to 1: a larger claim is a lie told to make this
            // reader allocate, refused before anything is allocated.
            if (unpacked > packed * 1100 + 1024)
                return bad(QStringLiteral("member %1 claims to inflate %2 bytes to %3, more than deflate can")
                               .arg(member)
                               .arg(packed)
                               .arg(unpacked));
            inflated.resize(qsizetype(unpacked));
            z_stream stream{};
            if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
                return bad(QStringLiteral("cannot start zlib"));
            stream.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(data.data()));
            stream.avail_in = uInt(std::min<quint64>(packed, 0xffffffffu));
            stream.next_out = reinterpret_cast<Bytef*>(inflated.data());
            stream.avail_out = uInt(std::min<quint64>(unpacked, 0xffffffffu));
            int status = Z_OK;
            quint64 fedIn = stream.avail_in, fedOut = stream.avail_out;
            while (status == Z_OK) {
                status = inflate(&stream, Z_NO_FLUSH);
                if (status == Z_OK && stream.avail_in == 0 && fedIn < packed) {
                    const quint64 more = std::min<quint64>(packed - fedIn, 0xffffffffu);
                    stream.avail_in = uInt(more);
                    fedIn += more;
                }
                if (status == Z_OK && stream.avail_out == 0 && fedOut < unpacked) {
                    const quint64 more = std::min<quint64>(unpacked - fedOut, 0xffffffffu);
                    stream.avail_out = uInt(more);
                    fedOut += more;
                } else if (status == Z_OK && stream.avail_out == 0) {
                    break; // full: only the end of the stream may follow
                }
            }
            if (status == Z_OK) // the buffer is full: the stream must end here
                status = inflate(&stream, Z_FINISH);
            const quint64 produced = stream.total_out;
            inflateEnd(&stream);
            if (status != Z_STREAM_END || produced != unpacked)
                return bad(QStringLiteral("member %1 does not inflate to its declared %2 bytes").arg(member).arg(unpacked));
            data = inflated;
        } else {
            return bad(QStringLiteral("member %1 is compressed with ZIP method %2; np.savez and np.savez_compressed "
                                      "write 0 and 8")
                           .arg(member)
                           .arg(method));
        }
        uLong sum = crc32(0L, Z_NULL, 0);
        for (qint64 done = 0; done < data.size();) {
            const qint64 chunk = std::min<qint64>(data.size() - done, 1 << 30);
            sum = crc32(sum, reinterpret_cast<const Bytef*>(data.data() + done), uInt(chunk));
            done += chunk;
        }
        if (quint32(sum) != crc)
            return bad(QStringLiteral("member %1 fails its CRC-32 check (damaged)").arg(member));
        const QString name = member.chopped(4);
        if (const Status parsed = parseNpyInto(bundle, name, data, QStringLiteral("%1 member %2").arg(what, member)); !parsed)
            return Error{parsed.error()};
    }
    return bundle;
}

Result<TensorBundle> loadNpz(const QString& path, qint64 maxBytes)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot be read: %2").arg(path, file.errorString()));
    const QByteArray bytes = file.readAll();
    return parseNpz(bytes, path, maxBytes);
}

} // namespace gleaner::ml::NumPy
