#pragma once
// Our own reader of ZIP archives held in memory (or mapped), for the two ZIP-based formats Gleaner reads: NumPy's
// `.npz` and TorchScript's archives. Every offset and size in the archive is checked against its length before it
// is used, so a truncated or hostile archive is refused with a message, never read out of bounds.
//
// Accepted: one-disk archives, stored (method 0) or deflated (method 8) members, ZIP64 sizes and offsets.
// Refused: encrypted members, other methods, members whose claimed size deflate could not produce, a CRC-32
// mismatch.

#include "Result.h"

#include <QByteArray>
#include <QByteArrayView>
#include <QList>
#include <QString>

namespace gleaner::Zip {

struct Member
{
    QString name;
    quint32 method = 0; // 0 stored, 8 deflated
    quint32 crc = 0;
    quint64 packed = 0;   // bytes in the archive
    quint64 unpacked = 0; // bytes once read
    qint64 dataAt = 0;    // where the packed bytes start in the archive
};

// The archive's members in directory order, each checked to lie inside the archive. `what` starts every message
// ("model.pt: ..."); `kind` names the format in the one for a file that is no ZIP archive at all ("a .npz
// file"). More than `maxMembers` members is refused.
Result<QList<Member>> directory(QByteArrayView archive, const QString& what, const QString& kind,
                                quint64 maxMembers);

// A member's bytes: a view into the archive for a stored member, or the inflated bytes, kept in `storage`, for a
// deflated one. Its CRC-32 is checked either way.
Result<QByteArrayView> read(QByteArrayView archive, const Member& member, const QString& what, QByteArray& storage);

} // namespace gleaner::Zip
