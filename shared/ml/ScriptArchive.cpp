#include "ml/ScriptArchive.h"

#include "format/ZipArchive.h"
#include "ml/ScriptPickle.h"

#include <QFile>
#include <QHash>

#include <utility>

namespace gleaner::ml::ScriptArchive {
namespace {

const QString kSaveWith = QStringLiteral("save the model with torch.jit.save(torch.jit.script(model), path)");

// Folds A-Z only, as libtorch's ZIP reader does when it looks a member up.
QString asciiLower(QString name)
{
    for (QChar& c : name)
        if (c >= u'A' && c <= u'Z')
            c = QChar(c.unicode() + (u'a' - u'A'));
    return name;
}

// Every storage a pickle names must be a record of the archive that holds exactly the bytes the pickle claims.
Status checkRecords(QByteArrayView archive, const Zip::Member& pickle, const QString& tensorFolder,
                    const QHash<QString, const Zip::Member*>& byName, const QString& path)
{
    if (pickle.unpacked > quint64(ScriptPickle::kMaxBytes))
        return fail(QStringLiteral("%1: %2 inflates to %3 bytes; a TorchScript pickle may hold at most %4")
                        .arg(path, pickle.name)
                        .arg(pickle.unpacked)
                        .arg(ScriptPickle::kMaxBytes));
    QByteArray storage;
    auto read = Zip::read(archive, pickle, path, storage);
    if (!read)
        return fail(read.error());
    auto storages = ScriptPickle::storages(*read, QStringLiteral("%1: %2").arg(path, pickle.name));
    if (!storages)
        return fail(storages.error());
    quint64 total = 0;
    for (const ScriptPickle::Storage& named : std::as_const(*storages)) {
        if (named.elements == 0)
            continue; // libtorch reads no record for an empty storage
        const QString record = tensorFolder + named.key;
        const Zip::Member* member = byName.value(asciiLower(record));
        if (!member)
            return fail(QStringLiteral("%1: %2 names the tensor record %3, which the archive lacks (truncated or "
                                       "altered?)")
                            .arg(path, pickle.name, record));
        if (member->unpacked != quint64(named.bytes()))
            return fail(QStringLiteral("%1: tensor record %2 holds %3 bytes, but %4 declares %5 elements of %6 bytes "
                                       "(%7 bytes): truncated or altered")
                            .arg(path, member->name)
                            .arg(member->unpacked)
                            .arg(pickle.name)
                            .arg(named.elements)
                            .arg(named.itemBytes)
                            .arg(named.bytes()));
        total += member->unpacked;
    }
    // A record is counted once per tensor that names it: a bound on what libtorch allocates, far above any model.
    if (total > quint64(kMaxBytes))
        return fail(QStringLiteral("%1: %2 names %3 bytes of tensors; a TorchScript archive may hold at most %4")
                        .arg(path, pickle.name)
                        .arg(total)
                        .arg(kMaxBytes));
    return {};
}

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

    // libtorch finds a member by name without regard to ASCII case ("CODE/__torch__.py" answers for
    // "code/__torch__.py"), so every name is matched here as it will be, and two that it cannot tell apart are
    // refused: otherwise the check could read one and libtorch the other.
    QHash<QString, const Zip::Member*> byName;
    for (const Zip::Member& member : *members) {
        const qsizetype slash = member.name.indexOf(u'/');
        const QString folder = slash > 0 ? member.name.left(slash) : QString();
        if (folder.isEmpty() || (!summary.folder.isEmpty() && folder != summary.folder))
            return fail(QStringLiteral("%1: member %2 lies outside the archive's one folder; not what "
                                       "torch.jit.save writes")
                            .arg(path, member.name));
        summary.folder = folder;
        const QString inner = asciiLower(member.name.mid(slash + 1));
        if (const auto* other = byName.value(inner))
            return fail(QStringLiteral("%1: members %2 and %3 differ only by case, which libtorch does not tell "
                                       "apart; not what torch.jit.save writes")
                            .arg(path, other->name, member.name));
        byName.insert(inner, &member);
    }

    quint64 sourceBytes = 0;
    for (const Zip::Member& member : *members) {
        const QString inner = asciiLower(member.name.mid(summary.folder.size() + 1));
        if (!inner.startsWith(u"code/") || inner.endsWith(u".debug_pkl"))
            continue;
        summary.sourceFiles << member.name.mid(summary.folder.size() + 1);
        // Bounded in all, not per file: many members that each inflate to the limit would keep a worker busy
        // for hours before the first check.
        sourceBytes += member.unpacked;
        if (sourceBytes > kMaxSourceBytes)
            return fail(QStringLiteral("%1: the program's source passes %2 bytes at %3; more than any model needs")
                            .arg(path)
                            .arg(kMaxSourceBytes)
                            .arg(member.name));
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
                            .arg(path, member.name));
    }
    const bool data = byName.contains(QStringLiteral("data.pkl"));
    const bool constants = byName.contains(QStringLiteral("constants.pkl"));
    if (summary.sourceFiles.isEmpty())
        return fail(QStringLiteral("%1 is a ZIP archive with no program in it (no code/ folder): tensors saved "
                                   "with torch.save are not a model; %2")
                        .arg(path, kSaveWith));
    if (!data || !constants)
        return fail(QStringLiteral("%1 lacks %2, which every TorchScript archive holds (truncated or altered?); %3")
                        .arg(path, data ? QStringLiteral("constants.pkl") : QStringLiteral("data.pkl"), kSaveWith));
    // The tensors: libtorch sizes each storage as its pickle says, whatever the record holds.
    for (const auto& [pickle, folder] : {std::pair{QStringLiteral("data.pkl"), QStringLiteral("data/")},
                                         std::pair{QStringLiteral("constants.pkl"), QStringLiteral("constants/")}}) {
        if (auto checked = checkRecords(bytes, *byName.value(pickle), folder, byName, path); !checked)
            return fail(checked.error());
    }
    return summary;
}

} // namespace gleaner::ml::ScriptArchive
