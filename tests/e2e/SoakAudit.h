#pragma once
// The checks a chaos soak (ChaosSoak) ends with, made from what an operator can see once the processes have
// stopped: the coordinator's database (read only), the agents' logs, and what `job status` and `job export`
// showed. Each broken invariant is one line naming the job, the lease, the sequence number or the workunit,
// so that a failure is evidence, not a count:
//   (1) every result an agent logged as answered 202 is one row of `updates` (the seq the agent was told),
//   and
//       a job's rows were folded in once each, in order: applied versions 1..N by seq, and the final weights
//       (the snapshot, the exported file, `job status`, also after a restart) are version N;
//   (2) no workunit is lost or done twice: every workunit of a validated epoch is done, a done workunit has a
//       result, a workunit has no more results than leases, each result belongs to a completed lease of its
//       agent, each completed lease has its result, each epoch is validated once;
//   (3) each job completed by reaching its target accuracy.
// More than one result for a workunit is not a fault in itself: the coordinator accepts the late result of an
// expired, re-issued lease once (docs/architecture.md); the soak counts them.

#include <QHash>
#include <QJsonObject>
#include <QString>
#include <QStringList>

namespace gleaner::e2e {

// What the agents' network logs say about uploads: `"PUT" ".../api/v1/work/LEASE/result" -> 202` and the
// daemon's `lease LEASE: result accepted (update SEQ, ...)`.
struct AcknowledgedResults
{
    QHash<QString, int> answered202;     // lease -> how many 202 answers its agent logged
    QHash<QString, qint64> announcedSeq; // lease -> the seq the 202 named
    QHash<QString, QString> agentOf;     // lease -> the agent whose log has it
    void read(const QString& agentName, const QString& log);
};

struct AuditInput
{
    QString databasePath; // a copy of gleaner.db, or the postgresql:// URL of a copy of the coordinator's database
    AcknowledgedResults acknowledged;
    // By job id, as seen before the coordinator was stopped and after it was started again.
    QHash<qint64, QJsonObject> statusBefore;
    QHash<qint64, QJsonObject> statusAfterRestart;
    QHash<qint64, qint64> exportedVersion; // gleaner.version of `job export`; -1 when it failed
};

struct AuditReport
{
    QStringList violations;
    QJsonObject figures; // updates, acknowledged, unacknowledged, late results, leases by state, ...
    bool ok() const { return violations.isEmpty(); }
};

AuditReport auditSoak(const AuditInput& input);

} // namespace gleaner::e2e
