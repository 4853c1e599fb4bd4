#include "ml/ScriptArchive.h"

#include "format/ZipArchive.h"

#include <QFile>

namespace gleaner::ml::ScriptArchive {
namespace {

const QString kSaveWith = QStringLiteral("save the model with torch.jit.save(torch.jit.script(model), path)");

} // namespace

Result<Summary> inspect(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot be read: %2").arg(path, file.errorString()));
    const qint64 size = file.size();
    if (size > kMaxBytes)
        return fail(QStringLiteral("%1 is %2 bytes; a TorchScript archive may hold at most %3").arg(path).arg(size).arg(kMaxBytes));
    if (size == 0)
        return fail(QStringLiteral("%1 is empty, not a TorchScript archive; %2").arg(path, kSaveWith));
    uchar* mapped = file.map(0, size);
    if (!mapped)
        return fail(QStringLiteral("%1: cannot be mapped: %2").arg(path, file.errorString()));
    return inspectBytes(QByteArrayView(reinterpret_cast<const char*>(mapped), size), path);
}

Result<Summary> inspectBytes(QByteArrayView bytes, const QString& path)
{
    Summary summary;
    summary.bytes = bytes.size();
    if (summary.bytes > kMaxBytes)
        return fail(QStringLiteral("%1 is %2 bytes; a TorchScript archive may hold at most %3")
                        .arg(path)
                        .arg(summary.bytes)
                        .arg(kMaxBytes));
    // A pickle starts with the PROTO opcode (0x80) and its protocol number: what torch.save wrote before 1.6, or
    // pickle.dump. Nothing Gleaner loads.
    if (bytes.size() >= 2 && uchar(bytes[0]) == 0x80 && uchar(bytes[1]) <= 5)
        return fail(QStringLiteral("%1 holds a Python pickle, not a TorchScript archive; Gleaner never loads "
                                   "pickle; %2")
                        .arg(path, kSaveWith));
    auto members = Zip::directory(bytes, path, QStringLiteral("a TorchScript archive"), 100000);
    if (!members)
        return fail(members.error() + QStringLiteral("; ") + kSaveWith);

    bool data = false, constants = false;
    quint64 sourceBytes = 0;
    for (const Zip::Member& member : *members) {
        const qsizetype slash = member.name.indexOf(u'/');
        const QString folder = slash > 0 ? member.name.left(slash) : QString();
        if (folder.isEmpty() || (!summary.folder.isEmpty() && folder != summary.folder))
            return fail(QStringLiteral("%1: member %2 lies outside the archive's one folder; not what "
                                       "torch.jit.save writes")
                            .arg(path, member.name));
        summary.folder = folder;
        const QString inner = member.name.mid(slash + 1);
        data = data || inner == u"data.pkl";
        constants = constants || inner == u"constants.pkl";
        if (!inner.startsWith(u"code/") || member.name.endsWith(u".debug_pkl"))
            continue;
        summary.sourceFiles << inner;
        // Bounded in all, not per file: many members that each inflate to the limit would keep a worker busy
        // for hours before the first check.
        sourceBytes += member.unpacked;
        if (sourceBytes > kMaxSourceBytes)
            return fail(QStringLiteral("%1: the program's source passes %2 bytes at %3; more than any model needs")
                            .arg(path)
                            .arg(kMaxSourceBytes)
                            .arg(inner));
        QByteArray storage;
        auto source = Zip::read(bytes, member, path, storage);
        if (!source)
            return fail(source.error());
        // Unpickling an object whose class defines __setstate__ runs it, inside torch::jit::load: before the
        // operator check can see the program. nn.Module subclasses never need one.
        if (source->contains(QByteArrayView("__setstate__")))
            return fail(QStringLiteral("%1: its source %2 defines __setstate__, code that would run while the archive "
                                       "loads, before Gleaner could check it; remove __setstate__ from the model's "
                                       "classes")
                            .arg(path, inner));
    }
    if (summary.sourceFiles.isEmpty())
        return fail(QStringLiteral("%1 is a ZIP archive with no program in it (no code/ folder): tensors saved "
                                   "with torch.save are not a model; %2")
                        .arg(path, kSaveWith));
    if (!data || !constants)
        return fail(QStringLiteral("%1 lacks %2, which every TorchScript archive holds (truncated or altered?); %3")
                        .arg(path, data ? QStringLiteral("constants.pkl") : QStringLiteral("data.pkl"), kSaveWith));
    return summary;
}

} // namespace gleaner::ml::ScriptArchive
