#pragma once
// The agent's record of every subtask it holds, persisted at each step of its life cycle so that a crash or a
// reboot loses nothing it can keep:
//
//   leased -> downloading -> verified -> training -> uploading -> done
//                 \______________\____________\___________\-----> failed (reported to the coordinator) | dropped
//
// One row per lease: the manifest exactly as signed and its signature (re-verified before a worker starts), the
// deadline, the task folder, how many times the worker was started, and why a subtask failed. The runner moves
// rows forward; on start it resumes each unfinished subtask whose lease is still open and drops the others.

#include "Result.h"
#include "store/SqlDatabase.h"
#include "util/LeaseId.h"

#include <QList>
#include <QString>

#include <memory>
#include <functional>
#include <optional>

namespace gleaner::agent {

enum class SubtaskState { Leased, Downloading, Verified, Training, Uploading, Done, Failed, Dropped };

QString subtaskStateName(SubtaskState state);
std::optional<SubtaskState> subtaskStateFromName(QStringView name);
// Done, Failed and Dropped: nothing more will happen to the subtask.
bool isFinal(SubtaskState state);

struct Subtask
{
    explicit Subtask(LeaseId id) : leaseId(std::move(id)) {}

    LeaseId leaseId;      // checked when the lease reply was read, and again when a row is read back
    QByteArray manifest;  // the exact signed bytes
    QByteArray signature; // base64, as leased
    qint64 deadlineMs = 0;
    SubtaskState state = SubtaskState::Leased;
    QString taskDir;
    int workerStarts = 0; // a crashed worker is retried once from its checkpoint
    QString error;        // why it failed or was dropped
    qint64 updatedMs = 0;
};

// What this machine has contributed, over the store's whole life.
struct SubtaskTotals
{
    qint64 subtasksDone = 0;   // results the coordinator accepted
    qint64 subtasksFailed = 0; // given back with a reason, or refused
    qint64 samples = 0;        // training samples of the accepted results
    double trainSeconds = 0;
    qint64 uploadedBytes = 0;   // result bodies sent and accepted
    qint64 downloadedBytes = 0; // files fetched from the coordinator (those found in the cache cost nothing)
};

class SubtaskStore final : public SqlDatabase
{
public:
    static Result<std::unique_ptr<SubtaskStore>> open(const QString& path);

    // Records a newly leased subtask; a lease id seen before is refused (a coordinator never repeats one).
    Status add(const Subtask& subtask);
    // Moves a subtask to `state` (with `error` for Failed / Dropped). Moving out of a final state, or backwards
    // past Verified (Training may return to Verified when its worker is restarted), is refused: that would be a
    // bug in the runner, and the message says which transition it tried.
    Status setState(const LeaseId& leaseId, SubtaskState state, const QString& error = {});
    Status setDeadline(const LeaseId& leaseId, qint64 deadlineMs);
    Status setTaskDir(const LeaseId& leaseId, const QString& taskDir);
    // Counts a worker start and returns the new count.
    Result<int> countWorkerStart(const LeaseId& leaseId);

    Result<std::optional<Subtask>> find(const LeaseId& leaseId);
    // Subtasks not in a final state, oldest first: what the runner resumes after a restart.
    Result<QList<Subtask>> unfinished();
    // Removes final subtasks last updated before `beforeMs` (history kept for a while for `status`).
    Result<int> prune(qint64 beforeMs);

    // Adds to the totals (in the caller's transaction, when it holds one).
    Status addTotals(const SubtaskTotals& add);
    Result<SubtaskTotals> totals();

    void setNow(std::function<qint64()> now) { m_now = std::move(now); }

private:
    SubtaskStore() = default;
    Result<QList<Subtask>> select(const QString& where, const QVariantList& values);

    std::function<qint64()> m_now;
};

} // namespace gleaner::agent
