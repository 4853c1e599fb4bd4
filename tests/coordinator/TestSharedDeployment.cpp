// Several coordinators serving one deployment (config shared_dir, docs/scale-out.md): two Coordinator objects
// in this process, each with a data directory, a connection and a clock of its own, on one PostgreSQL
// database, one Redis and one shared folder, as two processes behind a load balancer would be.
//
// - A coordinator alone and coordinators sharing a deployment never use one database together.
// - `init --join` copies the deployment's identity; a coordinator with another identity, or pointed at a
// folder
//   that is not the deployment's shared one, is refused at start.
// - Either coordinator serves what the other issued; one of them (the housekeeper) snapshots, and its
// snapshot
//   holds what both folded; jobs submitted, paused and cancelled at one are followed by the other; another
//   takes over the housekeeping when the first one stops.
// - An update that a coordinator recorded (202) but never folded (it was killed) is folded by the
// housekeeper.
// - A job's counts (updates received, folded and not, bytes up and down, workunits, agents) are the
//   deployment's: `job status` at either coordinator agrees on every one, and still counts what a coordinator
//   that stopped took.

#include "CoordinatorFixture.h"
#include "TestSupport.h"
#include "api/ApiHandler.h"
#include "enrollment/Tokens.h"
#include "crypto/Ed25519.h"
#include "crypto/SecureFile.h"
#include "format/SafeTensors.h"
#include "store/Database.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QSqlQuery>
#include <QTest>
#include <QThread>

#include <thread>

using namespace gleaner;
using namespace gleaner::coordinator;
using test::shifted;

namespace {

QByteArray readAll(const QString& path)
{
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

} // namespace

class TestSharedDeployment : public QObject
{
    Q_OBJECT

private Q_SLOTS:
    void init();
    void cleanup();
    void aloneAndSharedNeverUseOneDatabaseTogether();
    void joiningTakesTheDeploymentsIdentity();
    void anotherIdentityOrFolderIsRefused();
    void twoCoordinatorsServeOneDeployment();
    void updatesOfAStoppedCoordinatorAreFolded();
    void anImportWhoseCoordinatorStoppedIsTakenOver();
    void anImportOvertakenElsewhereIsDropped();
    void anImportOvertakenByAnotherImportIsDroppedAndTheJobTakenUp();
    void oneResultTakenAtBothKeepsTheCommittedFile();
    void aJobItCannotReadIsLeftToTheOthers();
    void aResultAfterItsJobEndedElsewhereIsNotTaken();
    void eachDashboardShowsTheOthersEvents();
    void bothAgreeOnTheJobsCounts();

private:
    // Makes the second coordinator's data directory with init --join from the first's (not opened).
    bool joinSecond();
    // The second coordinator joined and started, an agent enrolled, and a job running at both. False (and a
    // warning) when a step failed.
    bool jobAtBoth(QString* agent, qint64* job);
    // Moves both clocks by `ms` and runs the housekeeping tick on `which` (and waits for what it queued).
    void tick(test::CoordinatorFixture& which, qint64 ms);
    QJsonObject jobAt(test::CoordinatorFixture& which, qint64 jobId);
    std::unique_ptr<Database> database();
    // A copy of job `like`, submitted at a coordinator that is importing it: its row, `created`, and that
    // coordinator's import lock (the same session advisory lock, held by `db`'s connection). 0 when it
    // failed.
    qint64 jobImportedBy(Database& db, qint64 like);
    // A job submitted at f and imported there (`job`), and a copy of it whose import `db` holds
    // (`overtaken`), both taken up by f. False (and a warning) when a step failed.
    bool importHeldElsewhere(Database& db, qint64* job, qint64* overtaken);
    // Settles job `overtaken` (see jobImportedBy) in `db`'s transaction while f's import of it, claimed and
    // run meanwhile, waits for the job's row: f's import then finds the job settled.
    Status overtakeImport(Database& db, qint64 overtaken, const std::function<Status()>& settle);
    static QString importLock()
    {
        return QStringLiteral("(1196181837, CAST(mod(?, 2147483647) AS integer))");
    }

    test::CoordinatorFixture f; // the first coordinator: it made the deployment, and holds the housekeeping
    test::CoordinatorFixture g; // the second, joined
    std::unique_ptr<QTemporaryDir> m_shared;
    QString m_dataset;
};

void TestSharedDeployment::init()
{
    if (!test::CoordinatorFixture::onPostgres() || !test::CoordinatorFixture::onRedis())
        QSKIP("several coordinators share a deployment on PostgreSQL and Redis: run with "
              "GLEANER_TEST_POSTGRES=1 "
              "GLEANER_TEST_REDIS=1 (ctest does)");
    m_shared = test::scratchDir();
    f.config.sharedDir = m_shared->filePath(QStringLiteral("shared"));
    QVERIFY(f.setUp());
    m_dataset = f.scratch->filePath(QStringLiteral("dataset"));
    test::writeSyntheticDataset(m_dataset);
}

void TestSharedDeployment::cleanup()
{
    g.core.reset();
    f.core.reset();
}

bool TestSharedDeployment::joinSecond()
{
    g.scratch = test::scratchDir();
    g.dir = DataDirectory(g.scratch->filePath(QStringLiteral("data")));
    auto joined = joinDeployment(g.dir, f.dir, QStringLiteral("127.0.0.1:0"));
    if (!joined) {
        qWarning() << joined.error();
        return false;
    }
    g.init = *joined;
    auto config = g.dir.loadConfig();
    if (!config) {
        qWarning() << config.error();
        return false;
    }
    g.config = *config;
    return true;
}

bool TestSharedDeployment::jobAtBoth(QString* agent, qint64* job)
{
    if (!joinSecond() || !g.reopen())
        return false;
    *agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    *job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600));
    if (agent->isEmpty() || *job <= 0) {
        qWarning() << "no agent or no job";
        return false;
    }
    tick(g, 3000);
    if (jobAt(g, *job).value(QStringLiteral("state")).toString() != QLatin1String("running")) {
        qWarning() << "the second did not take the job up";
        return false;
    }
    return true;
}

void TestSharedDeployment::tick(test::CoordinatorFixture& which, qint64 ms)
{
    f.clock.advance(ms);
    g.clock.advance(ms);
    which.core->state().call([&] { which.core->tick(); });
    which.core->drain();
}

QJsonObject TestSharedDeployment::jobAt(test::CoordinatorFixture& which, qint64 jobId)
{
    return which.call([&] { return which.core->jobs().status(jobId); });
}

qint64 TestSharedDeployment::jobImportedBy(Database& db, qint64 like)
{
    auto copy = db.insertReturningId(
        QStringLiteral(
            "INSERT INTO jobs (name, spec, state, created_ms) SELECT name, spec, 'created', created_ms "
            "FROM jobs WHERE id = ?"),
        {like});
    if (!copy) {
        qWarning() << copy.error();
        return 0;
    }
    auto locked = db.exec(QStringLiteral("SELECT pg_advisory_lock%1").arg(importLock()), {*copy});
    if (!locked) {
        qWarning() << locked.error();
        return 0;
    }
    return *copy;
}

bool TestSharedDeployment::importHeldElsewhere(Database& db, qint64* job, qint64* overtaken)
{
    *job = f.submit(test::tinyJobSpec(m_dataset, 2));
    *overtaken = *job > 0 ? jobImportedBy(db, *job) : 0;
    if (*overtaken <= 0) {
        qWarning() << "no job, or no copy of it whose import this test holds";
        return false;
    }
    tick(f, 2100); // taken up, the copy's import left to the lock's holder
    return true;
}

Status TestSharedDeployment::overtakeImport(Database& db, qint64 overtaken,
                                            const std::function<Status()>& settle)
{
    return db.transaction([&]() -> Status {
        // The job's row held: the coordinator's import, once done, waits for this transaction to decide.
        if (auto held =
                db.exec(QStringLiteral("SELECT state FROM jobs WHERE id = ? FOR UPDATE"), {overtaken});
            !held)
            return fail(held.error());
        if (auto r = db.exec(QStringLiteral("SELECT pg_advisory_unlock%1").arg(importLock()), {overtaken});
            !r)
            return fail(r.error());
        f.clock.advance(2100);
        f.core->state().call([&] { f.core->tick(); }); // claims the import (no drain: it waits for this)
        bool waits = false;
        for (int i = 0; i < 600 && !waits; ++i) {
            auto rows =
                db.exec(QStringLiteral("SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = "
                                       "l.pid WHERE NOT l.granted AND a.datname = current_database()"));
            waits = rows && rows->next() && rows->value(0).toInt() > 0;
            if (!waits)
                QThread::msleep(100);
        }
        if (!waits)
            return fail(QStringLiteral("the coordinator's import never reached the job's row"));
        return settle();
    });
}

std::unique_ptr<Database> TestSharedDeployment::database()
{
    auto db = Database::open(f.config.database);
    if (!db) {
        qWarning() << db.error();
        return {};
    }
    return std::move(*db);
}

void TestSharedDeployment::aloneAndSharedNeverUseOneDatabaseTogether()
{
    QVERIFY(joinSecond());
    // The second one without shared_dir: it would run alone, on a database others share.
    CoordinatorConfig alone = g.config;
    alone.sharedDir.clear();
    QVERIFY(g.dir.saveConfig(alone).ok());
    auto refused = Coordinator::open(g.dir, alone, g.clock);
    QVERIFY(!refused);
    QVERIFY2(refused.error().contains(u"another coordinator is using this database"),
             qPrintable(refused.error()));

    // Alone on it once the others stopped; then the sharing ones are refused.
    // (PostgreSQL frees the first's claim once its server process has seen the connection close.)
    f.core.reset();
    std::unique_ptr<Coordinator> lone;
    QString error;
    for (int i = 0; i < 100 && !lone; ++i) {
        auto opened = Coordinator::open(g.dir, alone, g.clock);
        if (opened) {
            lone = std::move(*opened);
        } else {
            error = opened.error();
            QTest::qWait(100);
        }
    }
    QVERIFY2(lone, qPrintable(error));
    auto shared = Coordinator::open(f.dir, f.config, f.clock);
    QVERIFY(!shared);
    QVERIFY2(shared.error().contains(u"runs alone"), qPrintable(shared.error()));
}

void TestSharedDeployment::joiningTakesTheDeploymentsIdentity()
{
    QVERIFY(joinSecond());
    for (const auto& [mine, theirs] : {std::pair{g.dir.signingKeyPath(), f.dir.signingKeyPath()},
                                       std::pair{g.dir.certificatePath(), f.dir.certificatePath()},
                                       std::pair{g.dir.tlsKeyPath(), f.dir.tlsKeyPath()},
                                       std::pair{g.dir.adminTokenPath(), f.dir.adminTokenPath()}}) {
        QVERIFY(!readAll(mine).isEmpty());
        QCOMPARE(readAll(mine), readAll(theirs));
    }
    QCOMPARE(QFile::permissions(g.dir.signingKeyPath()) & (QFileDevice::ReadOther | QFileDevice::ReadGroup),
             QFileDevice::Permissions());
    QCOMPARE(g.init.adminToken, f.init.adminToken);
    QCOMPARE(g.config.sharedDir, f.config.sharedDir);
    QCOMPARE(g.config.database, f.config.database);
    QCOMPARE(g.config.redis, f.config.redis);
    QCOMPARE(g.config.listenPort, quint16(0));

    // Joining again into the same folder, a coordinator that runs alone, or the folder being made.
    auto again = joinDeployment(g.dir, f.dir, {});
    QVERIFY(!again && again.error().contains(u"not empty"));
    auto scratch = test::scratchDir();
    const DataDirectory lone(scratch->filePath(QStringLiteral("lone")));
    QVERIFY(initializeDataDirectory(lone, CoordinatorConfig{}).ok());
    const DataDirectory nowhere(scratch->filePath(QStringLiteral("nowhere")));
    auto fromLone = joinDeployment(nowhere, lone, {});
    QVERIFY2(!fromLone && fromLone.error().contains(u"runs alone"), qPrintable(fromLone.error()));
    QVERIFY(!QDir(nowhere.root()).exists()); // nothing half-made is left
    auto badListen = joinDeployment(nowhere, f.dir, QStringLiteral("no port"));
    QVERIFY(!badListen && badListen.error().contains(u"--listen"));
    QVERIFY(!QDir(nowhere.root()).exists());

    // A source whose admin token the database does not know is another deployment's.
    QVERIFY(SecureFile::write(f.dir.adminTokenPath(), QByteArray("gla_not-this-deployments\n"), 0600,
                              QStringLiteral("admin token"))
                .ok());
    auto foreign = joinDeployment(nowhere, f.dir, {});
    QVERIFY2(!foreign && foreign.error().contains(u"does not hold the deployment"),
             qPrintable(foreign.error()));
}

void TestSharedDeployment::anotherIdentityOrFolderIsRefused()
{
    // A signing key of its own: its manifests would be refused by the agents of the others.
    QVERIFY(joinSecond());
    auto key = SigningKey::generate();
    QVERIFY(key.ok());
    QVERIFY(key->saveToFile(g.dir.signingKeyPath()).ok());
    auto ownKey = Coordinator::open(g.dir, g.config, g.clock);
    QVERIFY(!ownKey);
    QVERIFY2(ownKey.error().contains(u"signing key") && ownKey.error().contains(u"--join"),
             qPrintable(ownKey.error()));

    // A folder of the same name that is not the shared one (not mounted, say).
    QVERIFY(joinSecond());
    CoordinatorConfig local = g.config;
    local.sharedDir = g.scratch->filePath(QStringLiteral("not-shared"));
    auto notShared = Coordinator::open(g.dir, local, g.clock);
    QVERIFY(!notShared);
    QVERIFY2(notShared.error().contains(u"not the folder the other coordinators share"),
             qPrintable(notShared.error()));

    // Another deployment's shared folder.
    QVERIFY(QDir().mkpath(local.sharedDir));
    QVERIFY(SecureFile::write(local.sharedDir + QStringLiteral("/deployment-id"), QByteArray("another\n"),
                              0644, QStringLiteral("mark"))
                .ok());
    auto foreign = Coordinator::open(g.dir, local, g.clock);
    QVERIFY(!foreign);
    QVERIFY2(foreign.error().contains(u"belongs to another deployment"), qPrintable(foreign.error()));

    // With the deployment's own, it starts.
    QVERIFY(g.reopen());
}

void TestSharedDeployment::twoCoordinatorsServeOneDeployment()
{
    // An agent the second coordinator knows from its start: revoked at the first, later.
    const QString early = f.enroll(QStringLiteral("early")).value(QStringLiteral("agent_id")).toString();
    QVERIFY(joinSecond());
    QVERIFY(g.reopen());
    QVERIFY(f.core->state().call([&] { return f.core->doesHousekeeping(); }));
    QVERIFY(!g.core->state().call([&] { return g.core->doesHousekeeping(); }));

    // A job submitted at the first is taken up by the second at its next look.
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600));
    QVERIFY(job > 0);
    int status = 0;
    g.call([&] { return g.core->jobs().status(job); }, &status);
    QCOMPARE(status, 404);
    tick(g, 3000);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));

    // Each issues a lease to one agent, and takes the result of the other's.
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const auto atSecond = g.lease(agent);
    const auto atFirst = f.lease(agent);
    QCOMPARE(atSecond.size(), size_t(1));
    QCOMPARE(atFirst.size(), size_t(1));
    const auto shardOf = [](const test::LeasedTask& task) {
        return task.manifest.value(QStringLiteral("subtask"))
            .toObject()
            .value(QStringLiteral("shard"))
            .toInt(-1);
    };
    QVERIFY(shardOf(atSecond[0]) >= 0 && shardOf(atFirst[0]) >= 0);
    QVERIFY(shardOf(atSecond[0]) != shardOf(atFirst[0])); // no workunit leased twice
    f.core->deployment().catchUpOnLeases();               // what the API does for a lease it does not know
    g.core->deployment().catchUpOnLeases();
    const TensorBundle secondsBase = f.leaseBase(atSecond[0].leaseId);
    const TensorBundle firstsBase = g.leaseBase(atFirst[0].leaseId);
    // Published weights are each coordinator's own files: two publications of one version are two blobs.
    QVERIFY(!secondsBase.isEmpty() && !firstsBase.isEmpty());
    QCOMPARE(secondsBase.metadata().value(QStringLiteral("gleaner.version")), QStringLiteral("0"));
    QCOMPARE(firstsBase.metadata().value(QStringLiteral("gleaner.version")), QStringLiteral("0"));
    QVERIFY(secondsBase.metadata().value(QStringLiteral("gleaner.publisher")) !=
            firstsBase.metadata().value(QStringLiteral("gleaner.publisher")));
    QString error;
    QCOMPARE(f.upload(agent, atSecond[0].leaseId, shifted(secondsBase, 0.01f), 0, &error), 202);
    QCOMPARE(g.upload(agent, atFirst[0].leaseId, shifted(firstsBase, -0.01f), 0, &error), 202);

    // Both folded into the one copy: each sees the other's update, in one order.
    auto db = database();
    QVERIFY(db);
    auto applied =
        db->exec(QStringLiteral("SELECT applied_version, file FROM updates WHERE job_id = ? ORDER BY "
                                "applied_version"),
                 {job});
    QVERIFY(applied.ok());
    QStringList files;
    for (qint64 expected : {1, 2}) {
        QVERIFY(applied->next());
        QCOMPARE(applied->value(0).toLongLong(), expected);
        files << applied->value(1).toString();
        QVERIFY(QFile::exists(f.config.sharedDir + u'/' + files.last()));
    }
    applied->finish();
    const TensorBundle first = f.serverWeights(job);
    const TensorBundle second = g.serverWeights(job);
    QVERIFY(!first.isEmpty());
    QCOMPARE(SafeTensors::serialize(first), SafeTensors::serialize(second));

    // The second does not snapshot; the housekeeper does, and its snapshot holds both updates, whose files
    // go.
    tick(g, 61'000);
    auto snapshots = db->exec(QStringLiteral("SELECT COUNT(*) FROM snapshots WHERE job_id = ?"), {job});
    QVERIFY(snapshots.ok() && snapshots->next());
    QCOMPARE(snapshots->value(0).toLongLong(), 0);
    snapshots->finish();
    tick(f, 0);
    f.core->drain();
    auto snapshot = db->exec(QStringLiteral("SELECT version FROM snapshots WHERE job_id = ?"), {job});
    QVERIFY(snapshot.ok() && snapshot->next());
    QCOMPARE(snapshot->value(0).toLongLong(), 2);
    snapshot->finish();
    for (const QString& file : files)
        QVERIFY2(!QFile::exists(f.config.sharedDir + u'/' + file), qPrintable(file));

    // A validation the housekeeper made (its row, as JobDesk::validated writes it) shows at the second as
    // well: job status agrees whichever coordinator answers, and the epoch counts as validated there.
    QVERIFY(db->exec(QStringLiteral("INSERT INTO validations (job_id, epoch, epoch_end, version, updates, "
                                    "accuracy, loss, at_ms) VALUES (?, 1, 0, 2, 2, 0.625, 0.875, ?)"),
                     {job, f.clock.nowMs()})
                .ok());
    QVERIFY(jobAt(g, job).value(QStringLiteral("accuracy")).isNull());
    tick(g, 3000);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("accuracy")).toDouble(), 0.625);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("history")).toArray().size(), 1);

    // Paused at the second, cancelled at the first: each follows the other.
    g.call([&] { return g.core->jobs().setStatus(job, "pause"); }, &status);
    QCOMPARE(status, 200);
    tick(f, 3000);
    QCOMPARE(jobAt(f, job).value(QStringLiteral("state")).toString(), QStringLiteral("paused"));
    f.call([&] { return f.core->jobs().setStatus(job, "resume"); }, &status);
    QCOMPARE(status, 200);
    tick(g, 3000);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));
    // Paused at the first: before the second's next look, its lease request takes the job's lock, which shows
    // the pause: no work. An admin's action at the second, still before its next look, is decided on the
    // stored state: pausing again is refused, resuming is not. Work again.
    QJsonObject reply;
    f.call([&] { return f.core->jobs().setStatus(job, "pause"); }, &status);
    QCOMPARE(status, 200);
    QCOMPARE(g.lease(agent, 1, &reply).size(), size_t(0));
    const auto pauseAtSecond = [&] {
        return g.core->state().call([&] { return g.core->jobs().setStatus(job, "pause"); });
    };
    auto refused = pauseAtSecond();
    QCOMPARE(refused.status, 409);
    QVERIFY2(refused.body.contains("is paused; it cannot be paused"), refused.body.constData());
    g.call([&] { return g.core->jobs().setStatus(job, "resume"); }, &status);
    QCOMPARE(status, 200);
    QCOMPARE(g.lease(agent, 1, &reply).size(), size_t(1));
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));
    f.call([&] { return f.core->jobs().setStatus(job, "cancel"); }, &status);
    QCOMPARE(status, 200);
    // Before the second's next look, its lease request takes the job's lock, which shows the job ended: no
    // work, and no pause of it.
    QCOMPARE(g.lease(agent, 1, &reply).size(), size_t(0));
    refused = pauseAtSecond();
    QCOMPARE(refused.status, 409);
    QVERIFY2(refused.body.contains("is cancelled; it cannot be paused"), refused.body.constData());
    tick(g, 250);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("cancelled"));

    // Revoked at the first: the second stops admitting its token too.
    QString earlyHash;
    auto row = db->exec(QStringLiteral("SELECT token_hash FROM agents WHERE id = ?"), {early});
    QVERIFY(row.ok() && row->next());
    earlyHash = row->value(0).toString();
    row->finish();
    QVERIFY(g.core->admission().agentByTokenHash(earlyHash).has_value());
    QVERIFY(!g.core->admission().agentByTokenHash(earlyHash)->revoked);
    f.call([&] { return f.core->enrollment().revokeAgent(early); }, &status);
    QCOMPARE(status, 200);
    tick(g, 3000);
    QVERIFY(g.core->admission().agentByTokenHash(earlyHash)->revoked);

    // The housekeeper stops: the other takes the housekeeping over at its next tick.
    // (PostgreSQL frees the lock once the first's server process has seen its connection close: a few ticks
    // at most.)
    f.core.reset();
    bool tookOver = false;
    for (int i = 0; i < 100 && !tookOver; ++i) {
        tick(g, 250);
        tookOver = g.core->state().call([&] { return g.core->doesHousekeeping(); });
        if (!tookOver)
            QTest::qWait(100);
    }
    QVERIFY2(tookOver, "the second did not take the housekeeping over within 10 s of the first's stop");
}

void TestSharedDeployment::updatesOfAStoppedCoordinatorAreFolded()
{
    // The housekeeper snapshots after every fold here: a snapshot must not take the file of an update that
    // another coordinator received and has not folded, though that update's number is below one it folded.
    f.config.snapshotEveryUpdates = 1;
    QVERIFY(f.reopen());
    const QString agent = f.enroll().value(QStringLiteral("agent_id")).toString();
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600));
    QVERIFY(job > 0);
    QVERIFY(joinSecond());
    QVERIFY(g.reopen());
    const auto task = g.lease(agent);
    QCOMPARE(task.size(), size_t(1));
    const QString leaseId = task[0].leaseId;

    // The second recorded an update (its 202 went out) and was killed before it folded it: the row and the
    // file are all that is left of it.
    const QString relative = QStringLiteral("updates/%1/%2.safetensors").arg(job).arg(leaseId);
    const QString stored = g.config.sharedDir + u'/' + relative;
    QVERIFY(QDir().mkpath(QFileInfo(stored).path()));
    QVERIFY(SafeTensors::save(stored, g.withResultMetadata(leaseId, shifted(g.leaseBase(leaseId), 0.02f), 0))
                .ok());
    g.core.reset();
    auto db = database();
    QVERIFY(db);
    // What its result() committed: the update, its lease completed and its workunit done, under the job's
    // lock.
    const Status recorded = db->transaction([&]() -> Status {
        for (const auto& [statement, values] : std::initializer_list<std::pair<const char*, QVariantList>>{
                 {"UPDATE jobs SET sched_version = sched_version + 1 WHERE id = ?", {job}},
                 {"INSERT INTO updates (job_id, lease_id, agent_id, epoch, base_version, file, samples, "
                  "loss, "
                  "train_seconds, received_ms) VALUES (?, ?, ?, 1, 0, ?, 10, 0.5, 1.0, ?)",
                  {job, leaseId, agent, relative, g.clock.nowMs()}},
                 {"UPDATE leases SET state = 'completed', changed_version = (SELECT sched_version FROM jobs "
                  "WHERE id "
                  "= ?) WHERE id = ?",
                  {job, leaseId}},
                 {"UPDATE workunits SET state = 'done', changed_version = (SELECT sched_version FROM jobs "
                  "WHERE id = "
                  "?) WHERE id = (SELECT workunit_id FROM leases WHERE id = ?)",
                  {job, leaseId}}})
            if (auto r = db->exec(QString::fromLatin1(statement), values); !r)
                return fail(r.error());
        return {};
    });
    QVERIFY2(recorded.ok(), qPrintable(recorded.ok() ? QString() : recorded.error()));
    const auto appliedVersion = [&]() -> QVariant {
        auto row =
            db->exec(QStringLiteral("SELECT applied_version FROM updates WHERE lease_id = ?"), {leaseId});
        return row.ok() && row->next() ? row->value(0) : QVariant(QStringLiteral("no row"));
    };
    // The housekeeper folds an update of its own (a later number), and snapshots.
    const auto own = f.lease(agent);
    QCOMPARE(own.size(), size_t(1));
    QCOMPARE(f.upload(agent, own[0].leaseId, shifted(f.leaseBase(own[0].leaseId), -0.02f), 0), 202);
    f.core->drain();
    auto snapshot =
        db->exec(QStringLiteral("SELECT s.version, s.last_seq, u.seq FROM snapshots s, updates u WHERE "
                                "s.job_id = ? AND u.lease_id = ?"),
                 {job, leaseId});
    QVERIFY(snapshot.ok() && snapshot->next());
    QCOMPARE(snapshot->value(0).toLongLong(), 1);
    // (The premise: the snapshot's last update number is past the unfolded one.)
    QVERIFY2(snapshot->value(1).toLongLong() > snapshot->value(2).toLongLong(),
             qPrintable(QStringLiteral("last_seq %1, the unfolded update's %2")
                            .arg(snapshot->value(1).toLongLong())
                            .arg(snapshot->value(2).toLongLong())));
    snapshot->finish();
    QVERIFY2(QFile::exists(stored), "a snapshot took the file of an update it does not hold");
    const TensorBundle before = f.serverWeights(job);

    // Not while its coordinator might still be folding it; then by the housekeeper, once.
    tick(f, 10'000);
    QVERIFY(appliedVersion().isNull());
    tick(f, 25'000);
    f.core->drain();
    QCOMPARE(appliedVersion().toLongLong(), 2);
    const TensorBundle after = f.serverWeights(job);
    QVERIFY(SafeTensors::serialize(after) != SafeTensors::serialize(before));
    tick(f, 25'000);
    QCOMPARE(appliedVersion().toLongLong(), 2);
    QCOMPARE(SafeTensors::serialize(f.serverWeights(job)), SafeTensors::serialize(after));
}

void TestSharedDeployment::anImportWhoseCoordinatorStoppedIsTakenOver()
{
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 2));
    QVERIFY(job > 0);
    QCOMPARE(jobAt(f, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));
    auto db = database();
    QVERIFY(db);
    const qint64 orphan = jobImportedBy(*db, job);
    QVERIFY(orphan > 0);
    const auto stateOf = [&] { return jobAt(f, orphan).value(QStringLiteral("state")).toString(); };
    // The housekeeper takes the job up and leaves its import to the coordinator that holds it.
    for (int i = 0; i < 3; ++i)
        tick(f, 2100);
    QCOMPARE(stateOf(), QStringLiteral("created"));

    // That coordinator stops (its connection, and the lock with it, goes): the housekeeper imports the job at
    // its next look.
    QVERIFY(db->exec(QStringLiteral("SELECT pg_advisory_unlock%1").arg(importLock()), {orphan}).ok());
    for (int i = 0; i < 300 && stateOf() == u"created"; ++i) {
        tick(f, 2100);
        QTest::qWait(50);
    }
    QCOMPARE(stateOf(), QStringLiteral("running"));
    // Imported once, and its import given back: a later look claims nothing.
    auto workunits = db->exec(QStringLiteral("SELECT COUNT(*) FROM workunits WHERE job_id = ?"), {orphan});
    QVERIFY(workunits.ok() && workunits->next());
    QCOMPARE(workunits->value(0).toInt(), 2);
    auto free = db->exec(QStringLiteral("SELECT pg_try_advisory_lock%1").arg(importLock()), {orphan});
    QVERIFY(free.ok() && free->next());
    QVERIFY2(free->value(0).toBool(), "the housekeeper kept the job's import lock after the import");
}

void TestSharedDeployment::anImportOvertakenElsewhereIsDropped()
{
    // A job whose import this coordinator runs, while another coordinator (this test's connection) settles it
    // first: cancelled there (or imported, after this one's import lock went with a lost connection). The
    // import finds the stored state no longer `created` and starts nothing.
    qint64 job = 0;
    qint64 overtaken = 0;
    auto db = database();
    QVERIFY(db);
    QVERIFY(importHeldElsewhere(*db, &job, &overtaken));

    const Status settled = overtakeImport(*db, overtaken, [&]() -> Status {
        auto cancelled =
            db->exec(QStringLiteral(
                         "UPDATE jobs SET state = 'cancelled', reason = 'cancelled elsewhere' WHERE id = ?"),
                     {overtaken});
        return cancelled ? Status() : fail(cancelled.error());
    });
    QVERIFY2(settled.ok(), qPrintable(settled.error()));
    f.core->drain();
    tick(f, 2100);
    QCOMPARE(jobAt(f, overtaken).value(QStringLiteral("state")).toString(), QStringLiteral("cancelled"));
    for (const char* table : {"workunits", "shards"}) {
        auto rows =
            db->exec(QStringLiteral("SELECT COUNT(*) FROM %1 WHERE job_id = ?").arg(QLatin1String(table)),
                     {overtaken});
        QVERIFY(rows.ok() && rows->next());
        QVERIFY2(rows->value(0).toInt() == 0, table);
    }
}

void TestSharedDeployment::anImportOvertakenByAnotherImportIsDroppedAndTheJobTakenUp()
{
    // The same, imported by another coordinator (after this one's import lock went with a lost connection):
    // the job is `running` there, on the shards and files that import stored. This one's import is dropped,
    // and the job is taken up as stored at once, not at the next look: its leases were just brought into this
    // coordinator's picture by the job's lock, and their results would be refused meanwhile ("job is
    // created").
    qint64 job = 0;
    qint64 overtaken = 0;
    auto db = database();
    QVERIFY(db);
    QVERIFY(importHeldElsewhere(*db, &job, &overtaken));
    QCOMPARE(jobAt(f, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));

    const Status settled = overtakeImport(*db, overtaken, [&]() -> Status {
        // What the other coordinator's import stored: the same data set's files, shards and spec.
        auto shards =
            db->exec(QStringLiteral("INSERT INTO shards (job_id, idx, sha256, bytes, samples) SELECT ?, "
                                    "idx, sha256, bytes, samples FROM shards WHERE job_id = ?"),
                     {overtaken, job});
        if (!shards)
            return fail(shards.error());
        auto running = db->exec(
            QStringLiteral("UPDATE jobs SET state = 'running', model_sha = o.model_sha, initial_sha = "
                           "o.initial_sha, test_sha = o.test_sha, spec = o.spec FROM jobs o WHERE "
                           "jobs.id = ? AND o.id = ?"),
            {overtaken, job});
        return running ? Status() : fail(running.error());
    });
    QVERIFY2(settled.ok(), qPrintable(settled.ok() ? QString() : settled.error()));
    f.core->drain(); // no look since
    const QJsonObject status = jobAt(f, overtaken);
    QCOMPARE(status.value(QStringLiteral("state")).toString(), QStringLiteral("running"));
    auto stored = db->exec(QStringLiteral("SELECT state FROM jobs WHERE id = ?"), {overtaken});
    QVERIFY(stored.ok() && stored->next());
    QCOMPARE(stored->value(0).toString(), QStringLiteral("running"));
}

void TestSharedDeployment::oneResultTakenAtBothKeepsTheCommittedFile()
{
    // An agent's upload that reached the first coordinator, and its retry (different bytes: a hostile agent's
    // choice) the second, both judged before either recorded it. Each moves its copy into the shared folder
    // and waits for the job's lock (held here by the test's connection); one commits, the other is refused.
    // The committed row's file must be the copy that coordinator folded, and the refused one's copy must go.
    QString agent;
    qint64 job = 0;
    QVERIFY(jobAtBoth(&agent, &job));
    const auto task = f.lease(agent);
    QCOMPARE(task.size(), size_t(1));
    const QString leaseId = task[0].leaseId;
    g.core->deployment().catchUpOnLeases();
    const TensorBundle base = f.leaseBase(leaseId);
    QVERIFY(!base.isEmpty());
    const QByteArray bytesAtFirst =
        SafeTensors::serialize(f.withResultMetadata(leaseId, shifted(base, 0.01f), 0));
    const QByteArray bytesAtSecond =
        SafeTensors::serialize(g.withResultMetadata(leaseId, shifted(base, 0.02f), 0));
    QVERIFY(bytesAtFirst != bytesAtSecond);

    auto db = database();
    QVERIFY(db);
    int first = 0;
    int second = 0;
    std::thread toFirst;
    std::thread toSecond;
    const Status raced = db->transaction([&]() -> Status {
        if (auto held = db->exec(QStringLiteral("SELECT state FROM jobs WHERE id = ? FOR UPDATE"), {job});
            !held)
            return fail(held.error());
        toFirst = std::thread([&] { first = f.uploadBytes(agent, leaseId, bytesAtFirst); });
        toSecond = std::thread([&] { second = g.uploadBytes(agent, leaseId, bytesAtSecond); });
        bool bothWait = false;
        for (int i = 0; i < 600 && !bothWait; ++i) {
            auto rows =
                db->exec(QStringLiteral("SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = "
                                        "l.pid WHERE NOT l.granted AND a.datname = current_database()"));
            bothWait = rows && rows->next() && rows->value(0).toInt() >= 2;
            if (!bothWait)
                QThread::msleep(100);
        }
        return bothWait ? Status()
                        : fail(QStringLiteral("the two results never both waited for the job's lock"));
    });
    if (toFirst.joinable())
        toFirst.join();
    if (toSecond.joinable())
        toSecond.join();
    QVERIFY2(raced.ok(), qPrintable(raced.ok() ? QString() : raced.error()));
    QVERIFY2((first == 202) != (second == 202),
             qPrintable(QStringLiteral("answers %1 and %2: exactly one is taken").arg(first).arg(second)));
    QCOMPARE(first == 202 ? second : first, 500);

    auto rows = db->exec(QStringLiteral("SELECT file FROM updates WHERE lease_id = ?"), {leaseId});
    QVERIFY(rows.ok() && rows->next());
    const QString file = rows->value(0).toString();
    QVERIFY(!rows->next());
    rows->finish();
    QCOMPARE(readAll(f.config.sharedDir + u'/' + file), first == 202 ? bytesAtFirst : bytesAtSecond);
    const QStringList left = QDir(f.config.sharedDir + QStringLiteral("/updates/%1").arg(job))
                                 .entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
    QCOMPARE(left, QStringList{QFileInfo(file).fileName()});
}

void TestSharedDeployment::aJobItCannotReadIsLeftToTheOthers()
{
    // The second coordinator starts while the job's weights are out of its reach (its mount of the shared
    // folder failed; here, the file is moved aside). The job is the deployment's, and the first serves it:
    // the second leaves it alone, says why, and takes it up once it can read it. It never fails the job.
    const QJsonObject enrolled = f.enroll();
    const QString agent = enrolled.value(QStringLiteral("agent_id")).toString();
    const QJsonObject bystander = f.enroll(QStringLiteral("bystander")); // holds no lease of the job
    const qint64 job = f.submit(test::tinyJobSpec(m_dataset, 4, 3, 0.99, 600));
    QVERIFY(job > 0);
    const auto task = f.lease(agent);
    QCOMPARE(task.size(), size_t(1));
    auto db = database();
    QVERIFY(db);
    auto initial = db->exec(QStringLiteral("SELECT initial_sha FROM jobs WHERE id = ?"), {job});
    QVERIFY(initial.ok() && initial->next());
    const QString weights = f.core->blobs().path(initial->value(0).toString());
    initial->finish();
    QVERIFY(QFile::rename(weights, weights + QStringLiteral(".away")));
    QVERIFY(joinSecond());
    QVERIFY(g.reopen());

    const auto storedState = [&] {
        auto row = db->exec(QStringLiteral("SELECT state FROM jobs WHERE id = ?"), {job});
        return row.ok() && row->next() ? row->value(0).toString() : QStringLiteral("unreadable");
    };
    QCOMPARE(storedState(), QStringLiteral("running"));
    int status = 0;
    const QJsonObject answer = g.call([&] { return g.core->jobs().status(job); }, &status);
    QCOMPARE(status, 503);
    QVERIFY2(answer.value(QStringLiteral("error")).toString().contains(u"cannot read the job's weights"),
             qPrintable(answer.value(QStringLiteral("error")).toString()));
    // Its agents are told to try again (perhaps at the other), not that their lease is unknown: their result
    // and their files before any body is read, their progress reports. The why stays in the log.
    {
        ApiHandler api(*g.core);
        const auto admitted = [&](const QByteArray& method, const QString& target,
                                  const QJsonObject& who = QJsonObject()) {
            RequestHead head;
            head.method = method;
            head.target = target.toUtf8();
            const QJsonObject& caller = who.isEmpty() ? enrolled : who;
            head.headers.append(
                {"Authorization",
                 "Bearer " + caller.value(QStringLiteral("agent_token")).toString().toLatin1()});
            head.remoteAddress = head.remoteKey = QStringLiteral("127.0.0.1");
            const auto answer = api.admit(head);
            return std::holds_alternative<HttpResponse>(answer)
                       ? std::get<HttpResponse>(answer)
                       : HttpResponse::error(100, QStringLiteral("admitted"));
        };
        const HttpResponse result =
            admitted("PUT", QStringLiteral("/api/v1/work/%1/result").arg(task[0].leaseId));
        QCOMPARE(result.status, 503);
        QVERIFY2(!result.body.contains("cannot read"), result.body.constData());
        QString shard;
        for (const auto& file : task[0].manifest.value(QStringLiteral("files")).toArray())
            if (file.toObject().value(QStringLiteral("role")).toString() == QLatin1String("shard"))
                shard = file.toObject().value(QStringLiteral("sha256")).toString();
        QVERIFY(!shard.isEmpty());
        QCOMPARE(admitted("GET", QStringLiteral("/api/v1/files/") + shard).status, 503);
        // An agent that holds no lease of the job is answered as before: its lease, another's, a file.
        QCOMPARE(
            admitted("PUT", QStringLiteral("/api/v1/work/%1/result").arg(task[0].leaseId), bystander).status,
            404);
        QCOMPARE(admitted("GET", QStringLiteral("/api/v1/files/") + shard, bystander).status, 404);
        QCOMPARE(
            admitted("PUT", QStringLiteral("/api/v1/work/0123456789abcdef0123456789abcdef/result")).status,
            404);
    }
    g.call([&] { return g.core->leaseNotInMemory(agent, task[0].leaseId); }, &status);
    QCOMPARE(status, 503);
    // Looks while it still cannot read it change nothing.
    tick(g, 3000);
    tick(g, 5000);
    QCOMPARE(storedState(), QStringLiteral("running"));
    g.call([&] { return g.core->jobs().status(job); }, &status);
    QCOMPARE(status, 503);

    // Back within reach: taken up at a later look, and the lease's result is taken there.
    QVERIFY(QFile::rename(weights + QStringLiteral(".away"), weights));
    tick(g, 60'000);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("running"));
    QCOMPARE(g.upload(agent, task[0].leaseId, shifted(g.leaseBase(task[0].leaseId), 0.01f), 0), 202);
    QCOMPARE(storedState(), QStringLiteral("running"));
}

void TestSharedDeployment::aResultAfterItsJobEndedElsewhereIsNotTaken()
{
    // The housekeeper ended the job (here the test's connection, as JobDesk::finish writes it) after the
    // second issued a lease, and before the second's next look: the result's record takes the job's lock,
    // which shows the end. Not taken (409, the job's state), not recorded, not folded.
    QString agent;
    qint64 job = 0;
    QVERIFY(jobAtBoth(&agent, &job));
    const auto task = g.lease(agent);
    QCOMPARE(task.size(), size_t(1));
    const TensorBundle base = g.leaseBase(task[0].leaseId);
    const TensorBundle before = g.serverWeights(job);
    auto db = database();
    QVERIFY(db);
    QVERIFY(
        db->exec(QStringLiteral("UPDATE jobs SET state = 'completed', reason = 'reached its target' WHERE id "
                                "= ?"),
                 {job})
            .ok());
    QString error;
    QCOMPARE(g.upload(agent, task[0].leaseId, shifted(base, 0.01f), 0, &error), 409);
    QVERIFY2(error.contains(u"is completed and takes no more results"), qPrintable(error));
    auto rows = db->exec(QStringLiteral("SELECT COUNT(*) FROM updates WHERE job_id = ?"), {job});
    QVERIFY(rows.ok() && rows->next());
    QCOMPARE(rows->value(0).toInt(), 0);
    rows->finish();
    QCOMPARE(SafeTensors::serialize(f.serverWeights(job)), SafeTensors::serialize(before));
    QVERIFY(QDir(f.config.sharedDir + QStringLiteral("/updates/%1").arg(job))
                .entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot)
                .isEmpty());
    tick(g, 250);
    QCOMPARE(jobAt(g, job).value(QStringLiteral("state")).toString(), QStringLiteral("completed"));
}

void TestSharedDeployment::eachDashboardShowsTheOthersEvents()
{
    // A dashboard connected to the second coordinator: the first's lease and update reach it after a tick of
    // each (the first sends, the second reads), once; the second's own events reach it once, not again
    // through the relay.
    QString agent;
    qint64 job = 0;
    QVERIFY(jobAtBoth(&agent, &job));
    auto watcher = g.core->events().subscribe();
    QVERIFY(watcher);
    tick(g, 250); // the relay notes where the stream is: events from here on
    (void)watcher->take();

    const auto atFirst = f.lease(agent);
    QCOMPARE(atFirst.size(), size_t(1));
    QCOMPARE(f.upload(agent, atFirst[0].leaseId, shifted(f.leaseBase(atFirst[0].leaseId), 0.01f), 0), 202);
    const auto atSecond = g.lease(agent);
    QCOMPARE(atSecond.size(), size_t(1));
    tick(f, 250);
    tick(g, 250);
    const QByteArray seen = watcher->take();
    const auto count = [&](const QString& text) { return seen.count(text.toUtf8()); };
    QCOMPARE(count(QStringLiteral("\"lease\":\"%1\"").arg(atFirst[0].leaseId)), 1);
    QCOMPARE(count(QStringLiteral("\"lease\":\"%1\"").arg(atSecond[0].leaseId)), 1);
    QCOMPARE(count(QStringLiteral("event: update\n")), 1);
    QVERIFY2(count(QStringLiteral("event: applied\n")) == 1, seen.constData());

    // Nothing more at the next ticks: each event is read once.
    tick(f, 250);
    tick(g, 250);
    QVERIFY(!watcher->take().contains("event: lease\n"));
    g.core->events().unsubscribe(watcher.get());
}

void TestSharedDeployment::bothAgreeOnTheJobsCounts()
{
    QString agent;
    qint64 job = 0;
    QVERIFY(jobAtBoth(&agent, &job));
    const auto atFirst = f.lease(agent);
    const auto atSecond = g.lease(agent);
    QCOMPARE(atFirst.size(), size_t(1));
    QCOMPARE(atSecond.size(), size_t(1));
    f.core->deployment().catchUpOnLeases();
    g.core->deployment().catchUpOnLeases();
    // Each takes the result of the lease it issued, and sends files for the job's leases.
    QCOMPARE(f.upload(agent, atFirst[0].leaseId, shifted(f.leaseBase(atFirst[0].leaseId), 0.01f), 0), 202);
    QCOMPARE(g.upload(agent, atSecond[0].leaseId, shifted(g.leaseBase(atSecond[0].leaseId), -0.01f), 0), 202);
    f.core->state().call([&] { f.core->leases().noteDownloaded(job, "weights", 1000); });
    g.core->state().call([&] { g.core->leases().noteDownloaded(job, "weights", 700); });
    g.core->state().call([&] { g.core->leases().noteDownloaded(job, "shard", 300); });
    // A third lease, open at the second: the workunits and agents training are the deployment's as well.
    const auto third = g.lease(agent);
    QCOMPARE(third.size(), size_t(1));
    // Each looks at the deployment every 2 s: the first stores its file bytes, the second stores its own and
    // reads both, the first reads the second's.
    tick(f, 2100);
    tick(g, 0);
    tick(f, 2100);

    const auto counts = [&](test::CoordinatorFixture& which) {
        const QJsonObject status = jobAt(which, job);
        const QJsonObject transfer = status.value(QStringLiteral("transfer")).toObject();
        return QJsonObject{
            {QStringLiteral("updates_received"), status.value(QStringLiteral("updates_received"))},
            {QStringLiteral("updates"), status.value(QStringLiteral("updates"))},
            {QStringLiteral("updates_not_folded"), status.value(QStringLiteral("updates_not_folded"))},
            {QStringLiteral("workunits"), status.value(QStringLiteral("workunits"))},
            {QStringLiteral("agents"), status.value(QStringLiteral("agents"))},
            {QStringLiteral("uploaded_bytes"), transfer.value(QStringLiteral("uploaded_bytes"))},
            {QStringLiteral("upload_bytes_per_update"), transfer.value(QStringLiteral("upload_bytes_per_update"))},
            {QStringLiteral("downloaded_bytes"), transfer.value(QStringLiteral("downloaded_bytes"))},
            {QStringLiteral("downloaded_bytes_by_role"), transfer.value(QStringLiteral("downloaded_bytes_by_role"))},
        };
    };
    const QJsonObject first = counts(f);
    QCOMPARE(first.value(QStringLiteral("updates_received")).toInteger(), 2);
    QCOMPARE(first.value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(first.value(QStringLiteral("updates_not_folded")).toInteger(), 0);
    QCOMPARE(first.value(QStringLiteral("workunits")).toObject(),
             (QJsonObject{{QStringLiteral("pending"), 1}, {QStringLiteral("leased"), 1}, {QStringLiteral("done"), 2}}));
    QCOMPARE(first.value(QStringLiteral("agents")).toInteger(), 1);
    QVERIFY(first.value(QStringLiteral("uploaded_bytes")).toInteger() > 0);
    QCOMPARE(first.value(QStringLiteral("downloaded_bytes")).toInteger(), 2000);
    QCOMPARE(first.value(QStringLiteral("downloaded_bytes_by_role")).toObject(),
             (QJsonObject{{QStringLiteral("weights"), 1700}, {QStringLiteral("shard"), 300}}));
    QCOMPARE(counts(g), first);

    // /metrics: the job's figures are the deployment's (no coordinator label), this process's carry one.
    const QByteArray metrics = f.core->state().call([&] { return f.core->views().metricsText({}).body; });
    const QByteArray receivedAtFirst = "gleaner_job_updates_received{job_id=\"" + QByteArray::number(job) + '"';
    QVERIFY2(metrics.contains(receivedAtFirst), metrics.constData());
    QVERIFY2(metrics.contains("\ngleaner_updates_accepted_total{coordinator=\""), metrics.constData());
    QVERIFY2(!metrics.contains("gleaner_job_updates_received{coordinator="), metrics.constData());

    // The second takes one more result and stops: the first still counts everything it took.
    QCOMPARE(g.upload(agent, third[0].leaseId, shifted(g.leaseBase(third[0].leaseId), 0.02f), 0), 202);
    g.core.reset();
    tick(f, 2100);
    f.core->drain();
    const QJsonObject after = counts(f);
    QCOMPARE(after.value(QStringLiteral("updates_received")).toInteger(), 3);
    QCOMPARE(after.value(QStringLiteral("updates")).toInteger(), 3);
    QVERIFY(after.value(QStringLiteral("uploaded_bytes")).toInteger() >
            first.value(QStringLiteral("uploaded_bytes")).toInteger());
    QCOMPARE(after.value(QStringLiteral("workunits")).toObject(),
             (QJsonObject{{QStringLiteral("pending"), 1}, {QStringLiteral("leased"), 0}, {QStringLiteral("done"), 3}}));
}

QTEST_GUILESS_MAIN(TestSharedDeployment)
#include "TestSharedDeployment.moc"
