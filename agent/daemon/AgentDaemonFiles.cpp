// AgentDaemon: a subtask's files, from the cache or the coordinator (whole, or patched from an earlier weights
// file) into its task folder, checked against the signed manifest; and what a job's subtasks hand on to the next
// on this agent (the local optimizer's state, the residual of error feedback).
#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

#include "cache/FileCache.h"
#include "crypto/Sha256.h"
#include "daemon/StopSignal.h"
#include "net/CoordinatorClient.h"
#include "runner/WeightsPatcher.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSaveFile>

namespace gleaner::agent {

using namespace daemon_detail;

void AgentDaemon::download(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    const QList<ManifestFile> files = active->manifest->files;
    const QList<ManifestPatch> patches = active->manifest->weightsPatches;
    // Files already cached are hashed once more when the task folder is made; after a mismatch there, the
    // cached copy itself is checked here (an altered one is removed and fetched again).
    const bool reverify = active->tries > 0;
    StopSignal* stop = m_stop.get();
    onNetwork(
        [this, files, patches, stop, leaseId, reverify] {
            FetchOutcome outcome;
            for (const ManifestFile& file : files) {
                const CacheRole role = cacheRoleFromName(file.role).value_or(CacheRole::Unknown);
                if (m_cache->contains(file.sha256) && (!reverify || m_cache->verify(file.sha256))) {
                    m_cache->touch(file.sha256);
                    continue;
                }
                // The weights, from an earlier file this agent holds and a patch, when the manifest offers one;
                // whatever goes wrong there, the full file is fetched as before.
                if (file.role == u"weights" && !patches.isEmpty() && !reverify) {
                    auto patched = patchWeights(*m_cache, file, patches,
                                                [&](const QString& sha, const QString& path, qint64 size) {
                                                    return m_client->download(sha, path, size,
                                                                              [this, stop](const TransferProgress&) {
                                                                                  return !stop->stopped() &&
                                                                                         !m_abortFetches;
                                                                              });
                                                });
                    if (patched) {
                        m_fetchedBytes += *patched;
                        continue;
                    }
                    outcome.warnings << QStringLiteral("lease %1: the weights could not be patched (%2); fetching "
                                                       "the full file")
                                            .arg(leaseId.toString(), patched.error());
                }
                auto writer = m_cache->beginWrite(file.sha256, file.size, role);
                if (!writer) {
                    outcome.error = writer.error();
                    return outcome;
                }
                const CacheWriter& w = **writer;
                Status got = m_client->download(file.sha256, w.partialPath(), file.size,
                                                [this, stop](const TransferProgress&) {
                                                    return !stop->stopped() && !m_abortFetches; // leaving: hand back
                                                });
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
                    outcome.error =
                        QStringLiteral("the %1 file of lease %2 was refused: %3. The coordinator's copy "
                                       "differs from what its signed manifest promises; nothing was run")
                            .arg(file.role, leaseId.toString(), committed.error());
                    return outcome;
                }
                m_fetchedBytes += file.size - w.resumeOffset(); // what this download fetched, not a resumed part
                if (committed->eviction.evicted.size() > 0)
                    qCInfo(lcDaemon).noquote()
                        << "cache: evicted" << committed->eviction.evicted.size() << "file(s)";
            }
            outcome.ok = true;
            return outcome;
        },
        [this, leaseId](FetchOutcome outcome) {
            for (const QString& warning : outcome.warnings)
                log(QStringLiteral("warning"), warning);
            recordFetchedBytes();
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (outcome.contentRefused)
                return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
            if (!outcome.ok) {
                if (active->tries + 1 >= kDownloadTriesBeforeFailing && m_reachable)
                    return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
                return stepFailed(leaseId,
                                  QStringLiteral("downloading the files of lease %1").arg(leaseId.toString()),
                                  outcome.error);
            }
            coordinatorReached();
            active->tries = 0;
            if (!setState(leaseId, SubtaskState::Verified))
                return;
            publishSubtask(*active);
            prepareTaskFolder(leaseId);
        });
}

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

} // namespace

void AgentDaemon::keepJobState(qint64 jobId, const QString& taskDir)
{
    // The worker's optimizer state at the end of the subtask: the job's next subtask on this agent starts from
    // it; and what its upload left out (error feedback): the next upload sends it. The newest wins when several
    // subtasks of one job run at once.
    for (const JobStateFile& state : {kOptimizerState, kResidual}) {
        const QString produced = taskDir + u'/' + QString::fromLatin1(state.produced);
        if (!QFileInfo::exists(produced))
            continue;
        const QString kept = jobStateFile(state.folder, jobId);
        QDir().mkpath(QFileInfo(kept).path());
        QFile::remove(kept);
        if (!QFile::rename(produced, kept))
            log(QStringLiteral("warning"),
                QStringLiteral("cannot keep %1 of job %2 in %3; its next subtask starts without it")
                    .arg(QString::fromLatin1(state.produced))
                    .arg(jobId)
                    .arg(kept));
        // One file per job: those of jobs this agent has not worked on for a week go.
        const QDir folder(QFileInfo(kept).path());
        for (const QFileInfo& old : folder.entryInfoList({QStringLiteral("job-*.safetensors")}, QDir::Files))
            if (old.lastModified().msecsTo(QDateTime::currentDateTimeUtc()) > 7LL * 24 * 3600 * 1000)
                QFile::remove(old.filePath());
    }
}

QString AgentDaemon::jobStateFile(const char* folder, qint64 jobId) const
{
    return m_options.dataDir + QStringLiteral("/%1/job-%2.safetensors").arg(QString::fromLatin1(folder)).arg(jobId);
}

void AgentDaemon::prepareTaskFolder(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    // Only a verified manifest gets a folder, named by the lease id that was signed in it.
    const QString dir = taskFolder(active->manifest->leaseId);
    const QByteArray manifestBytes = active->record.manifest;
    const QList<ManifestFile> files = active->manifest->files;
    const QString optimizerState = jobStateFile(kOptimizerState.folder, active->manifest->jobId);
    const QString residual = jobStateFile(kResidual.folder, active->manifest->jobId);
    // On the network thread, in order after any download of the same files: hashing is disk work that must
    // not hold up the loop.
    onNetwork(
        [this, dir, manifestBytes, files, optimizerState, residual, scriptModel = active->manifest->scriptModel] {
            FetchOutcome outcome;
            if (!QDir().mkpath(dir)) {
                outcome.error = QStringLiteral("cannot create the task folder %1").arg(dir);
                return outcome;
            }
            QSaveFile manifest(dir + QStringLiteral("/manifest.json"));
            if (!manifest.open(QIODevice::WriteOnly) ||
                manifest.write(manifestBytes) != manifestBytes.size() || !manifest.commit()) {
                outcome.error = QStringLiteral("cannot write %1").arg(manifest.fileName());
                return outcome;
            }
            for (const ManifestFile& file : files) {
                if (file.role == u"model" && !scriptModel)
                    continue; // the manifest carries the zoo model's spec
                const QString target = dir + u'/' + fileName(file.role);
                // Every file is hashed right before a worker may read it; what is already in place is checked
                // in place (a resumed task), anything else is linked from the cache and checked there.
                if (!QFileInfo::exists(target)) {
                    const QString cached = m_cache->path(file.sha256);
                    if (cached.isEmpty()) {
                        outcome.error =
                            QStringLiteral("the %1 file %2 left the cache before the task started")
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
                    outcome.error =
                        QStringLiteral("%1 has SHA-256 %2, but the signed manifest says %3: the file was "
                                       "altered on this machine; nothing was run")
                            .arg(target, hex, file.sha256);
                    return outcome;
                }
            }
            // The job's optimizer state from this agent's previous subtask, for a worker that starts afresh (one
            // that resumes takes its checkpoint's). A copy: the next subtask to finish replaces the original.
            const QString optimizerIn = dir + u'/' + QString::fromLatin1(kOptimizerState.taken);
            if (QFileInfo::exists(optimizerState) && !QFileInfo::exists(dir + QStringLiteral("/checkpoint.safetensors")) &&
                !QFileInfo::exists(optimizerIn))
                (void)QFile::copy(optimizerState, optimizerIn);
            // What earlier uploads left out goes with one upload only: moved, not copied, or two subtasks of
            // the job running at once would both send it.
            const QString residualIn = dir + u'/' + QString::fromLatin1(kResidual.taken);
            if (QFileInfo::exists(residual) && !QFileInfo::exists(residualIn))
                (void)QFile::rename(residual, residualIn);
            outcome.ok = true;
            return outcome;
        },
        [this, leaseId, dir](FetchOutcome outcome) {
            auto active = stepReturned(leaseId);
            if (!active)
                return;
            if (!outcome.ok) {
                if (outcome.contentRefused) {
                    // Fetch it again: the coordinator's copy may well be intact.
                    log(QStringLiteral("warning"), outcome.error);
                    if (active->tries++ == 0)
                        return download(
                            leaseId); // checks the cached copy, fetches it again if it was altered
                }
                return failSubtask(leaseId, QStringLiteral("verify"), outcome.error);
            }
            if (active->record.taskDir != dir) {
                (void)m_store->setTaskDir(leaseId, dir);
                active->record.taskDir = dir;
            }
            startWorker(leaseId);
        });
}

void AgentDaemon::recordFetchedBytes()
{
    SubtaskTotals add;
    add.downloadedBytes = m_fetchedBytes.exchange(0);
    if (add.downloadedBytes == 0)
        return;
    if (auto s = m_store->addTotals(add); !s)
        log(QStringLiteral("error"), s.error());
}

} // namespace gleaner::agent
