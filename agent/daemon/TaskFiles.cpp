#include "daemon/TaskFiles.h"

#include "cache/FileCache.h"
#include "crypto/Sha256.h"
#include "daemon/DaemonLogging.h"
#include "daemon/StopSignal.h"
#include "net/CoordinatorClient.h"
#include "runner/WeightsPatcher.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

#include <unistd.h>

namespace gleaner::agent {

namespace {

// What a worker leaves for the job's next subtask on this agent, kept per job in DATA_DIR/<folder>/job-<id>.
struct JobStateFile
{
    const char* produced; // in the task folder, written by the worker at the end of a subtask
    const char* folder;   // under the data folder
    const char* taken;    // in the next task folder, where the worker reads it
};
constexpr JobStateFile kOptimizerState{"optimizer.safetensors", "optimizer", "optimizer-in.safetensors"};
constexpr JobStateFile kResidual{"residual.safetensors", "residual", "residual-in.safetensors"};

QString fileName(QStringView role)
{
    return role == u"weights"      ? QStringLiteral("weights.safetensors")
           : role == u"shard"      ? QStringLiteral("shard.safetensors")
           : role == u"checkpoint" ? QStringLiteral("handed-checkpoint.safetensors")
                                   : QStringLiteral("model.pt"); // a TorchScript job's archive
}

// A hard link when the task folder and the cache share a file system (no copy of a large shard); a copy
// otherwise.
Status linkOrCopy(const QString& from, const QString& to)
{
    QFile::remove(to);
    if (::link(QFile::encodeName(from).constData(), QFile::encodeName(to).constData()) == 0)
        return {};
    if (QFile::copy(from, to))
        return {};
    return fail(QStringLiteral("cannot place %1 in the task folder as %2").arg(from, to));
}

} // namespace

TaskFiles::TaskFiles(QString dataDir, FileCache& cache, CoordinatorClient& client, const StopSignal& stop)
    : m_dataDir(std::move(dataDir)), m_cache(cache), m_client(client), m_stop(stop)
{
}

QString TaskFiles::taskFolder(const LeaseId& leaseId) const
{
    // 32 hex digits by its type: always one folder directly under tasks/.
    return m_dataDir + QStringLiteral("/tasks/") + leaseId.toString();
}

bool TaskFiles::fetchesGoOn() const
{
    return !m_stop.stopped() && !m_abortFetches; // leaving: hand back
}

FetchOutcome TaskFiles::fetch(const LeaseId& leaseId, const TaskManifest& manifest, bool reverify)
{
    FetchOutcome outcome;
    const QList<ManifestPatch>& patches = manifest.weightsPatches;
    for (const ManifestFile& file : manifest.files) {
        const CacheRole role = cacheRoleFromName(file.role).value_or(CacheRole::Unknown);
        if (m_cache.contains(file.sha256) && (!reverify || m_cache.verify(file.sha256))) {
            m_cache.touch(file.sha256);
            continue;
        }
        // The weights, from an earlier file this agent holds and a patch, when the manifest offers one;
        // whatever goes wrong there, the full file is fetched as before.
        if (file.role == u"weights" && !patches.isEmpty() && !reverify) {
            auto patched = patchWeights(
                m_cache, file, patches, [&](const QString& sha, const QString& path, qint64 size) {
                    return m_client.download(sha, path, size,
                                             [this](const TransferProgress&) { return fetchesGoOn(); });
                });
            if (patched) {
                m_fetchedBytes += *patched;
                continue;
            }
            outcome.warnings << QStringLiteral("lease %1: the weights could not be patched (%2); fetching "
                                               "the full file")
                                    .arg(leaseId.toString(), patched.error());
        }
        auto writer = m_cache.beginWrite(file.sha256, file.size, role);
        if (!writer) {
            outcome.error = writer.error();
            return outcome;
        }
        const CacheWriter& w = **writer;
        Status got = m_client.download(file.sha256, w.partialPath(), file.size,
                                       [this](const TransferProgress&) { return fetchesGoOn(); });
        if (!got) {
            // More bytes than the signed size: the coordinator's copy is another file, as when its
            // hash differs. Final, and nothing of it is kept.
            if (CoordinatorClient::isOversizedDownload(got.error())) {
                (*writer)->discard();
                outcome.contentRefused = true;
            }
            // The coordinator answered that it does not serve the file for this lease: asking again
            // until the deadline would hold the workunit for nothing. Final too.
            if (CoordinatorClient::isMissingFile(got.error())) {
                (*writer)->discard();
                outcome.contentRefused = true;
            }
            outcome.error = got.error();
            return outcome;
        }
        auto committed = (*writer)->commit();
        if (!committed) {
            outcome.contentRefused = true;
            outcome.error = QStringLiteral("the %1 file of lease %2 was refused: %3. The coordinator's copy "
                                           "differs from what its signed manifest promises; nothing was run")
                                .arg(file.role, leaseId.toString(), committed.error());
            return outcome;
        }
        m_fetchedBytes += file.size - w.resumeOffset(); // what this download fetched, not a resumed part
        if (committed->eviction.evicted.size() > 0)
            qCInfo(lcDaemon).noquote() << "cache: evicted" << committed->eviction.evicted.size() << "file(s)";
    }
    outcome.ok = true;
    return outcome;
}

FetchOutcome TaskFiles::layOut(const QString& dir, const QByteArray& manifestBytes,
                               const TaskManifest& manifest)
{
    FetchOutcome outcome;
    if (!QDir().mkpath(dir)) {
        outcome.error = QStringLiteral("cannot create the task folder %1").arg(dir);
        return outcome;
    }
    QSaveFile manifestFile(dir + QStringLiteral("/manifest.json"));
    if (!manifestFile.open(QIODevice::WriteOnly) ||
        manifestFile.write(manifestBytes) != manifestBytes.size() || !manifestFile.commit()) {
        outcome.error = QStringLiteral("cannot write %1").arg(manifestFile.fileName());
        return outcome;
    }
    for (const ManifestFile& file : manifest.files) {
        if (file.role == u"model" && !manifest.scriptModel)
            continue; // the manifest carries the zoo model's spec
        const QString target = dir + u'/' + fileName(file.role);
        // Every file is hashed right before a worker may read it; what is already in place is checked
        // in place (a resumed task), anything else is linked from the cache and checked there.
        if (!QFileInfo::exists(target)) {
            const QString cached = m_cache.path(file.sha256);
            if (cached.isEmpty()) {
                outcome.error = QStringLiteral("the %1 file %2 left the cache before the task started")
                                    .arg(file.role, file.sha256);
                return outcome;
            }
            if (auto s = linkOrCopy(cached, target); !s) {
                outcome.error = s.error();
                return outcome;
            }
        }
        auto digest = Sha256::hashFile(target);
        if (!digest) {
            outcome.error = digest.error();
            return outcome;
        }
        const QString hex = Sha256::toHex(*digest);
        if (hex != file.sha256) {
            QFile::remove(target);
            outcome.contentRefused = true;
            outcome.error = QStringLiteral("%1 has SHA-256 %2, but the signed manifest says %3: the file was "
                                           "altered on this machine; nothing was run")
                                .arg(target, hex, file.sha256);
            return outcome;
        }
    }
    // The job's optimizer state from this agent's previous subtask, for a worker that starts afresh (one
    // that resumes takes its checkpoint's). A copy: the next subtask to finish replaces the original.
    const QString optimizerState = jobStateFile(kOptimizerState.folder, manifest.jobId);
    const QString optimizerIn = dir + u'/' + QString::fromLatin1(kOptimizerState.taken);
    if (QFileInfo::exists(optimizerState) &&
        !QFileInfo::exists(dir + QStringLiteral("/checkpoint.safetensors")) &&
        !QFileInfo::exists(optimizerIn))
        (void)QFile::copy(optimizerState, optimizerIn);
    // What earlier uploads left out goes with one upload only: moved, not copied, or two subtasks of
    // the job running at once would both send it.
    const QString residual = jobStateFile(kResidual.folder, manifest.jobId);
    const QString residualIn = dir + u'/' + QString::fromLatin1(kResidual.taken);
    if (QFileInfo::exists(residual) && !QFileInfo::exists(residualIn))
        (void)QFile::rename(residual, residualIn);
    outcome.ok = true;
    return outcome;
}

QStringList TaskFiles::keepJobState(qint64 jobId, const QString& taskDir) const
{
    // The worker's optimizer state at the end of the subtask: the job's next subtask on this agent starts
    // from it; and what its upload left out (error feedback): the next upload sends it. The newest wins when
    // several subtasks of one job run at once.
    QStringList warnings;
    for (const JobStateFile& state : {kOptimizerState, kResidual}) {
        const QString produced = taskDir + u'/' + QString::fromLatin1(state.produced);
        if (!QFileInfo::exists(produced))
            continue;
        const QString kept = jobStateFile(state.folder, jobId);
        QDir().mkpath(QFileInfo(kept).path());
        QFile::remove(kept);
        if (!QFile::rename(produced, kept))
            warnings << QStringLiteral("cannot keep %1 of job %2 in %3; its next subtask starts without it")
                            .arg(QString::fromLatin1(state.produced))
                            .arg(jobId)
                            .arg(kept);
        // One file per job: those of jobs this agent has not worked on for a week go.
        const QDir folder(QFileInfo(kept).path());
        for (const QFileInfo& old : folder.entryInfoList({QStringLiteral("job-*.safetensors")}, QDir::Files))
            if (old.lastModified().msecsTo(QDateTime::currentDateTimeUtc()) > 7LL * 24 * 3600 * 1000)
                QFile::remove(old.filePath());
    }
    return warnings;
}

void TaskFiles::keepHandedBackResidual(qint64 jobId, const QString& taskDir) const
{
    const QString residualIn = taskDir + u'/' + QString::fromLatin1(kResidual.taken);
    const QString kept = jobStateFile(kResidual.folder, jobId);
    if (QFileInfo::exists(residualIn) && !QFileInfo::exists(kept))
        (void)QFile::rename(residualIn, kept);
}

void TaskFiles::removeTaskFolder(const LeaseId& leaseId) const
{
    const QString dir = taskFolder(leaseId);
    if (QFileInfo::exists(dir))
        QDir(dir).removeRecursively();
}

QString TaskFiles::jobStateFile(const char* folder, qint64 jobId) const
{
    return m_dataDir + QStringLiteral("/%1/job-%2.safetensors").arg(QString::fromLatin1(folder)).arg(jobId);
}

Status TaskFiles::recordFetchedBytes(SubtaskStore& store)
{
    SubtaskTotals add;
    add.downloadedBytes = m_fetchedBytes.exchange(0);
    if (add.downloadedBytes == 0)
        return {};
    return store.addTotals(add);
}

} // namespace gleaner::agent
