// AgentDaemon: a subtask's files step by step (TaskFiles does the work on the network thread; here its
// outcome moves the subtask on).
#include "daemon/AgentDaemon.h"
#include "daemon/AgentDaemonInternal.h"

namespace gleaner::agent {

using namespace daemon_detail;

void AgentDaemon::download(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    // Files already cached are hashed once more when the task folder is made; after a mismatch there, the
    // cached copy itself is checked here (an altered one is removed and fetched again).
    const bool reverify = active->tries > 0;
    m_network->run([this, leaseId, manifest = *active->manifest,
                    reverify] { return m_files->fetch(leaseId, manifest, reverify); },
                   [this, leaseId](FetchOutcome outcome) {
                       for (const QString& warning : outcome.warnings)
                           m_feed.log(QStringLiteral("warning"), warning);
                       recordFetchedBytes();
                       auto active = stepReturned(leaseId);
                       if (!active)
                           return;
                       if (outcome.contentRefused)
                           return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
                       if (!outcome.ok) {
                           if (active->tries + 1 >= kDownloadTriesBeforeFailing && m_reach.reachable())
                               return failSubtask(leaseId, QStringLiteral("download"), outcome.error);
                           return stepFailed(
                               leaseId,
                               QStringLiteral("downloading the files of lease %1").arg(leaseId.toString()),
                               outcome.error);
                       }
                       coordinatorReached();
                       active->tries = 0;
                       if (!setState(leaseId, SubtaskState::Verified))
                           return;
                       m_status->publish(*active);
                       prepareTaskFolder(leaseId);
                   });
}

void AgentDaemon::prepareTaskFolder(const LeaseId& leaseId)
{
    auto active = m_active.value(leaseId);
    active->busy = true;
    // Only a verified manifest gets a folder, named by the lease id that was signed in it.
    const QString dir = m_files->taskFolder(active->manifest->leaseId);
    // On the network thread, in order after any download of the same files: hashing is disk work that must
    // not hold up the loop.
    m_network->run([this, dir, manifestBytes = active->record.manifest,
                    manifest = *active->manifest] { return m_files->layOut(dir, manifestBytes, manifest); },
                   [this, leaseId, dir](FetchOutcome outcome) {
                       auto active = stepReturned(leaseId);
                       if (!active)
                           return;
                       if (!outcome.ok) {
                           if (outcome.contentRefused) {
                               // Fetch it again: the coordinator's copy may well be intact.
                               m_feed.log(QStringLiteral("warning"), outcome.error);
                               if (active->tries++ == 0)
                                   return download(leaseId); // checks the cached copy, fetches it again if it
                                                             // was altered
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
    if (auto s = m_files->recordFetchedBytes(*m_store); !s)
        m_feed.log(QStringLiteral("error"), s.error());
}

} // namespace gleaner::agent
