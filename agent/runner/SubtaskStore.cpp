#include "runner/SubtaskStore.h"

#include <QDateTime>

#include <array>

namespace gleaner::agent {
namespace {

const char* const kSchema[] = {
    "CREATE TABLE subtasks (lease_id TEXT PRIMARY KEY, manifest BLOB NOT NULL, signature TEXT NOT NULL,"
    " deadline_ms INTEGER NOT NULL, state TEXT NOT NULL, task_dir TEXT NOT NULL DEFAULT '',"
    " worker_starts INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL)",
    "CREATE INDEX subtasks_by_state ON subtasks (state)",
    // The machine's contribution over its whole life: kept apart from the rows, which prune() removes.
    "CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 1), subtasks_done INTEGER NOT NULL,"
    " subtasks_failed INTEGER NOT NULL, samples INTEGER NOT NULL, train_seconds REAL NOT NULL,"
    " uploaded_bytes INTEGER NOT NULL DEFAULT 0, downloaded_bytes INTEGER NOT NULL DEFAULT 0)",
    "INSERT INTO totals VALUES (1, 0, 0, 0, 0, 0, 0)",
};

// Version 3: the bytes the agent moved, which compressed uploads make worth showing.
const char* const kUpgradeTo3[] = {
    "ALTER TABLE totals ADD COLUMN uploaded_bytes INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE totals ADD COLUMN downloaded_bytes INTEGER NOT NULL DEFAULT 0",
};

const SqlUpgrade kUpgrades[] = {
    {2, kUpgradeTo3},
};

constexpr std::array<std::pair<SubtaskState, const char16_t*>, 8> kNames{{
    {SubtaskState::Leased, u"leased"},
    {SubtaskState::Downloading, u"downloading"},
    {SubtaskState::Verified, u"verified"},
    {SubtaskState::Training, u"training"},
    {SubtaskState::Uploading, u"uploading"},
    {SubtaskState::Done, u"done"},
    {SubtaskState::Failed, u"failed"},
    {SubtaskState::Dropped, u"dropped"},
}};

int order(SubtaskState state)
{
    return int(state);
}

} // namespace

QString subtaskStateName(SubtaskState state)
{
    for (const auto& [value, name] : kNames)
        if (value == state)
            return QString::fromUtf16(name);
    return QStringLiteral("unknown");
}

std::optional<SubtaskState> subtaskStateFromName(QStringView name)
{
    for (const auto& [value, text] : kNames)
        if (name == QStringView(text))
            return value;
    return std::nullopt;
}

bool isFinal(SubtaskState state)
{
    return state == SubtaskState::Done || state == SubtaskState::Failed || state == SubtaskState::Dropped;
}

Result<std::unique_ptr<SubtaskStore>> SubtaskStore::open(const QString& path)
{
    std::unique_ptr<SubtaskStore> store(new SubtaskStore);
    store->m_now = [] { return QDateTime::currentMSecsSinceEpoch(); };
    const SqlSchema schema{QStringLiteral("the agent's subtask store"), 3, kSchema,
                           QStringLiteral("use the agent version that wrote it, or remove it (its subtasks are given "
                                          "up; their leases expire on the coordinator)"),
                           kUpgrades};
    if (auto s = store->openFile(path, schema); !s)
        return fail(s.error());
    return store;
}

Status SubtaskStore::add(const Subtask& subtask)
{
    auto found = find(subtask.leaseId);
    if (!found)
        return fail(found.error());
    if (*found)
        return fail(QStringLiteral("lease %1 is already recorded (state %2); a coordinator never repeats a lease id")
                        .arg(subtask.leaseId.toString(), subtaskStateName((*found)->state)));
    const qint64 now = m_now();
    auto r = exec(QStringLiteral("INSERT INTO subtasks (lease_id, manifest, signature, deadline_ms, state, task_dir, "
                                 "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                  {subtask.leaseId.toString(), subtask.manifest, QString::fromLatin1(subtask.signature), subtask.deadlineMs,
                   subtaskStateName(subtask.state), subtask.taskDir, now, now});
    return r ? Status() : fail(r.error());
}

Status SubtaskStore::setState(const LeaseId& leaseId, SubtaskState state, const QString& error)
{
    auto found = find(leaseId);
    if (!found)
        return fail(found.error());
    if (!*found)
        return fail(QStringLiteral("lease %1 is not recorded").arg(leaseId.toString()));
    const SubtaskState from = (*found)->state;
    const bool restartWorker = from == SubtaskState::Training && state == SubtaskState::Verified;
    if (isFinal(from) || (!isFinal(state) && order(state) < order(from) && !restartWorker))
        return fail(QStringLiteral("lease %1 cannot go from %2 to %3")
                        .arg(leaseId.toString(), subtaskStateName(from), subtaskStateName(state)));
    auto r = exec(QStringLiteral("UPDATE subtasks SET state = ?, error = ?, updated_ms = ? WHERE lease_id = ?"),
                  {subtaskStateName(state), error, m_now(), leaseId.toString()});
    return r ? Status() : fail(r.error());
}

Status SubtaskStore::setDeadline(const LeaseId& leaseId, qint64 deadlineMs)
{
    auto r = exec(QStringLiteral("UPDATE subtasks SET deadline_ms = ?, updated_ms = ? WHERE lease_id = ?"),
                  {deadlineMs, m_now(), leaseId.toString()});
    if (!r)
        return fail(r.error());
    return r->numRowsAffected() == 1 ? Status() : fail(QStringLiteral("lease %1 is not recorded").arg(leaseId.toString()));
}

Status SubtaskStore::setTaskDir(const LeaseId& leaseId, const QString& taskDir)
{
    auto r = exec(QStringLiteral("UPDATE subtasks SET task_dir = ?, updated_ms = ? WHERE lease_id = ?"),
                  {taskDir, m_now(), leaseId.toString()});
    if (!r)
        return fail(r.error());
    return r->numRowsAffected() == 1 ? Status() : fail(QStringLiteral("lease %1 is not recorded").arg(leaseId.toString()));
}

Result<int> SubtaskStore::countWorkerStart(const LeaseId& leaseId)
{
    auto r = exec(QStringLiteral("UPDATE subtasks SET worker_starts = worker_starts + 1, updated_ms = ? WHERE lease_id = ?"),
                  {m_now(), leaseId.toString()});
    if (!r)
        return fail(r.error());
    if (r->numRowsAffected() != 1)
        return fail(QStringLiteral("lease %1 is not recorded").arg(leaseId.toString()));
    auto found = find(leaseId);
    if (!found || !*found)
        return fail(QStringLiteral("lease %1 is not recorded").arg(leaseId.toString()));
    return (*found)->workerStarts;
}

Result<QList<Subtask>> SubtaskStore::select(const QString& where, const QVariantList& values)
{
    auto r = exec(QStringLiteral("SELECT lease_id, manifest, signature, deadline_ms, state, task_dir, worker_starts, "
                                 "error, updated_ms FROM subtasks ")
                      + where,
                  values);
    if (!r)
        return fail(r.error());
    QList<Subtask> out;
    while (r->next()) {
        // The rows name task folders: an id that is not one (a store written by something else, or altered)
        // stops the read rather than reaching a path.
        const QString idText = r->value(0).toString();
        auto id = LeaseId::parse(idText, QStringLiteral("%1: the stored lease_id").arg(name()));
        if (!id)
            return fail(id.error() + QStringLiteral("; remove the store (its subtasks are given up; their leases "
                                                    "expire on the coordinator)"));
        Subtask s{*id};
        s.manifest = r->value(1).toByteArray();
        s.signature = r->value(2).toString().toLatin1();
        s.deadlineMs = r->value(3).toLongLong();
        const auto state = subtaskStateFromName(r->value(4).toString());
        if (!state)
            return fail(QStringLiteral("%1: lease %2 has an unknown state \"%3\"").arg(name(), idText, r->value(4).toString()));
        s.state = *state;
        s.taskDir = r->value(5).toString();
        s.workerStarts = r->value(6).toInt();
        s.error = r->value(7).toString();
        s.updatedMs = r->value(8).toLongLong();
        out.append(s);
    }
    return out;
}

Result<std::optional<Subtask>> SubtaskStore::find(const LeaseId& leaseId)
{
    auto rows = select(QStringLiteral("WHERE lease_id = ?"), {leaseId.toString()});
    if (!rows)
        return fail(rows.error());
    if (rows->isEmpty())
        return std::optional<Subtask>();
    return std::optional<Subtask>(rows->first());
}

Result<QList<Subtask>> SubtaskStore::unfinished()
{
    return select(QStringLiteral("WHERE state NOT IN ('done', 'failed', 'dropped') ORDER BY created_ms, lease_id"), {});
}

Result<int> SubtaskStore::prune(qint64 beforeMs)
{
    auto r = exec(QStringLiteral("DELETE FROM subtasks WHERE state IN ('done', 'failed', 'dropped') AND updated_ms < ?"),
                  {beforeMs});
    if (!r)
        return fail(r.error());
    return r->numRowsAffected();
}

Status SubtaskStore::addTotals(const SubtaskTotals& add)
{
    auto r = exec(QStringLiteral("UPDATE totals SET subtasks_done = subtasks_done + ?, subtasks_failed = subtasks_failed + ?,"
                                 " samples = samples + ?, train_seconds = train_seconds + ?, uploaded_bytes = "
                                 "uploaded_bytes + ?, downloaded_bytes = downloaded_bytes + ? WHERE id = 1"),
                  {add.subtasksDone, add.subtasksFailed, add.samples, add.trainSeconds, add.uploadedBytes,
                   add.downloadedBytes});
    return r ? Status() : fail(r.error());
}

Result<SubtaskTotals> SubtaskStore::totals()
{
    auto r = exec(QStringLiteral("SELECT subtasks_done, subtasks_failed, samples, train_seconds, uploaded_bytes, "
                                 "downloaded_bytes FROM totals WHERE id = 1"));
    if (!r)
        return fail(r.error());
    SubtaskTotals t;
    if (r->next()) {
        t.subtasksDone = r->value(0).toLongLong();
        t.subtasksFailed = r->value(1).toLongLong();
        t.samples = r->value(2).toLongLong();
        t.trainSeconds = r->value(3).toDouble();
        t.uploadedBytes = r->value(4).toLongLong();
        t.downloadedBytes = r->value(5).toLongLong();
    }
    return t;
}

} // namespace gleaner::agent
