// Several coordinators on one database: each runs its own Scheduler on its own connection, and every change
// to a job's workunits and leases is made under the job's lock (SchedulerStore::lockJob), which also brings
// each process's picture up to date with what the others wrote.
//
// Three "coordinators" (a thread each, as separate processes would be: their own connection, their own
// picture in memory) lease, complete and give back the workunits of one job at once. Leases are completed and
// given back by whichever coordinator takes them from a shared queue, not by the one that issued them: an
// agent's next request may reach any coordinator behind a load balancer. An oracle, updated while the job's
// lock is held, records every grant and close; no workunit may be granted while another lease of it is open
// or after it was completed. At the end every coordinator's picture must equal the database's.
//
// Run on SQLite (two connections to one WAL file) and, as test_sharedscheduler_postgres, on a PostgreSQL
// server the test starts on loopback.

#include "PostgresServer.h"
#include "TestSupport.h"
#include "scheduling/Scheduler.h"
#include "store/Database.h"
#include "scheduling/SchedulerTables.h"

#include <QSqlQuery>
#include <QTest>
#include <QThread>

#include <atomic>
#include <deque>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

constexpr qint64 kJobId = 1;
constexpr int kShards = 24;
constexpr int kCoordinators = 3;
constexpr int kRequestsEach = 160;

JobState sharedJob()
{
    JobState j;
    j.id = kJobId;
    j.status = JobStatus::Running;
    j.spec.shards = kShards;
    j.spec.batchSize = 32;
    j.spec.localEpochs = 1;
    j.spec.deadlineSeconds = 60;
    j.spec.maxEpochs = 2;
    j.spec.overlapEpochs = true; // epoch 2 opens once epoch 1 has nothing pending: a race for who creates it
    for (int i = 0; i < kShards; ++i)
        j.files.shards.append(ShardRef{i, QStringLiteral("shard-%1").arg(i), 1000, 320});
    j.published = PublishedWeights{0, QStringLiteral("weights-0"), 1000, 0};
    return j;
}

// What every coordinator did, in the order the job's lock let them.
class Oracle
{
public:
    void granted(qint64 unit, const QString& lease)
    {
        std::lock_guard lock(m_mutex);
        if (m_done.count(unit))
            m_violations
                << QStringLiteral("workunit %1 leased as %2 after it was completed").arg(unit).arg(lease);
        if (auto open = m_open.find(unit); open != m_open.end())
            m_violations << QStringLiteral("workunit %1 leased as %2 while %3 was open")
                                .arg(unit)
                                .arg(lease, open->second);
        m_open[unit] = lease;
        ++m_grants;
    }
    void closed(qint64 unit, const QString& lease, bool completed)
    {
        std::lock_guard lock(m_mutex);
        if (auto open = m_open.find(unit); open != m_open.end() && open->second == lease)
            m_open.erase(open);
        if (completed && !m_done.insert(unit).second)
            m_violations << QStringLiteral("workunit %1 completed twice (lease %2)").arg(unit).arg(lease);
    }
    QStringList violations() const
    {
        std::lock_guard lock(m_mutex);
        return m_violations;
    }
    int grants() const
    {
        std::lock_guard lock(m_mutex);
        return m_grants;
    }

private:
    mutable std::mutex m_mutex;
    std::map<qint64, QString> m_open;
    std::set<qint64> m_done;
    QStringList m_violations;
    int m_grants = 0;
};

// Leases handed out, for any coordinator to complete or give back.
struct HandedOut
{
    struct Entry
    {
        QString lease;
        qint64 unit = 0;
    };
    std::mutex mutex;
    std::deque<Entry> queue;

    void push(Entry entry)
    {
        std::lock_guard lock(mutex);
        queue.push_back(std::move(entry));
    }
    std::optional<Entry> pop()
    {
        std::lock_guard lock(mutex);
        if (queue.empty())
            return std::nullopt;
        Entry entry = queue.front();
        queue.pop_front();
        return entry;
    }
};

// A workunit as a picture shows it: its state and its open leases.
using Picture = std::map<qint64, QString>;

QString describe(Workunit::State state, QStringList open)
{
    open.sort();
    const char* name = state == Workunit::State::Done     ? "done"
                       : state == Workunit::State::Leased ? "leased"
                                                          : "pending";
    return QStringLiteral("%1 [%2]").arg(QLatin1String(name), open.join(u','));
}

Picture pictureOf(const JobState& job)
{
    Picture picture;
    for (const auto& [id, unit] : job.workunits)
        picture[id] = describe(unit.state, unit.openLeases);
    return picture;
}

QString firstDifference(const Picture& a, const Picture& b)
{
    for (const auto& [id, shown] : a) {
        auto other = b.find(id);
        if (other == b.end())
            return QStringLiteral("workunit %1 is missing from one picture").arg(id);
        if (other->second != shown)
            return QStringLiteral("workunit %1: %2 against %3").arg(id).arg(shown, other->second);
    }
    return a.size() == b.size() ? QString()
                                : QStringLiteral("%1 against %2 workunits").arg(a.size()).arg(b.size());
}

} // namespace

class TestSharedScheduler : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void coordinatorsNeverLeaseAWorkunitTwice();
    void aStaleCoordinatorLearnsOnlyWhatChanged();
    void grantsOfOneJobRunInParallel();

private:
    // A database with the job's row in it; empty (and the test failed) when it cannot be made.
    QString freshDatabase();
    // The database's picture of the job: each workunit's state and open leases.
    static Picture storedPicture(Database& db);

    std::unique_ptr<QTemporaryDir> m_dir;
    test::PostgresServer m_server;
    int m_databases = 0;
};

void TestSharedScheduler::initTestCase()
{
    m_dir = test::scratchDir();
#ifdef GLEANER_TEST_POSTGRES
    if (const QString missing = test::PostgresServer::missing(); !missing.isEmpty())
        QSKIP(qPrintable(missing));
    const QString why = m_server.start();
    QVERIFY2(why.isEmpty(), qPrintable(why));
#endif
}

QString TestSharedScheduler::freshDatabase()
{
    const QString name = QStringLiteral("shared%1").arg(++m_databases);
#ifdef GLEANER_TEST_POSTGRES
    if (const QString why = m_server.createDatabase(name); !why.isEmpty()) {
        QTest::qFail(qPrintable(why), __FILE__, __LINE__);
        return {};
    }
    const QString location = m_server.url(name);
#else
    const QString location = m_dir->filePath(name + QStringLiteral(".db"));
#endif
    auto db = Database::open(location);
    if (!db) {
        QTest::qFail(qPrintable(db.error()), __FILE__, __LINE__);
        return {};
    }
    auto job = (*db)->exec(
        QStringLiteral("INSERT INTO jobs (id, name, spec, state, created_ms) VALUES (?, 'shared', "
                       "'{}', 'running', 0)"),
        {kJobId});
    if (!job) {
        QTest::qFail(qPrintable(job.error()), __FILE__, __LINE__);
        return {};
    }
    return location;
}

Picture TestSharedScheduler::storedPicture(Database& db)
{
    Picture picture;
    std::map<qint64, Workunit::State> states;
    std::map<qint64, QStringList> open;
    auto units = db.exec(QStringLiteral("SELECT id, state FROM workunits WHERE job_id = ?"), {kJobId});
    while (units && units->next()) {
        const QString state = units->value(1).toString();
        states[units->value(0).toLongLong()] = state == u"done"     ? Workunit::State::Done
                                               : state == u"leased" ? Workunit::State::Leased
                                                                    : Workunit::State::Pending;
    }
    auto leases = db.exec(QStringLiteral("SELECT workunit_id, id FROM leases WHERE state = 'open'"));
    while (leases && leases->next())
        open[leases->value(0).toLongLong()] << leases->value(1).toString();
    for (const auto& [id, state] : states)
        picture[id] = describe(state, open[id]);
    return picture;
}

void TestSharedScheduler::coordinatorsNeverLeaseAWorkunitTwice()
{
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    {
        // The job's first epoch, as the coordinator that imported it creates it.
        auto db = Database::open(location);
        QVERIFY2(db.ok(), qPrintable(db.error()));
        SchedulerTables tables(**db);
        std::map<qint64, JobState> jobs;
        jobs.emplace(kJobId, sharedJob());
        ManualClock clock(1'000'000);
        Scheduler scheduler(jobs, tables, clock, SchedulerLimits{}, [] { return QStringLiteral("unused"); });
        QVERIFY(scheduler.createEpoch(jobs.at(kJobId), 1).ok());
    }

    Oracle oracle;
    HandedOut handedOut;
    std::atomic<int> failures{0};
    std::vector<QString> errors(kCoordinators);
    std::vector<Picture> pictures(kCoordinators);
    std::latch started(kCoordinators);
    std::latch finished(kCoordinators);
    std::atomic<int> ids{0};
    std::vector<std::thread> coordinators;
    for (int c = 0; c < kCoordinators; ++c) {
        coordinators.emplace_back([&, c] {
            // Everything of one coordinator: its connection, its picture of the job, its scheduler.
            auto db = Database::open(location);
            if (!db) {
                errors[c] = db.error();
                started.count_down();
                finished.count_down();
                return;
            }
            SchedulerTables tables(**db);
            std::map<qint64, JobState> jobs;
            jobs.emplace(kJobId, sharedJob());
            JobState& job = jobs.at(kJobId);
            ManualClock clock(1'000'000);
            Scheduler scheduler(jobs, tables, clock, SchedulerLimits{},
                                [&] { return QStringLiteral("lease-%1").arg(++ids); });
            auto stored = tables.loadJob(kJobId);
            if (!stored) {
                errors[c] = stored.error();
                started.count_down();
                finished.count_down();
                return;
            }
            scheduler.adopt(job, *stored);
            started.arrive_and_wait();

            for (int r = 0; r < kRequestsEach; ++r) {
                const QString agent = QStringLiteral("agent-%1").arg((r * kCoordinators + c) % 40);
                Status done;
                switch (r % 4) {
                case 0:
                case 1: {
                    std::optional<Lease> granted;
                    done = (*db)->transaction([&]() -> Status {
                        auto lease = scheduler.leaseNext(job, agent, {});
                        if (!lease)
                            return fail(lease.error());
                        granted = *lease;
                        if (granted)
                            oracle.granted(granted->workunitId, granted->id); // while the job's lock is held
                        return {};
                    });
                    if (done && granted)
                        handedOut.push({granted->id, granted->workunitId});
                    break;
                }
                case 2: {
                    // The result of a lease, whichever coordinator issued it.
                    const auto taken = handedOut.pop();
                    if (!taken)
                        break;
                    done = (*db)->transaction([&]() -> Status {
                        if (auto s = scheduler.recordCompleted(job, taken->lease); !s)
                            return s;
                        oracle.closed(taken->unit, taken->lease, /*completed=*/true);
                        return {};
                    });
                    if (done)
                        scheduler.completed(job, taken->lease);
                    break;
                }
                case 3: {
                    // A lease given back (refused, failed): its workunit goes back to the queue.
                    const auto taken = handedOut.pop();
                    if (!taken)
                        break;
                    done = (*db)->transaction([&]() -> Status {
                        if (auto s = scheduler.lockJob(job); !s)
                            return s;
                        if (!scheduler.find(taken->lease))
                            return fail(QStringLiteral("lease %1 is not known after the job's lock")
                                            .arg(taken->lease));
                        scheduler.released(&job, taken->lease, Lease::State::Refused);
                        oracle.closed(taken->unit, taken->lease, /*completed=*/false);
                        return {};
                    });
                    break;
                }
                }
                if (!done) {
                    ++failures;
                    if (errors[c].isEmpty())
                        errors[c] = done.error();
                }
            }
            finished.arrive_and_wait();
            // Everyone is done: one more look under the lock, and this coordinator's picture must be the
            // database's.
            const Status looked = (*db)->transaction([&] { return scheduler.lockJob(job); });
            if (!looked && errors[c].isEmpty())
                errors[c] = looked.error();
            pictures[c] = pictureOf(job);
        });
    }
    for (std::thread& coordinator : coordinators)
        coordinator.join();

    const QStringList violations = oracle.violations();
    QVERIFY2(violations.isEmpty(), qPrintable(QStringLiteral("%1 violations: %2")
                                                  .arg(violations.size())
                                                  .arg(violations.mid(0, 3).join(u"; "))));
    for (int c = 0; c < kCoordinators; ++c)
        QVERIFY2(errors[c].isEmpty(), qPrintable(QStringLiteral("coordinator %1: %2").arg(c).arg(errors[c])));
    QCOMPARE(failures.load(), 0);
    // Enough happened to mean something: workunits were leased again after being given back, and epoch 2
    // opened (once: its workunits are unique per shard, or the insert would have failed).
    QVERIFY2(oracle.grants() > kShards + 20, qPrintable(QString::number(oracle.grants())));

    auto db = Database::open(location);
    QVERIFY2(db.ok(), qPrintable(db.error()));
    auto twice =
        (*db)->exec(QStringLiteral("SELECT workunit_id FROM leases WHERE state = 'open' GROUP BY workunit_id "
                                   "HAVING COUNT(*) > 1"));
    QVERIFY(twice.ok());
    QVERIFY2(!twice->next(), "a workunit has two open leases in the database");
    auto completedTwice =
        (*db)->exec(QStringLiteral("SELECT workunit_id FROM leases WHERE state = 'completed' "
                                   "GROUP BY workunit_id HAVING COUNT(*) > 1"));
    QVERIFY(completedTwice.ok());
    QVERIFY2(!completedTwice->next(), "a workunit was completed twice");
    auto epochs =
        (*db)->exec(QStringLiteral("SELECT COUNT(*), MAX(epoch) FROM workunits WHERE job_id = ?"), {kJobId});
    QVERIFY(epochs.ok() && epochs->next());
    QCOMPARE(epochs->value(0).toInt(), 2 * kShards);
    QCOMPARE(epochs->value(1).toInt(), 2);

    const Picture stored = storedPicture(**db);
    for (int c = 0; c < kCoordinators; ++c) {
        const QString difference = firstDifference(pictures[c], stored);
        QVERIFY2(
            difference.isEmpty(),
            qPrintable(
                QStringLiteral("coordinator %1's picture is not the database's: %2").arg(c).arg(difference)));
    }
}

void TestSharedScheduler::aStaleCoordinatorLearnsOnlyWhatChanged()
{
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    // Two coordinators in one thread, taking turns: A leases everything; B, whose picture is from before,
    // must not lease anything, and learns A's leases from the rows written since its last look.
    auto dbA = Database::open(location);
    auto dbB = Database::open(location);
    QVERIFY(dbA.ok() && dbB.ok());
    SchedulerTables tablesA(**dbA), tablesB(**dbB);
    std::map<qint64, JobState> jobsA, jobsB;
    jobsA.emplace(kJobId, sharedJob());
    jobsB.emplace(kJobId, sharedJob());
    jobsA.at(kJobId).spec.maxEpochs = 1;
    jobsB.at(kJobId).spec.maxEpochs = 1;
    ManualClock clock(1'000'000);
    int ids = 0;
    const auto nextId = [&] { return QStringLiteral("lease-%1").arg(++ids); };
    Scheduler a(jobsA, tablesA, clock, SchedulerLimits{}, nextId);
    Scheduler b(jobsB, tablesB, clock, SchedulerLimits{}, nextId);
    QStringList learnt;
    b.setLearntObserver([&](const Lease& lease, const JobState&) { learnt << lease.id; });
    QVERIFY(a.createEpoch(jobsA.at(kJobId), 1).ok());
    auto stored = tablesB.loadJob(kJobId);
    QVERIFY2(stored.ok(), qPrintable(stored.error()));
    b.adopt(jobsB.at(kJobId), *stored);
    QCOMPARE(jobsB.at(kJobId).workunits.size(), size_t(kShards));

    for (int i = 0; i < kShards; ++i) {
        auto granted = a.leaseNext(jobsA.at(kJobId), QStringLiteral("agent-a"), {});
        QVERIFY(granted.ok() && granted->has_value());
    }
    QVERIFY(learnt.isEmpty());
    auto none = b.leaseNext(jobsB.at(kJobId), QStringLiteral("agent-b"), {});
    QVERIFY2(none.ok(), qPrintable(none.error()));
    QVERIFY2(!none->has_value(), "a coordinator with an old picture leased a workunit another one holds");
    if (tablesB.grantsInParallel()) {
        // A grant in parallel claims in the database and learns nothing else; having found nothing, B's next
        // grant takes the job's lock, and learns.
        QVERIFY(learnt.isEmpty());
        QVERIFY(b.takeEmptyClaims());
        auto still = b.leaseNext(jobsB.at(kJobId), QStringLiteral("agent-b"), {});
        QVERIFY2(still.ok(), qPrintable(still.error()));
        QVERIFY(!still->has_value());
    }
    QCOMPARE(learnt.size(), kShards);
    QCOMPARE(b.openLeasesOf(QStringLiteral("agent-a")), kShards);

    // One completion on A: B learns that lease alone, and the workunit is done in its picture too.
    const QString first = a.leases().firstKey();
    const qint64 unit = a.leases().first().workunitId;
    QVERIFY((*dbA)->transaction([&] { return a.recordCompleted(jobsA.at(kJobId), first); }).ok());
    a.completed(jobsA.at(kJobId), first);
    learnt.clear();
    QVERIFY((*dbB)->transaction([&] { return b.lockJob(jobsB.at(kJobId)); }).ok());
    QCOMPARE(learnt, QStringList{first});
    QVERIFY(jobsB.at(kJobId).workunits.at(unit).state == Workunit::State::Done);
    QVERIFY(!b.find(first));
    // Nothing changed since: B's next look reads nothing.
    learnt.clear();
    QVERIFY((*dbB)->transaction([&] { return b.lockJob(jobsB.at(kJobId)); }).ok());
    QVERIFY(learnt.isEmpty());

    // A lease handed back on A with a checkpoint: B learns the resume point and the agent that handed it back
    // (whom a refused result trained on from it counts against), and B's discard names that agent.
    const QString handed = a.leases().firstKey();
    const qint64 handedUnit = a.leases().first().workunitId;
    const Workunit::ResumePoint point{handed, QStringLiteral("checkpoint-a"), 3000, 2, 0,
                                      QStringLiteral("weights-0"), 0, QStringLiteral("agent-a")};
    QVERIFY(a.handedBack(&jobsA.at(kJobId), handed, point).resumeKept);
    QVERIFY((*dbB)->transaction([&] { return b.lockJob(jobsB.at(kJobId)); }).ok());
    const auto& learntPoint = jobsB.at(kJobId).workunits.at(handedUnit).resume;
    QVERIFY(learntPoint);
    QCOMPARE(learntPoint->fromAgent, QStringLiteral("agent-a"));
    QCOMPARE(b.discardResume(&jobsB.at(kJobId), handedUnit, QStringLiteral("checkpoint-a")),
             std::optional<QString>(QStringLiteral("agent-a")));
}

void TestSharedScheduler::grantsOfOneJobRunInParallel()
{
    const QString location = freshDatabase();
    QVERIFY(!location.isEmpty());
    auto dbA = Database::open(location);
    auto dbB = Database::open(location);
    auto watcher = Database::open(location);
    QVERIFY(dbA.ok() && dbB.ok() && watcher.ok());
    SchedulerTables tablesA(**dbA), tablesB(**dbB);
    if (!tablesA.grantsInParallel())
        QSKIP("on SQLite, one writer at a time: every grant takes the job's lock");
    std::map<qint64, JobState> jobsA, jobsB;
    jobsA.emplace(kJobId, sharedJob());
    jobsB.emplace(kJobId, sharedJob());
    ManualClock clock(1'000'000);
    std::atomic<int> ids{0};
    const auto nextId = [&] { return QStringLiteral("lease-%1").arg(++ids); };
    Scheduler a(jobsA, tablesA, clock, SchedulerLimits{}, nextId);
    Scheduler b(jobsB, tablesB, clock, SchedulerLimits{}, nextId);
    QStringList learnt;
    b.setLearntObserver([&](const Lease& lease, const JobState&) { learnt << lease.id; });
    QVERIFY(a.createEpoch(jobsA.at(kJobId), 1).ok());
    auto stored = tablesB.loadJob(kJobId);
    QVERIFY2(stored.ok(), qPrintable(stored.error()));
    b.adopt(jobsB.at(kJobId), *stored);

    // Another connection's lock waits: PostgreSQL shows the waiting advisory lock (polled, up to a minute).
    const auto waiting = [&] {
        for (int i = 0; i < 600; ++i) {
            auto rows = (*watcher)->exec(
                QStringLiteral("SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"));
            if (rows && rows->next() && rows->value(0).toInt() > 0)
                return true;
            QThread::msleep(100);
        }
        return false;
    };

    // Held open until told, or for a minute (a lock that wrongly waits for it then shows as a failure, not a
    // hang).
    const auto holdUntil = [](const std::atomic<bool>& told) {
        for (int i = 0; i < 600 && !told; ++i)
            QThread::msleep(100);
    };

    // A grants and keeps its transaction open until told; B grants meanwhile.
    std::latch aGranted(1);
    std::atomic<bool> release{false};
    std::optional<Lease> leaseA;
    QString errorA;
    std::atomic<bool> aEnded{false};
    std::thread holder([&] {
        const Status held = (*dbA)->transaction([&]() -> Status {
            if (auto agentLeases = a.lockAgent(QStringLiteral("agent-a")); !agentLeases)
                return fail(agentLeases.error());
            auto granted = a.leaseNext(jobsA.at(kJobId), QStringLiteral("agent-a"), {});
            if (!granted)
                return fail(granted.error());
            leaseA = *granted;
            aGranted.count_down();
            holdUntil(release);
            return {};
        });
        if (!held)
            errorA = held.error();
        aEnded = true;
        if (!leaseA)
            aGranted.count_down(); // it failed before granting
    });
    aGranted.wait();
    QVERIFY2(leaseA.has_value(), qPrintable(errorA));

    // B's grant of the same job does not wait for A's transaction: it claims another workunit.
    std::optional<Lease> leaseB;
    const Status grantedB = (*dbB)->transaction([&]() -> Status {
        auto granted = b.leaseNext(jobsB.at(kJobId), QStringLiteral("agent-b"), {});
        if (!granted)
            return fail(granted.error());
        leaseB = *granted;
        return {};
    });
    const bool aStillOpen = !aEnded;
    QVERIFY2(grantedB.ok(), qPrintable(grantedB.error()));
    QVERIFY(aStillOpen);
    QVERIFY(leaseB.has_value());
    QVERIFY2(leaseB->workunitId != leaseA->workunitId, "two open grants claimed one workunit");

    // The same agent's request at B waits for A's (the per-agent cap counts across coordinators), and then
    // counts A's lease; B's exclusive lock of the job waits for A's grant too, and then learns it.
    std::atomic<int> agentLeasesAtB{-1};
    std::thread sameAgent([&] {
        (void)(*dbB)->transaction([&]() -> Status {
            auto open = b.lockAgent(QStringLiteral("agent-a"));
            if (open)
                agentLeasesAtB = *open;
            if (auto s = b.lockJob(jobsB.at(kJobId)); !s)
                return s;
            return {};
        });
    });
    const bool agentWaited = waiting();
    const int countedEarly = agentLeasesAtB.load();
    release = true;
    holder.join();
    sameAgent.join();
    QVERIFY2(errorA.isEmpty(), qPrintable(errorA));
    QVERIFY2(agentWaited, "the same agent's lease request at another coordinator did not wait");
    QCOMPARE(countedEarly, -1);
    QCOMPARE(agentLeasesAtB.load(), 1);
    QVERIFY2(learnt.contains(leaseA->id), qPrintable(learnt.join(u", ")));
    QVERIFY2(!learnt.contains(leaseB->id), "B's own grant, read back, was reported as another's");
    QVERIFY(b.find(leaseA->id));
    QVERIFY(jobsB.at(kJobId).workunits.at(leaseA->workunitId).state == Workunit::State::Leased);

    // An exclusive lock held elsewhere holds grants back until it ends (no grant slips past a result or a new
    // epoch), and the grant then sees what it wrote.
    std::latch locked(1);
    std::atomic<bool> unlock{false};
    std::thread exclusive([&] {
        (void)(*dbA)->transaction([&]() -> Status {
            const Status s = a.lockJob(jobsA.at(kJobId));
            locked.count_down();
            holdUntil(unlock);
            return s;
        });
    });
    locked.wait();
    std::atomic<bool> grantDone{false};
    std::thread grant([&] {
        (void)(*dbB)->transaction([&]() -> Status {
            auto granted = b.leaseNext(jobsB.at(kJobId), QStringLiteral("agent-b"), {});
            grantDone = true;
            return granted ? Status() : fail(granted.error());
        });
    });
    const bool grantWaited = waiting() && !grantDone;
    unlock = true;
    exclusive.join();
    grant.join();
    QVERIFY2(grantWaited, "a grant went on while another coordinator held the job's lock");
    QVERIFY(grantDone);

    // The cap counts the leases that still count: not those of a finished job (left `open` by coordinators
    // that stopped before expiring them), nor those past their deadline.
    const auto openOfA = [&] {
        int open = -1;
        (void)(*dbB)->transaction([&]() -> Status {
            auto counted = b.lockAgent(QStringLiteral("agent-a"));
            open = counted ? *counted : -1;
            return {};
        });
        return open;
    };
    QCOMPARE(openOfA(), 1);
    QVERIFY(
        (*watcher)->exec(QStringLiteral("UPDATE jobs SET state = 'completed' WHERE id = ?"), {kJobId}).ok());
    QCOMPARE(openOfA(), 0);
    QVERIFY(
        (*watcher)->exec(QStringLiteral("UPDATE jobs SET state = 'running' WHERE id = ?"), {kJobId}).ok());
    QCOMPARE(openOfA(), 1);
    clock.advance(qint64(sharedJob().spec.deadlineSeconds) * 1000 + 1);
    QCOMPARE(openOfA(), 0);
}

QTEST_GUILESS_MAIN(TestSharedScheduler)
#include "TestSharedScheduler.moc"
