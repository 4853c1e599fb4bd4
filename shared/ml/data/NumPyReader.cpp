#include "ml/data/NumPyReader.h"

#include "format/ByteStream.h"
#include "format/ZipArchive.h"
#include "ml/data/Dataset.h"

#include <QFile>

#include <algorithm>
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

} // namespace

Result<NpyHeader> parseNpyHeader(QByteArrayView start, qint64 totalBytes, const QString& what)
{
    const auto bad = [&](const QString& why) { return fail(QStringLiteral("%1: %2").arg(what, why)); };
    static const char kMagic[] = "\x93NUMPY";
    if (totalBytes < 10 || start.size() < 10 || std::memcmp(start.data(), kMagic, 6) != 0)
        return bad(QStringLiteral("is not a NumPy .npy file (no \\x93NUMPY magic)"));
    const auto* p = reinterpret_cast<const uchar*>(start.data());
    const int major = p[6];
    qint64 headerLength = 0;
    qint64 headerStart = 0;
    if (major == 1) {
        headerLength = le16(p + 8);
        headerStart = 10;
    } else if (major == 2 || major == 3) {
        if (totalBytes < 12 || start.size() < 12)
            return bad(QStringLiteral("ends inside its header"));
        headerLength = le32(p + 8);
        headerStart = 12;
    } else {
        return bad(QStringLiteral("has format version %1.%2; Gleaner reads 1.0, 2.0 and 3.0").arg(major).arg(p[7]));
    }
    if (headerLength > kMaxHeaderBytes)
        return bad(QStringLiteral("has a header of %1 bytes, more than the %2 allowed").arg(headerLength).arg(kMaxHeaderBytes));
    if (headerStart + headerLength > totalBytes || headerStart + headerLength > start.size())
        return bad(QStringLiteral("ends inside its header"));
    auto header = HeaderParser(start.sliced(headerStart, headerLength)).parse();
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
    const qint64 have = totalBytes - dataStart;
    if (have != *size)
        return bad(QStringLiteral("holds %1 bytes of data where its shape %2 of %3 needs %4")
                       .arg(have)
                       .arg(shapeToString(header->shape), header->descr)
                       .arg(*size));
    return NpyHeader{*dtype, header->shape, dataStart};
}

Status parseNpyInto(TensorBundle& bundle, const QString& name, QByteArrayView bytes, const QString& what)
{
    auto header = parseNpyHeader(bytes, bytes.size(), what);
    if (!header)
        return fail(header.error());
    if (const Status added = bundle.add(name, header->dtype, header->shape, bytes.sliced(header->dataStart)); !added)
        return fail(QStringLiteral("%1: %2").arg(what, added.error()));
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
    auto members = Zip::directory(archive, what, QStringLiteral("a .npz file"), 100000);
    if (!members)
        return fail(members.error());
    TensorBundle bundle;
    qint64 inflatedTotal = 0;
    for (const Zip::Member& member : *members) {
        if (!member.name.endsWith(QStringLiteral(".npy")) || member.name.size() == 4)
            return fail(QStringLiteral("%1: member %2 is not an .npy array; a .npz holds only those").arg(what, member.name));
        if (member.unpacked > quint64(maxBytes - inflatedTotal))
            return fail(QStringLiteral("%1: member %2 would inflate past the %3 bytes allowed")
                            .arg(what, member.name)
                            .arg(maxBytes));
        inflatedTotal += qint64(member.unpacked);
        QByteArray inflated;
        auto data = Zip::read(archive, member, what, inflated);
        if (!data)
            return fail(data.error());
        const QString name = member.name.chopped(4);
        if (const Status parsed = parseNpyInto(bundle, name, *data, QStringLiteral("%1 member %2").arg(what, member.name));
            !parsed)
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

// --- .npz read member by member, for the streamed import ------------------------------------------------------

namespace {

// An archive mapped, not read: only the pages of its directory and of the members read through the map become
// resident, so a .npz larger than memory can be opened.
class MappedArchive
{
public:
    Status open(const QString& path)
    {
        m_file.setFileName(path);
        if (!m_file.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("%1: cannot be read: %2").arg(path, m_file.errorString()));
        const qint64 size = m_file.size();
        if (size > 0) {
            const uchar* base = m_file.map(0, size);
            if (!base)
                return fail(QStringLiteral("%1: cannot be read: %2").arg(path, m_file.errorString()));
            m_view = QByteArrayView(reinterpret_cast<const char*>(base), qsizetype(size));
        }
        return {};
    }
    QByteArrayView view() const { return m_view; }

private:
    QFile m_file;
    QByteArrayView m_view;
};

struct NpzMember
{
    Zip::Member zip;
    QString array; // the name without ".npy"
    NpyHeader header;
};

// Every member's name and .npy header, each checked as parseNpz() checks it, without inflating more of a member
// than its header.
Result<QList<NpzMember>> readDirectory(const QString& path, QByteArrayView archive)
{
    auto members = Zip::directory(archive, path, QStringLiteral("a .npz file"), 100000);
    if (!members)
        return fail(members.error());
    QList<NpzMember> out;
    for (const Zip::Member& member : *members) {
        if (!member.name.endsWith(QStringLiteral(".npy")) || member.name.size() == 4)
            return fail(QStringLiteral("%1: member %2 is not an .npy array; a .npz holds only those").arg(path, member.name));
        const qint64 prefix = qint64(std::min<quint64>(member.unpacked, quint64(kMaxHeaderBytes + 12)));
        QByteArray start(qsizetype(prefix), Qt::Uninitialized);
        auto stream = ByteStream::open(path, member.dataAt, qint64(member.packed),
                                       member.method == 8 ? ByteStream::Coding::Deflate : ByteStream::Coding::Plain);
        if (!stream)
            return fail(stream.error());
        auto got = (*stream)->read(start.data(), prefix);
        if (!got)
            return fail(QStringLiteral("%1: member %2 does not inflate to its declared %3 bytes")
                            .arg(path, member.name)
                            .arg(member.unpacked));
        start.truncate(qsizetype(*got));
        auto header = parseNpyHeader(start, qint64(member.unpacked), QStringLiteral("%1 member %2").arg(path, member.name));
        if (!header)
            return fail(header.error());
        out.append(NpzMember{member, member.name.chopped(4), *header});
    }
    return out;
}

const NpzMember* findArray(const QList<NpzMember>& members, const QString& name)
{
    for (const NpzMember& member : members)
        if (member.array == name)
            return &member;
    return nullptr;
}

// A member's array, read through the map, into `bundle`.
Status readArray(QByteArrayView archive, const NpzMember& member, const QString& path, TensorBundle& bundle)
{
    QByteArray storage;
    auto data = Zip::read(archive, member.zip, path, storage);
    if (!data)
        return fail(data.error());
    return parseNpyInto(bundle, member.array, *data, QStringLiteral("%1 member %2").arg(path, member.zip.name));
}

class NpzSource final : public SampleSource
{
public:
    NpzSource(QString path, NpzMember x) : m_path(std::move(path)), m_x(std::move(x)) {}

    void setLabels(std::vector<qint64> labels)
    {
        m_labels = std::move(labels);
        m_sampleShape = m_x.header.shape.mid(1);
        m_sampleType = m_x.header.dtype == DType::F64 ? DType::F32 : m_x.header.dtype;
    }

    Status readSamples(const Sink& sink) override
    {
        const Zip::Member& member = m_x.zip;
        const auto damaged = [&] {
            return fail(QStringLiteral("%1: member %2 does not inflate to its declared %3 bytes")
                            .arg(m_path, member.name)
                            .arg(member.unpacked));
        };
        auto stream = ByteStream::open(m_path, member.dataAt, qint64(member.packed),
                                       member.method == 8 ? ByteStream::Coding::Deflate : ByteStream::Coding::Plain);
        if (!stream)
            return fail(stream.error());
        ByteStream& in = **stream;
        if (auto skipped = in.skip(m_x.header.dataStart); !skipped || *skipped != m_x.header.dataStart)
            return damaged();
        const bool widen = m_x.header.dtype == DType::F64; // float64 samples become float32, as loadDataset does
        const qint64 stride = sampleBytes() * (widen ? 2 : 1);
        const qint64 perChunk = std::max<qint64>(1, ByteStream::kChunkBytes / std::max<qint64>(stride, 1));
        QByteArray chunk(qsizetype(perChunk * stride), Qt::Uninitialized);
        QByteArray narrowed(qsizetype(widen ? sampleBytes() : 0), Qt::Uninitialized);
        for (qint64 index = 0; index < size();) {
            const qint64 want = std::min(perChunk, size() - index) * stride;
            auto got = in.read(chunk.data(), want);
            if (!got || *got != want)
                return damaged();
            for (qint64 at = 0; at < want || (stride == 0 && at == 0 && index < size()); at += std::max<qint64>(stride, 1), ++index) {
                QByteArrayView sample(chunk.constData() + at, stride);
                if (widen) {
                    auto* out = reinterpret_cast<float*>(narrowed.data());
                    for (qint64 v = 0; v < stride / 8; ++v) {
                        double value;
                        std::memcpy(&value, sample.data() + v * 8, sizeof(double));
                        out[v] = float(value);
                    }
                    sample = narrowed;
                }
                if (Status taken = sink(index, sample); !taken)
                    return taken;
            }
        }
        auto rest = in.skip(1);
        if (!rest || *rest != 0 || in.produced() != qint64(member.unpacked) || (member.method == 8 && !in.atEnd()))
            return damaged();
        if (in.crc32() != member.crc)
            return fail(QStringLiteral("%1: member %2 fails its CRC-32 check (damaged)").arg(m_path, member.name));
        return {};
    }

private:
    QString m_path;
    NpzMember m_x;
};

QString heldList(const QList<NpzMember>& members)
{
    QStringList held;
    for (const NpzMember& member : members)
        held << member.array;
    return held.isEmpty() ? QStringLiteral("none") : held.join(QStringLiteral(", "));
}

Error missingArray(const QString& path, const QList<NpzMember>& members, const QString& missing, const QString& xName,
                   const QString& yName)
{
    return Error{QStringLiteral("%1 holds no array \"%2\" (it holds %3); it needs \"%4\" and \"%5\"")
                     .arg(path, missing, heldList(members), xName, yName)};
}

} // namespace

Result<std::unique_ptr<SampleSource>> openNpzSource(const QString& path, const QString& xName, const QString& yName)
{
    MappedArchive archive;
    if (Status opened = archive.open(path); !opened)
        return fail(opened.error());
    auto members = readDirectory(path, archive.view());
    if (!members)
        return fail(members.error());
    const NpzMember* x = findArray(*members, xName);
    const NpzMember* y = findArray(*members, yName);
    if (!x || !y)
        return missingArray(path, *members, !x ? xName : yName, xName, yName);
    const DType xType = x->header.dtype;
    if (xType != DType::F64 && xType != DType::U8 && xType != DType::F32)
        return fail(QStringLiteral("%1: \"%2\" is %3; samples must be uint8, float32 or float64 (x.astype(np.float32))")
                        .arg(path, xName, dtypeName(xType)));
    TensorBundle labels;
    if (Status read = readArray(archive.view(), *y, path, labels); !read)
        return fail(read.error());
    const TensorEntry xEntry{QStringLiteral("x"), xType == DType::F64 ? DType::F32 : xType, x->header.shape, 0, 0};
    const TensorEntry& yEntry = labels.entries().constFirst();
    if (Status layout = Dataset::checkLayout(&xEntry, &yEntry, path); !layout)
        return fail(layout.error());
    auto values = Dataset::labelsFrom(yEntry.dtype, labels.data(yEntry), path);
    if (!values)
        return fail(values.error());
    auto source = std::make_unique<NpzSource>(path, *x);
    source->setLabels(std::move(*values));
    return std::unique_ptr<SampleSource>(std::move(source));
}

Result<TensorBundle> loadNpzArrays(const QString& path, const QString& xName, const QString& yName)
{
    MappedArchive archive;
    if (Status opened = archive.open(path); !opened)
        return fail(opened.error());
    auto members = readDirectory(path, archive.view());
    if (!members)
        return fail(members.error());
    TensorBundle bundle;
    for (const QString& name : {xName, yName}) {
        const NpzMember* member = findArray(*members, name);
        if (!member)
            return missingArray(path, *members, name, xName, yName);
        if (Status read = readArray(archive.view(), *member, path, bundle); !read)
            return fail(read.error());
    }
    return bundle;
}

} // namespace gleaner::ml::NumPy
