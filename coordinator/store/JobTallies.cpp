#include "store/JobTallies.h"

#include "store/Database.h"

#include <QSqlQuery>
#include <QStringList>

namespace gleaner::coordinator {
namespace {

const QString kUpdatesReceived = QStringLiteral("updates_received");
const QString kUploadedBytes = QStringLiteral("uploaded_bytes");
const QString kUploadsCounted = QStringLiteral("uploads_counted");
const QString kUpdatesNotFolded = QStringLiteral("updates_not_folded");
// Followed by the file's role: "downloaded_bytes:weights".
const QString kDownloadedPrefix = QStringLiteral("downloaded_bytes:");

void apply(JobCounts& counts, const QString& name, qint64 value)
{
    if (name == kUpdatesReceived)
        counts.updatesReceived = value;
    else if (name == kUploadedBytes)
        counts.uploadedBytes = value;
    else if (name == kUploadsCounted)
        counts.uploadsCounted = value;
    else if (name == kUpdatesNotFolded)
        counts.updatesNotFolded = value;
    else if (name.startsWith(kDownloadedPrefix))
        counts.downloadedByRole[name.mid(kDownloadedPrefix.size()).toUtf8()] = value;
    // A name a later version counts is not this version's to show.
}

} // namespace

qint64 JobCounts::downloadedBytes() const
{
    qint64 total = 0;
    for (const auto& [role, bytes] : downloadedByRole)
        total += bytes;
    return total;
}

void JobCounts::countUpdate(qint64 uploadBytes)
{
    updatesReceived += 1;
    if (uploadBytes > 0) {
        uploadedBytes += uploadBytes;
        uploadsCounted += 1;
    }
}

JobTallies::JobTallies(Database& db) : m_db(db) {}

Status JobTallies::add(qint64 jobId, const std::vector<std::pair<QString, qint64>>& deltas)
{
    // One statement for every count it moves: one round trip inside the caller's transaction.
    QStringList rows;
    QVariantList values;
    for (const auto& [name, delta] : deltas) {
        rows << QStringLiteral("(?, ?, ?)");
        values << jobId << name << delta;
    }
    auto r =
        m_db.exec(QStringLiteral("INSERT INTO job_tallies (job_id, name, value) VALUES %1 ON CONFLICT "
                                 "(job_id, name) DO UPDATE SET value = job_tallies.value + excluded.value")
                      .arg(rows.join(QStringLiteral(", "))),
                  values);
    return r ? Status() : fail(r.error());
}

Status JobTallies::countUpdate(qint64 jobId, qint64 uploadBytes)
{
    if (uploadBytes <= 0)
        return add(jobId, {{kUpdatesReceived, 1}});
    return add(jobId, {{kUpdatesReceived, 1}, {kUploadedBytes, uploadBytes}, {kUploadsCounted, 1}});
}

Status JobTallies::countNotFolded(qint64 jobId)
{
    return add(jobId, {{kUpdatesNotFolded, 1}});
}

void JobTallies::countDownloaded(qint64 jobId, QByteArrayView role, qint64 bytes)
{
    if (bytes > 0)
        m_unflushed[jobId][role.toByteArray()] += bytes;
}

Status JobTallies::flush()
{
    if (m_unflushed.empty())
        return {};
    const Status added = m_db.transaction([&]() -> Status {
        for (const auto& [jobId, byRole] : m_unflushed)
            for (const auto& [role, bytes] : byRole)
                if (auto s = add(jobId, {{kDownloadedPrefix + QString::fromUtf8(role), bytes}}); !s)
                    return s;
        return {};
    });
    if (added)
        m_unflushed.clear();
    return added;
}

Status JobTallies::flushIfDue(qint64 nowMs)
{
    if (nowMs - m_flushedMs < kFlushEveryMs)
        return {};
    m_flushedMs = nowMs;
    return flush();
}

void JobTallies::addUnflushed(qint64 jobId, JobCounts& counts) const
{
    const auto it = m_unflushed.find(jobId);
    if (it == m_unflushed.end())
        return;
    for (const auto& [role, bytes] : it->second)
        counts.downloadedByRole[role] += bytes;
}

Result<JobCounts> JobTallies::load(qint64 jobId)
{
    auto rows = m_db.exec(QStringLiteral("SELECT name, value FROM job_tallies WHERE job_id = ?"), {jobId});
    if (!rows)
        return fail(rows.error());
    JobCounts counts;
    while (rows->next())
        apply(counts, rows->value(0).toString(), rows->value(1).toLongLong());
    addUnflushed(jobId, counts);
    return counts;
}

Result<std::map<qint64, JobCounts>> JobTallies::loadAll()
{
    auto rows = m_db.exec(QStringLiteral("SELECT job_id, name, value FROM job_tallies"));
    if (!rows)
        return fail(rows.error());
    std::map<qint64, JobCounts> all;
    while (rows->next())
        apply(all[rows->value(0).toLongLong()], rows->value(1).toString(), rows->value(2).toLongLong());
    for (const auto& [jobId, byRole] : m_unflushed)
        addUnflushed(jobId, all[jobId]);
    return all;
}

} // namespace gleaner::coordinator
