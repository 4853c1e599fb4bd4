#pragma once
// The first look at a TorchScript archive, before libtorch is given it: the file must be what torch.jit.save writes
// (a ZIP archive of one folder with data.pkl, constants.pkl and the program's source under code/), and nothing in it
// may make libtorch run code or touch memory while it loads:
//   - member names are matched as libtorch matches them, without regard to ASCII case, and two names it could not
//     tell apart are refused (CODE/ is code/ to libtorch);
//   - the source may not define __setstate__, the one kind of code libtorch runs while an archive loads, before any
//     check of its operators could;
//   - every tensor record holds exactly the bytes its pickle declares, and every tensor lies inside its storage
//     (ScriptPickle): libtorch trusts both;
//   - the pickles name only what torch.jit.save writes: no TorchBind objects, no quantized or sparse tensors.
// A Python pickle, a state_dict saved with torch.save, a truncated or altered file are refused here, each by name.
// Torch-free: no part of the file has reached libtorch yet.

#include "Result.h"

#include <QByteArrayView>
#include <QString>
#include <QStringList>

namespace gleaner::ml::ScriptArchive {

// The most an archive may weigh: far above any model a volunteer's machine trains, far below what would hurt.
inline constexpr qint64 kMaxBytes = qint64(4) << 30;
// The most its program's source (code/) may inflate to, all files together: a large model's is a few hundred KiB.
inline constexpr quint64 kMaxSourceBytes = quint64(64) << 20;

struct Summary
{
    QString folder;          // the archive's top folder, as torch.jit.save names it after the file
    QStringList sourceFiles; // code/... members
    qint64 bytes = 0;
};

// `path` is named in every message.
Result<Summary> inspect(const QString& path);
// The same checks on an archive held in memory; `what` starts every message.
Result<Summary> inspectBytes(QByteArrayView bytes, const QString& what);

} // namespace gleaner::ml::ScriptArchive
