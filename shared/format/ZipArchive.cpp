#include "format/ZipArchive.h"

#include <zlib.h>

#include <algorithm>

namespace gleaner::Zip {
namespace {

quint32 le16(const uchar* p) { return quint32(p[0]) | quint32(p[1]) << 8; }
quint32 le32(const uchar* p) { return le16(p) | quint32(le16(p + 2)) << 16; }
quint64 le64(const uchar* p) { return quint64(le32(p)) | quint64(le32(p + 4)) << 32; }

Status inflateInto(QByteArrayView packed, QByteArray& out, quint64 unpacked)
{
    out.resize(qsizetype(unpacked));
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
        return fail(QStringLiteral("cannot start zlib"));
    stream.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(packed.data()));
    stream.avail_in = uInt(std::min<quint64>(quint64(packed.size()), 0xffffffffu));
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = uInt(std::min<quint64>(unpacked, 0xffffffffu));
    int status = Z_OK;
    quint64 fedIn = stream.avail_in, fedOut = stream.avail_out;
    while (status == Z_OK) {
        status = inflate(&stream, Z_NO_FLUSH);
        if (status == Z_OK && stream.avail_in == 0 && fedIn < quint64(packed.size())) {
            const quint64 more = std::min<quint64>(quint64(packed.size()) - fedIn, 0xffffffffu);
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
        return fail(QStringLiteral("does not inflate to its declared %1 bytes").arg(unpacked));
    return {};
}

} // namespace

Result<QList<Member>> directory(QByteArrayView archive, const QString& what, const QString& kind, quint64 maxMembers)
{
    const auto bad = [&](const QString& why) { return Error{QStringLiteral("%1: %2").arg(what, why)}; };
    const auto* base = reinterpret_cast<const uchar*>(archive.data());
    const qint64 size = archive.size();
    const auto within = [size](qint64 at, qint64 length) {
        return at >= 0 && length >= 0 && at <= size && length <= size - at;
    };

    // The end-of-central-directory record: the last 22 bytes, or before a comment of up to 65,535 bytes.
    qint64 eocd = -1;
    for (qint64 at = size - 22; at >= 0 && at >= size - 22 - 65535; --at)
        if (le32(base + at) == 0x06054b50u && at + 22 + qint64(le16(base + at + 20)) <= size) {
            eocd = at;
            break;
        }
    if (eocd < 0)
        return bad(QStringLiteral("is not %1 (no ZIP directory at its end)").arg(kind));
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
    if (entries > maxMembers)
        return bad(QStringLiteral("has %1 members, more than the %2 allowed").arg(entries).arg(maxMembers));

    QList<Member> members;
    qint64 at = qint64(directoryOffset);
    const qint64 directoryEnd = qint64(directoryOffset + directorySize);
    for (quint64 i = 0; i < entries; ++i) {
        if (!within(at, 46) || at + 46 > directoryEnd || le32(base + at) != 0x02014b50u)
            return bad(QStringLiteral("has a damaged ZIP directory (entry %1)").arg(i));
        Member member;
        const quint32 flags = le16(base + at + 8);
        member.method = le16(base + at + 10);
        member.crc = le32(base + at + 16);
        member.packed = le32(base + at + 20);
        member.unpacked = le32(base + at + 24);
        const qint64 nameLength = le16(base + at + 28);
        const qint64 extraLength = le16(base + at + 30);
        const qint64 commentLength = le16(base + at + 32);
        quint64 local = le32(base + at + 42);
        const qint64 next = at + 46 + nameLength + extraLength + commentLength;
        if (next > directoryEnd)
            return bad(QStringLiteral("has a damaged ZIP directory (entry %1)").arg(i));
        member.name = QString::fromUtf8(reinterpret_cast<const char*>(base + at + 46), nameLength);
        // ZIP64 sizes and offset, for the fields marked 0xffffffff, in this order.
        for (qint64 e = at + 46 + nameLength; e + 4 <= at + 46 + nameLength + extraLength;) {
            const quint32 id = le16(base + e);
            const qint64 length = le16(base + e + 2);
            if (e + 4 + length > at + 46 + nameLength + extraLength)
                return bad(QStringLiteral("member %1 has a damaged extra field").arg(member.name));
            if (id == 0x0001) {
                qint64 field = e + 4;
                for (quint64* value : {&member.unpacked, &member.packed, &local}) {
                    if (*value != 0xffffffffu)
                        continue;
                    if (field + 8 > e + 4 + length)
                        return bad(QStringLiteral("member %1 has a short ZIP64 field").arg(member.name));
                    *value = le64(base + field);
                    field += 8;
                }
            }
            e += 4 + length;
        }
        at = next;
        if (flags & 1)
            return bad(QStringLiteral("member %1 is encrypted").arg(member.name));
        if (local > quint64(size) || !within(qint64(local), 30) || le32(base + local) != 0x04034b50u)
            return bad(QStringLiteral("member %1's local header is out of place (truncated?)").arg(member.name));
        member.dataAt = qint64(local) + 30 + le16(base + local + 26) + le16(base + local + 28);
        if (member.packed > quint64(size) || !within(member.dataAt, qint64(member.packed)))
            return bad(QStringLiteral("member %1 runs past the end of the file (truncated?)").arg(member.name));
        if (member.method == 0 && member.packed != member.unpacked)
            return bad(QStringLiteral("member %1 is stored with two different sizes").arg(member.name));
        // Deflate cannot shrink data more than about 1032 to 1: a larger claim is a lie told to make a reader
        // allocate, refused before anything is allocated.
        if (member.method == 8 && member.unpacked > member.packed * 1100 + 1024)
            return bad(QStringLiteral("member %1 claims to inflate %2 bytes to %3, more than deflate can")
                           .arg(member.name)
                           .arg(member.packed)
                           .arg(member.unpacked));
        if (member.method != 0 && member.method != 8)
            return bad(QStringLiteral("member %1 is compressed with ZIP method %2; only stored (0) and deflated (8) "
                                      "members are read")
                           .arg(member.name)
                           .arg(member.method));
        members.append(std::move(member));
    }
    return members;
}

Result<QByteArrayView> read(QByteArrayView archive, const Member& member, const QString& what, QByteArray& storage)
{
    QByteArrayView data(archive.data() + member.dataAt, qsizetype(member.packed));
    if (member.method == 8) {
        if (const Status inflated = inflateInto(data, storage, member.unpacked); !inflated)
            return fail(QStringLiteral("%1: member %2 %3").arg(what, member.name, inflated.error()));
        data = storage;
    }
    uLong sum = crc32(0L, Z_NULL, 0);
    for (qint64 done = 0; done < data.size();) {
        const qint64 chunk = std::min<qint64>(data.size() - done, 1 << 30);
        sum = crc32(sum, reinterpret_cast<const Bytef*>(data.data() + done), uInt(chunk));
        done += chunk;
    }
    if (quint32(sum) != member.crc)
        return fail(QStringLiteral("%1: member %2 fails its CRC-32 check (damaged)").arg(what, member.name));
    return data;
}

} // namespace gleaner::Zip
