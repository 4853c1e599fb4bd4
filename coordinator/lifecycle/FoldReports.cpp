#include "lifecycle/FoldReports.h"

#include "config/DataDirectory.h"
#include "intake/AgentStanding.h"
#include "lifecycle/JobDesk.h"
#include "metrics/CoordinatorMetrics.h"
#include "scheduling/LeasePacer.h"
#include "scheduling/ResultIntake.h"
#include "store/Database.h"
#include "store/JobTallies.h"
#include "util/Durability.h"
#include "views/DashboardFeed.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QLoggingCategory>
#include <QSet>

#include <utility>

Q_DECLARE_LOGGING_CATEGORY(lcJobs)

namespace gleaner::coordinator {
namespace {

// How old a file in a job's updates/ folder that no update names must be before a snapshot's clean-up removes
// it. Such a file was left by a crash between its move and its row's commit (intake/ResultDesk), or by
// an attempt refused at the commit that could not remove its copy. A younger one may be the copy of a commit
// still under way at another coordinator.
constexpr qint64 kUnnamedUpdateAgeMs = 60 * 60 * 1000;

void removeUnnamedUpdates(Database& db, const QString& storage, qint64 jobId)
{
    const QString folder = QStringLiteral("updates/%1").arg(jobId);
    const QDateTime before = QDateTime::currentDateTimeUtc().addMSecs(-kUnnamedUpdateAgeMs);
    QFileInfoList old;
    for (const QFileInfo& entry :
         QDir(storage + u'/' + folder).entryInfoList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot))
        if (entry.lastModified() < before && !entry.fileName().startsWith(QLatin1String(".nfs")))
            old.append(
                entry); // (an NFS client's .nfs file is its own: a removed file another one holds open)
    if (old.isEmpty())
        return;
    auto rows = db.exec(QStringLiteral("SELECT file FROM updates WHERE job_id = ? AND file != ''"), {jobId});
    if (!rows) {
        qCWarning(lcJobs) << "cannot list the update files of job" << jobId << ":" << rows.error();
        return;
    }
    QSet<QString> named;
    while (rows->next())
        named.insert(rows->value(0).toString());
    rows->finish();
    for (const QFileInfo& entry : old) {
        if (named.contains(folder + u'/' + entry.fileName()))
            continue;
        if (QFile::remove(entry.filePath()))
            qCInfo(lcJobs) << "removed" << entry.filePath() << ": no update of job" << jobId << "names it";
    }
}

} // namespace

FoldReports::FoldReports(Parts parts, const CoordinatorConfig& config, const Clock& clock, QString storage)
    : m_parts(parts), m_config(config), m_clock(clock), m_storage(std::move(storage))
{
}

void FoldReports::applied(qint64 jobId, qint64 seq, qint64 version)
{
    (void)m_parts.db.exec(QStringLiteral("UPDATE updates SET applied_version = ? WHERE seq = ?"),
                          {version, seq});
    if (JobState* job = m_parts.jobDesk.find(jobId))
        job->updatesApplied = std::max(job->updatesApplied, version);
    m_parts.feed.noteApplied(jobId, seq, version);
}

void FoldReports::foldRefused(qint64 jobId, qint64 seq, const QString& reason, bool agentsFault)
{
    // With the checkpoint its lease resumed, if any: a result trained on from another agent's checkpoint
    // started from that agent's weights, on a base the server has since left behind, and its fold may be
    // refused for either. That is not held against the agent that resumed it (the checkpoint is gone by now:
    // nobody is). The job's count of updates not folded moves with the row, once: a refusal recorded before
    // (a replay's) changes neither.
    QString agentId;
    bool resumed = false;
    const Status recorded = m_parts.db.transaction([&]() -> Status {
        auto row = m_parts.db.exec(
            QStringLiteral("UPDATE updates SET fold_error = ? WHERE seq = ? AND fold_error = '' "
                           "RETURNING agent_id, (SELECT checkpoint_sha FROM leases WHERE "
                           "leases.id = updates.lease_id)"),
            {reason, seq});
        if (!row)
            return fail(row.error());
        if (!row->next())
            return fail(QStringLiteral("no such update, or its refusal is recorded already"));
        agentId = row->value(0).toString();
        resumed = !row->value(1).toString().isEmpty();
        row->finish();
        return m_parts.tallies.countNotFolded(jobId);
    });
    if (!recorded) {
        qCCritical(lcJobs) << "cannot record that update" << seq << "was not folded in:" << recorded.error();
        return;
    }
    qCCritical(lcJobs).nospace() << "job " << jobId << ": update " << seq << " of agent " << agentId
                                 << " was received but not folded in: " << reason;
    if (JobState* job = m_parts.jobDesk.find(jobId))
        job->counts.updatesNotFolded += 1;
    m_parts.metrics.updateNotFolded();
    if (agentsFault && !resumed)
        m_parts.standing.refused(agentId, reason);
    else if (agentsFault)
        qCWarning(lcJobs).nospace() << "update " << seq << " trained on from a handed-back checkpoint: its "
                                    << "refused fold is not counted against agent " << agentId;
}

void FoldReports::published(qint64 jobId, std::optional<PublishedWeights> report, bool forParked)
{
    JobState* job = m_parts.jobDesk.find(jobId);
    if (!job)
        return;
    // The publication parked leases asked for is done, whatever it gave.
    const qint64 asked = forParked ? std::exchange(job->publicationAskedThrough, 0) : 0;
    if (!report) {
        m_parts.pacer.answerParked();
        return;
    }
    const PublishedWeights& published = *report;
    // Among several coordinators the weights move with the others' folds too: what was published is the
    // version the job's status shows.
    job->updatesApplied = std::max(job->updatesApplied, published.version);
    if (published.sha256.isEmpty()) {
        // Nothing new to hand out: the file in force holds every update handled up to published.throughSeq.
        if (published.version == job->published.version)
            job->published.throughSeq = std::max(job->published.throughSeq, published.throughSeq);
    } else if (published.version > job->published.version) {
        if (!job->published.sha256.isEmpty())
            job->retired.push_back(job->published); // its patches go with it
        job->published = published;
    }
    ResultIntake::published(*job);
    m_parts.pacer.published(*job, forParked, asked);
}

void FoldReports::snapshotWritten(qint64 jobId, qint64 version, qint64 lastSeq, const QString& sha,
                                  const QString& ruleSha)
{
    // Never an older snapshot over a newer one: among several coordinators, a housekeeper that lost its lock
    // (its connection went) may still record the one it was writing.
    auto stored = m_parts.db.exec(
        QStringLiteral("INSERT INTO snapshots (job_id, version, last_seq, sha256, written_ms, "
                       "rule_sha) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
                       "version = excluded.version, last_seq = excluded.last_seq, sha256 = "
                       "excluded.sha256, written_ms = excluded.written_ms, rule_sha = "
                       "excluded.rule_sha WHERE snapshots.version <= excluded.version"),
        {jobId, version, lastSeq, sha, m_clock.nowMs(), ruleSha});
    if (!stored) {
        qCCritical(lcJobs) << "cannot record snapshot of job" << jobId << ":" << stored.error();
        return;
    }
    if (JobState* job = m_parts.jobDesk.find(jobId)) {
        // The previous snapshot is superseded; its file goes the way of retired published weights.
        if (!job->snapshotSha.isEmpty() && job->snapshotSha != sha)
            job->retired.push_back(PublishedWeights{-1, job->snapshotSha, 0, 0});
        if (!job->snapshotRuleSha.isEmpty() && job->snapshotRuleSha != ruleSha)
            job->retired.push_back(PublishedWeights{-1, job->snapshotRuleSha, 0, 0});
        job->snapshotSha = sha;
        job->snapshotRuleSha = ruleSha;
        // The snapshot holds these updates: a replay no longer needs the weights they trained from. (Among
        // several coordinators, those whose files go below.)
        if (!m_config.isShared())
            job->basesInFlight.erase(job->basesInFlight.begin(), job->basesInFlight.upper_bound(lastSeq));
    }
    Durability::faultPoint("snapshot.recorded");
    // The snapshot holds these updates now, durably: its file and folder were synced before it was posted
    // here, and its row is committed with synchronous=FULL. Only now are the updates' files no longer needed
    // for a replay. A first result whose workunit still has replicas out is kept until they are compared with
    // it (a later snapshot removes it).
    QSet<qint64> kept;
    JobState* job = m_parts.jobDesk.find(jobId);
    if (job)
        for (const auto& [id, unit] : job->workunits)
            if (unit.first && !unit.openLeases.isEmpty())
                kept.insert(unit.first->seq);
    // Alone, this process folded every update up to lastSeq, in order. Among several coordinators, each folds
    // what it received, and the order they went into the weights is the order of their versions: the snapshot
    // holds exactly the updates folded at its version or before, and those never folded (refused) need no
    // file. (An update folded but not yet marked is kept until a later snapshot.)
    auto files = m_config.isShared()
                     ? m_parts.db.exec(
                           QStringLiteral("SELECT seq, file FROM updates WHERE job_id = ? AND file != '' AND "
                                          "(applied_version <= ? OR fold_error != '')"),
                           {jobId, version})
                     : m_parts.db.exec(
                           QStringLiteral("SELECT seq, file FROM updates WHERE job_id = ? AND seq <= ? AND "
                                          "file != ''"),
                           {jobId, lastSeq});
    std::vector<std::pair<qint64, QString>> removed;
    while (files && files->next())
        if (!kept.contains(files->value(0).toLongLong()))
            removed.emplace_back(files->value(0).toLongLong(), files->value(1).toString());
    if (files)
        files->finish();
    const Status cleared = m_parts.db.transaction([&]() -> Status {
        for (const auto& [seq, file] : removed)
            if (auto r = m_parts.db.exec(QStringLiteral("UPDATE updates SET file = '' WHERE seq = ?"), {seq});
                !r)
                return fail(r.error());
        return {};
    });
    if (!cleared) {
        qCCritical(lcJobs) << "cannot record the removal of replayed updates' files:" << cleared.error();
        return;
    }
    QSet<qint64> gone;
    for (const auto& [seq, file] : removed) {
        QFile::remove(m_storage + u'/' + file);
        gone.insert(seq);
    }
    if (job) {
        for (auto& [id, unit] : job->workunits)
            if (unit.first && gone.contains(unit.first->seq))
                unit.first->file.clear();
        if (m_config.isShared())
            std::erase_if(job->basesInFlight, [&](const auto& base) { return gone.contains(base.first); });
    }
    removeUnnamedUpdates(m_parts.db, m_storage, jobId);
    Durability::faultPoint("snapshot.cleaned");
}

void FoldReports::validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy,
                            double loss)
{
    m_parts.jobDesk.validated(jobId, epoch, epochEnd, version, accuracy, loss);
}

void FoldReports::validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error)
{
    m_parts.jobDesk.validationFailed(jobId, epoch, epochEnd, error);
}

void FoldReports::widthMeasured(qint64 jobId, qint64 version, double noiseScale)
{
    JobState* job = m_parts.jobDesk.find(jobId);
    if (!job)
        return;
    job->width.measured(version, noiseScale, m_clock.nowMs());
    m_parts.feed.noteWidth(*job);
}

} // namespace gleaner::coordinator
