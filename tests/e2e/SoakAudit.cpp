#include "SoakAudit.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QMap>
#include <QRegularExpression>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QUrl>
#include <QUuid>

#include <map>
#include <optional>
#include <vector>

namespace gleaner::e2e {
namespace {

// A violation list stays readable when one fault repeats a thousand times.
constexpr int kMaxViolationsPerCheck = 20;

struct UpdateRow
{
    qint64 seq = 0;
    qint64 jobId = 0;
    QString leaseId;
    QString agentId;
    int epoch = 0;
    std::optional<qint64> appliedVersion;
};

struct LeaseRow
{
    QString id;
    qint64 workunitId = 0;
    QString agentId;
    QString state;
};

struct WorkunitRow
{
    qint64 id = 0;
    qint64 jobId = 0;
    int epoch = 0;
    int shard = 0;
    QString state;
    int issued = 0;
};

struct JobRow
{
    qint64 id = 0;
    QString state;
    QString reason;
    std::optional<double> accuracy;
    double target = 0;
};

struct Tables
{
    std::vector<UpdateRow> updates; // by seq
    QHash<QString, LeaseRow> leases;
    std::map<qint64, WorkunitRow> workunits;
    std::map<qint64, JobRow> jobs;
    QHash<qint64, QPair<qint64, qint64>> snapshots;    // job -> (version, last_seq)
    QHash<qint64, QMap<int, int>> epochEndValidations; // job -> epoch -> rows
};

// Violations of one check, capped, with a count of what was left out.
class Findings
{
public:
    explicit Findings(QStringList& out) : m_out(out) {}
    ~Findings()
    {
        if (m_count > kMaxViolationsPerCheck)
            m_out << QStringLiteral("... and %1 more like the last").arg(m_count - kMaxViolationsPerCheck);
    }
    void add(const QString& line)
    {
        if (++m_count <= kMaxViolationsPerCheck)
            m_out << line;
    }

private:
    QStringList& m_out;
    int m_count = 0;
};

QString readTables(const QString& path, Tables& t)
{
    const QString connection = QStringLiteral("soak-audit-") + QUuid::createUuid().toString(QUuid::Id128);
    QString error;
    {
        const bool postgres = path.startsWith(u"postgresql://");
        QSqlDatabase db = QSqlDatabase::addDatabase(postgres ? QStringLiteral("QPSQL") : QStringLiteral("QSQLITE"),
                                                    connection);
        if (postgres) { // a test server's URL: postgresql://user@host:port/database, no password
            const QUrl url(path);
            db.setHostName(url.host());
            db.setPort(url.port(5432));
            db.setUserName(url.userName());
            db.setDatabaseName(url.path().mid(1));
        } else {
            db.setDatabaseName(path);
            db.setConnectOptions(QStringLiteral("QSQLITE_OPEN_READONLY"));
        }
        if (!db.open()) {
            error = QStringLiteral("cannot open %1 read-only: %2").arg(path, db.lastError().text());
        } else {
            const auto run = [&](const char* sql) {
                QSqlQuery q(db);
                if (!q.exec(QString::fromLatin1(sql)) && error.isEmpty())
                    error = QStringLiteral("%1: %2: %3")
                                .arg(path, QString::fromLatin1(sql), q.lastError().text());
                return q;
            };
            QSqlQuery u = run(
                "SELECT seq, job_id, lease_id, agent_id, epoch, applied_version FROM updates ORDER BY seq");
            while (u.next())
                t.updates.push_back(
                    {u.value(0).toLongLong(), u.value(1).toLongLong(), u.value(2).toString(),
                     u.value(3).toString(), u.value(4).toInt(),
                     u.value(5).isNull() ? std::nullopt : std::optional<qint64>(u.value(5).toLongLong())});
            QSqlQuery l = run("SELECT id, workunit_id, agent_id, state FROM leases");
            while (l.next())
                t.leases.insert(l.value(0).toString(), {l.value(0).toString(), l.value(1).toLongLong(),
                                                        l.value(2).toString(), l.value(3).toString()});
            QSqlQuery w = run("SELECT id, job_id, epoch, shard, state, issued FROM workunits");
            while (w.next())
                t.workunits[w.value(0).toLongLong()] = {w.value(0).toLongLong(), w.value(1).toLongLong(),
                                                        w.value(2).toInt(),      w.value(3).toInt(),
                                                        w.value(4).toString(),   w.value(5).toInt()};
            QSqlQuery j = run("SELECT id, state, reason, accuracy, spec FROM jobs");
            while (j.next()) {
                const QJsonObject spec = QJsonDocument::fromJson(j.value(4).toByteArray()).object();
                t.jobs[j.value(0).toLongLong()] = {
                    j.value(0).toLongLong(), j.value(1).toString(), j.value(2).toString(),
                    j.value(3).isNull() ? std::nullopt : std::optional<double>(j.value(3).toDouble()),
                    spec.value(QStringLiteral("target_accuracy")).toDouble()};
            }
            QSqlQuery s = run("SELECT job_id, version, last_seq FROM snapshots");
            while (s.next())
                t.snapshots.insert(s.value(0).toLongLong(),
                                   {s.value(1).toLongLong(), s.value(2).toLongLong()});
            QSqlQuery v = run("SELECT job_id, epoch FROM validations WHERE epoch_end = 1");
            while (v.next())
                t.epochEndValidations[v.value(0).toLongLong()][v.value(1).toInt()] += 1;
        }
    }
    QSqlDatabase::removeDatabase(connection);
    return error;
}

// The workunits that have a result folded in (a row in updates).
QSet<qint64> workunitsWithResult(const Tables& t)
{
    QSet<qint64> units;
    for (const UpdateRow& r : t.updates)
        if (const auto lease = t.leases.constFind(r.leaseId); lease != t.leases.cend())
            units.insert(lease->workunitId);
    return units;
}

// (1) What was acknowledged is recorded once, with the seq the agent was told. A 202 for a later result of a
// workunit that already had one (the late result of an expired lease) is compared with the first, not recorded
// as an update: its lease is completed and its workunit has its one row.
void checkAcknowledged(const AcknowledgedResults& acked, const QHash<QString, const UpdateRow*>& byLease,
                       const Tables& t, QStringList& violations)
{
    Findings missing(violations);
    const QSet<qint64> withResult = workunitsWithResult(t);
    for (auto it = acked.answered202.cbegin(); it != acked.answered202.cend(); ++it) {
        const QString& lease = it.key();
        const UpdateRow* row = byLease.value(lease);
        const auto leaseRow = t.leases.constFind(lease);
        if (!row && leaseRow != t.leases.cend() && leaseRow->state == u"completed"
            && withResult.contains(leaseRow->workunitId))
            continue;
        if (!row) {
            missing.add(
                QStringLiteral("lease %1: agent %2 logged 202 for its result, but the coordinator has no "
                               "row of it in updates (an acknowledged update was lost)")
                    .arg(lease, acked.agentOf.value(lease)));
            continue;
        }
        if (it.value() > 1)
            missing.add(
                QStringLiteral("lease %1: agent %2 logged %3 answers 202 for one result (taken twice?)")
                    .arg(lease, acked.agentOf.value(lease))
                    .arg(it.value()));
        const qint64 told = acked.announcedSeq.value(lease, -1);
        if (told >= 0 && told != row->seq)
            missing.add(QStringLiteral("lease %1: the 202 named update %2, but its row is seq %3")
                            .arg(lease)
                            .arg(told)
                            .arg(row->seq));
    }
}

// (1) A job's rows were folded once each, in order, and the final weights are version N wherever one looks.
void checkFolding(qint64 jobId, const std::vector<const UpdateRow*>& rows, const Tables& t,
                  const AuditInput& in, QStringList& violations)
{
    Findings folded(violations);
    const qint64 n = qint64(rows.size());
    for (qint64 i = 0; i < n; ++i) {
        const UpdateRow& r = *rows[size_t(i)];
        if (!r.appliedVersion)
            folded.add(
                QStringLiteral("job %1: update seq %2 (lease %3) was never folded in (applied_version is "
                               "NULL)")
                    .arg(jobId)
                    .arg(r.seq)
                    .arg(r.leaseId));
        else if (*r.appliedVersion != i + 1)
            folded.add(
                QStringLiteral("job %1: update seq %2 (lease %3) is the %4th by seq but was folded in as "
                               "version %5 (versions must run 1..N in seq order, each once)")
                    .arg(jobId)
                    .arg(r.seq)
                    .arg(r.leaseId)
                    .arg(i + 1)
                    .arg(*r.appliedVersion));
    }
    const auto versionIs = [&](const QString& where, qint64 version) {
        if (version != n)
            folded.add(QStringLiteral("job %1: %2 is version %3, but %4 updates were recorded")
                           .arg(jobId)
                           .arg(where)
                           .arg(version)
                           .arg(n));
    };
    if (n > 0 && !t.snapshots.contains(jobId))
        folded.add(QStringLiteral("job %1: %2 updates but no snapshot of its weights").arg(jobId).arg(n));
    if (t.snapshots.contains(jobId)) {
        versionIs(QStringLiteral("its last snapshot"), t.snapshots.value(jobId).first);
        if (n > 0 && t.snapshots.value(jobId).second != rows.back()->seq)
            folded.add(QStringLiteral("job %1: its last snapshot ends at seq %2, its last update is seq %3")
                           .arg(jobId)
                           .arg(t.snapshots.value(jobId).second)
                           .arg(rows.back()->seq));
    }
    if (in.exportedVersion.contains(jobId))
        versionIs(QStringLiteral("the file `job export` wrote"), in.exportedVersion.value(jobId));
    if (in.statusBefore.contains(jobId))
        versionIs(QStringLiteral("`job status` (before the stop)"),
                  in.statusBefore.value(jobId).value(QStringLiteral("version")).toInteger(-1));
    if (in.statusAfterRestart.contains(jobId))
        versionIs(QStringLiteral("`job status` after a restart"),
                  in.statusAfterRestart.value(jobId).value(QStringLiteral("version")).toInteger(-1));
}

// (2) Results, leases and workunits agree: nothing lost, nothing counted twice.
void checkWorkunits(const Tables& t, const QHash<QString, const UpdateRow*>& byLease, QStringList& violations,
                    int& lateResults)
{
    Findings found(violations);
    QHash<qint64, int> resultsOf; // workunit -> rows in updates
    for (const UpdateRow& r : t.updates) {
        const auto lease = t.leases.constFind(r.leaseId);
        if (lease == t.leases.cend()) {
            found.add(QStringLiteral("update seq %1 names lease %2, which the leases table does not have")
                          .arg(r.seq)
                          .arg(r.leaseId));
            continue;
        }
        resultsOf[lease->workunitId] += 1;
        if (lease->state != u"completed" || lease->agentId != r.agentId)
            found.add(QStringLiteral(
                          "update seq %1: its lease %2 is '%3' of agent %4, not a completed lease of the "
                          "uploading agent %5")
                          .arg(r.seq)
                          .arg(r.leaseId, lease->state, lease->agentId, r.agentId));
        const auto unit = t.workunits.find(lease->workunitId);
        if (unit == t.workunits.end() || unit->second.jobId != r.jobId || unit->second.epoch != r.epoch)
            found.add(QStringLiteral(
                          "update seq %1 (lease %2): job %3 epoch %4, but its workunit %5 is not of that "
                          "job and epoch")
                          .arg(r.seq)
                          .arg(r.leaseId)
                          .arg(r.jobId)
                          .arg(r.epoch)
                          .arg(lease->workunitId));
    }
    const QSet<qint64> withResult = workunitsWithResult(t);
    for (const LeaseRow& lease : t.leases) {
        if (lease.state != u"completed" || byLease.contains(lease.id))
            continue;
        if (withResult.contains(lease.workunitId))
            lateResults += 1; // a later result of the workunit, compared with its first and not folded in
        else
            found.add(
                QStringLiteral("lease %1 (workunit %2, agent %3) is completed but has no row in updates")
                    .arg(lease.id)
                    .arg(lease.workunitId)
                    .arg(lease.agentId));
    }
    for (const auto& [id, unit] : t.workunits) {
        const int results = resultsOf.value(id);
        if (unit.state == u"done" && results == 0)
            found.add(QStringLiteral("workunit %1 (job %2 epoch %3 shard %4) is done without a result")
                          .arg(id)
                          .arg(unit.jobId)
                          .arg(unit.epoch)
                          .arg(unit.shard));
        if (unit.state != u"done" && results > 0)
            found.add(QStringLiteral("workunit %1 (job %2 epoch %3 shard %4) has %5 result(s) but is '%6'")
                          .arg(id)
                          .arg(unit.jobId)
                          .arg(unit.epoch)
                          .arg(unit.shard)
                          .arg(results)
                          .arg(unit.state));
        // Only a workunit's first result is folded in: a shard never counts twice.
        if (results > 1)
            found.add(QStringLiteral("workunit %1 (job %2 epoch %3 shard %4) was folded in %5 times")
                          .arg(id)
                          .arg(unit.jobId)
                          .arg(unit.epoch)
                          .arg(unit.shard)
                          .arg(results));
        // An epoch that was validated as ended had every workunit done.
        if (unit.state != u"done" && t.epochEndValidations.value(unit.jobId).contains(unit.epoch))
            found.add(
                QStringLiteral("workunit %1 (job %2 epoch %3 shard %4) is '%5', but epoch %3 was validated "
                               "as complete (lost)")
                    .arg(id)
                    .arg(unit.jobId)
                    .arg(unit.epoch)
                    .arg(unit.shard)
                    .arg(unit.state));
    }
    for (auto job = t.epochEndValidations.cbegin(); job != t.epochEndValidations.cend(); ++job)
        for (auto epoch = job->cbegin(); epoch != job->cend(); ++epoch)
            if (epoch.value() > 1)
                found.add(QStringLiteral("job %1: epoch %2 was validated as complete %3 times")
                              .arg(job.key())
                              .arg(epoch.key())
                              .arg(epoch.value()));
}

// (3) Every job reached its target, and says the same after a restart. The jobs, for the figures.
QJsonArray checkTargets(const Tables& t, std::map<qint64, std::vector<const UpdateRow*>>& byJob,
                        const AuditInput& in, QStringList& violations)
{
    Findings targets(violations);
    QJsonArray jobs;
    for (const auto& [id, job] : t.jobs) {
        const bool reached = job.state == u"completed" && job.accuracy && *job.accuracy >= job.target;
        if (!reached)
            targets.add(
                QStringLiteral("job %1 is '%2' at accuracy %3, target %4: %5")
                    .arg(id)
                    .arg(job.state)
                    .arg(job.accuracy ? QString::number(*job.accuracy, 'f', 4) : QStringLiteral("none"))
                    .arg(job.target)
                    .arg(job.reason));
        const QJsonObject before = in.statusBefore.value(id);
        const QJsonObject after = in.statusAfterRestart.value(id);
        if (!before.isEmpty() && !after.isEmpty() &&
            (after.value(QStringLiteral("state")) != before.value(QStringLiteral("state")) ||
             after.value(QStringLiteral("accuracy")) != before.value(QStringLiteral("accuracy"))))
            targets.add(QStringLiteral("job %1: `job status` says %2 before a restart and %3 after it")
                            .arg(id)
                            .arg(QString::fromUtf8(QJsonDocument(before).toJson(QJsonDocument::Compact)),
                                 QString::fromUtf8(QJsonDocument(after).toJson(QJsonDocument::Compact))));
        jobs.append(
            QJsonObject{{QStringLiteral("id"), id},
                        {QStringLiteral("state"), job.state},
                        {QStringLiteral("accuracy"), job.accuracy ? QJsonValue(*job.accuracy) : QJsonValue()},
                        {QStringLiteral("updates"), qint64(byJob[id].size())},
                        {QStringLiteral("reached_target"), reached}});
    }

    return jobs;
}

} // namespace

void AcknowledgedResults::read(const QString& agentName, const QString& log)
{
    static const QRegularExpression answered(
        QStringLiteral("\"PUT\" \"[^\"]*/api/v1/work/([0-9a-f]+)/result\" -> 202 "));
    static const QRegularExpression accepted(
        QStringLiteral("lease ([0-9a-f]+): result accepted \\(update (\\d+),"));
    for (auto it = answered.globalMatch(log); it.hasNext();) {
        const QString lease = it.next().captured(1);
        answered202[lease] += 1;
        agentOf.insert(lease, agentName);
    }
    for (auto it = accepted.globalMatch(log); it.hasNext();) {
        const auto m = it.next();
        announcedSeq.insert(m.captured(1), m.captured(2).toLongLong());
    }
}

AuditReport auditSoak(const AuditInput& in)
{
    AuditReport report;
    Tables t;
    if (const QString error = readTables(in.databasePath, t); !error.isEmpty()) {
        report.violations << error;
        return report;
    }
    QHash<QString, const UpdateRow*> byLease;
    std::map<qint64, std::vector<const UpdateRow*>> byJob;
    for (const UpdateRow& r : t.updates) {
        byLease.insert(r.leaseId, &r);
        byJob[r.jobId].push_back(&r);
    }

    checkAcknowledged(in.acknowledged, byLease, t, report.violations);
    for (const auto& [id, job] : t.jobs)
        checkFolding(id, byJob[id], t, in, report.violations);
    int lateResults = 0;
    checkWorkunits(t, byLease, report.violations, lateResults);
    const QJsonArray jobs = checkTargets(t, byJob, in, report.violations);

    int acknowledged = 0;
    for (const UpdateRow& r : t.updates)
        acknowledged += in.acknowledged.answered202.contains(r.leaseId) ? 1 : 0;
    QJsonObject leases;
    for (const LeaseRow& lease : t.leases)
        leases.insert(lease.state, leases.value(lease.state).toInt() + 1);
    report.figures.insert(QStringLiteral("updates"), qint64(t.updates.size()));
    report.figures.insert(QStringLiteral("updates_acknowledged_202"), acknowledged);
    // Rows whose 202 no agent logged: the answer was lost to a kill; the agent's retry got 409 "already
    // received".
    report.figures.insert(QStringLiteral("updates_answer_lost"), qint64(t.updates.size()) - acknowledged);
    report.figures.insert(QStringLiteral("late_results"), lateResults);
    report.figures.insert(QStringLiteral("leases"), leases);
    report.figures.insert(QStringLiteral("workunits"), qint64(t.workunits.size()));
    report.figures.insert(QStringLiteral("jobs"), jobs);
    return report;
}

} // namespace gleaner::e2e
