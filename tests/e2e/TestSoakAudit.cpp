// SoakAudit, the chaos soak's judge, on a small coordinator database written by hand: a consistent history
// passes, and each way of losing, doubling or misplacing an update is reported, naming what broke. (A soak
// whose checks cannot fail would prove nothing.)
#include "SoakAudit.h"
#include "TestSupport.h"
#include "store/Database.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::e2e;

namespace {

const QString kLeaseA = QStringLiteral("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
const QString kLeaseB = QStringLiteral("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");

QString uploadLines(const QString& lease, int seq)
{
    return QStringLiteral(
               "12:00:01.000 gleaner.agent.net: \"PUT\" \"https://127.0.0.1:4433/api/v1/work/%1/result\" "
               "-> 202 41 bytes, 0 new connections\n"
               "12:00:01.001 gleaner.agent: lease %1: result accepted (update %2, staleness 0)\n")
        .arg(lease)
        .arg(seq);
}

QJsonObject status(qint64 version)
{
    return QJsonObject{{QStringLiteral("state"), QStringLiteral("completed")},
                       {QStringLiteral("accuracy"), 0.8},
                       {QStringLiteral("version"), version},
                       {QStringLiteral("updates"), version}};
}

} // namespace

class TestSoakAudit : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void consistentHistoryPasses();
    void eachFaultIsReported_data();
    void eachFaultIsReported();

private:
    // One job, one epoch of two workunits, each done by one lease whose result was folded in once.
    void writeHistory(const QString& corruption);
    AuditInput input(const QString& extraLog, qint64 versionAfterRestart) const;

    std::unique_ptr<QTemporaryDir> m_scratch;
    QString m_db;
};

void TestSoakAudit::init()
{
    m_scratch = test::scratchDir();
    m_db = m_scratch->path() + QStringLiteral("/gleaner.db");
}

void TestSoakAudit::writeHistory(const QString& corruption)
{
    auto db = coordinator::Database::open(m_db);
    QVERIFY2(db, qPrintable(db.error()));
    const QStringList statements = {
        QStringLiteral(
            "INSERT INTO jobs (id, name, spec, state, created_ms, epoch, accuracy) VALUES (1, 'j', "
            "'{\"target_accuracy\": 0.75}', 'completed', 0, 1, 0.8)"),
        QStringLiteral(
            "INSERT INTO workunits (id, job_id, epoch, shard, state, issued) VALUES (1, 1, 1, 0, 'done', 1)"),
        QStringLiteral(
            "INSERT INTO workunits (id, job_id, epoch, shard, state, issued) VALUES (2, 1, 1, 1, 'done', 1)"),
        QStringLiteral(
            "INSERT INTO leases (id, workunit_id, agent_id, issued_ms, deadline_ms, state, base_version, "
            "weights_sha, nonce) VALUES ('%1', 1, 'A', 0, 1, 'completed', 0, 'w', 'n')")
            .arg(kLeaseA),
        QStringLiteral(
            "INSERT INTO leases (id, workunit_id, agent_id, issued_ms, deadline_ms, state, base_version, "
            "weights_sha, nonce) VALUES ('%1', 2, 'B', 0, 1, 'completed', 0, 'w', 'n')")
            .arg(kLeaseB),
        QStringLiteral(
            "INSERT INTO updates (seq, job_id, lease_id, agent_id, epoch, base_version, file, samples, loss, "
            "train_seconds, received_ms, applied_version) VALUES (1, 1, '%1', 'A', 1, 0, '', 10, 1, 1, 0, 1)")
            .arg(kLeaseA),
        QStringLiteral(
            "INSERT INTO updates (seq, job_id, lease_id, agent_id, epoch, base_version, file, samples, loss, "
            "train_seconds, received_ms, applied_version) VALUES (2, 1, '%1', 'B', 1, 0, '', 10, 1, 1, 0, 2)")
            .arg(kLeaseB),
        QStringLiteral(
            "INSERT INTO snapshots (job_id, version, last_seq, sha256, written_ms) VALUES (1, 2, 2, 's', 0)"),
        QStringLiteral(
            "INSERT INTO validations (job_id, epoch, epoch_end, version, updates, accuracy, loss, at_ms) "
            "VALUES (1, 1, 1, 2, 2, 0.8, 0.5, 0)"),
    };
    for (const QString& sql : statements + (corruption.isEmpty() ? QStringList() : QStringList{corruption})) {
        auto r = (*db)->exec(sql);
        QVERIFY2(r, qPrintable(r.error()));
    }
}

AuditInput TestSoakAudit::input(const QString& extraLog, qint64 versionAfterRestart) const
{
    AuditInput in;
    in.databasePath = m_db;
    in.acknowledged.read(QStringLiteral("a"), uploadLines(kLeaseA, 1) + extraLog);
    in.acknowledged.read(QStringLiteral("b"), uploadLines(kLeaseB, 2));
    in.statusBefore.insert(1, status(2));
    in.statusAfterRestart.insert(1, status(versionAfterRestart));
    in.exportedVersion.insert(1, 2);
    return in;
}

void TestSoakAudit::consistentHistoryPasses()
{
    writeHistory({});
    const AuditReport report = auditSoak(input({}, 2));
    QVERIFY2(report.ok(), qPrintable(report.violations.join(u'\n')));
    QCOMPARE(report.figures.value(QStringLiteral("updates")).toInteger(), 2);
    QCOMPARE(report.figures.value(QStringLiteral("updates_acknowledged_202")).toInteger(), 2);
    QCOMPARE(report.figures.value(QStringLiteral("late_results")).toInteger(), 0);
}

void TestSoakAudit::eachFaultIsReported_data()
{
    QTest::addColumn<QString>("corruption");
    QTest::addColumn<QString>("extraLog");
    QTest::addColumn<qint64>("versionAfterRestart");
    QTest::addColumn<QString>("expected");
    const QString none;
    QTest::newRow("acknowledged, then lost")
        << QStringLiteral("DELETE FROM updates WHERE seq = 2") << none << qint64(2)
        << QStringLiteral("lease %1: agent b logged 202 for its result, but the coordinator has no row")
               .arg(kLeaseB);
    QTest::newRow("answered 202 twice") << none << uploadLines(kLeaseA, 1) << qint64(2)
                                        << QStringLiteral("logged 2 answers 202 for one result");
    QTest::newRow("told another seq") << none << uploadLines(kLeaseA, 7) << qint64(2)
                                      << QStringLiteral("the 202 named update 7, but its row is seq 1");
    QTest::newRow("never folded in")
        << QStringLiteral("UPDATE updates SET applied_version = NULL WHERE seq = 2") << none << qint64(2)
        << QStringLiteral("update seq 2 (lease %1) was never folded in").arg(kLeaseB);
    QTest::newRow("folded in twice") << QStringLiteral("UPDATE updates SET applied_version = 1 WHERE seq = 2")
                                     << none << qint64(2) << QStringLiteral("was folded in as version 1");
    QTest::newRow("snapshot behind")
        << QStringLiteral("UPDATE snapshots SET version = 1") << none << qint64(2)
        << QStringLiteral("job 1: its last snapshot is version 1, but 2 updates were recorded");
    QTest::newRow("forgotten by a restart")
        << none << none << qint64(0) << QStringLiteral("`job status` after a restart is version 0");
    QTest::newRow("workunit of a validated epoch lost")
        << QStringLiteral("UPDATE workunits SET state = 'pending' WHERE id = 2") << none << qint64(2)
        << QStringLiteral("but epoch 1 was validated as complete (lost)");
    QTest::newRow("a workunit folded in twice")
        << QStringLiteral("UPDATE leases SET workunit_id = 1 WHERE id = '%1'").arg(kLeaseB) << none << qint64(2)
        << QStringLiteral("was folded in 2 times");
    QTest::newRow("result of an open lease")
        << QStringLiteral("UPDATE leases SET state = 'open' WHERE workunit_id = 1") << none << qint64(2)
        << QStringLiteral("not a completed lease");
    QTest::newRow("epoch validated twice")
        << QStringLiteral(
               "INSERT INTO validations (job_id, epoch, epoch_end, version, updates, accuracy, loss, at_ms) "
               "VALUES (1, 1, 1, 2, 2, 0.8, 0.5, 1)")
        << none << qint64(2) << QStringLiteral("epoch 1 was validated as complete 2 times");
    QTest::newRow("below the target")
        << QStringLiteral("UPDATE jobs SET accuracy = 0.5") << none << qint64(2)
        << QStringLiteral("job 1 is 'completed' at accuracy 0.5000, target 0.75");
}

void TestSoakAudit::eachFaultIsReported()
{
    QFETCH(QString, corruption);
    QFETCH(QString, extraLog);
    QFETCH(qint64, versionAfterRestart);
    QFETCH(QString, expected);
    writeHistory(corruption);
    const AuditReport report = auditSoak(input(extraLog, versionAfterRestart));
    QVERIFY2(!report.ok(), "the audit found nothing wrong");
    QVERIFY2(std::any_of(report.violations.cbegin(), report.violations.cend(),
                         [&](const QString& v) { return v.contains(expected); }),
             qPrintable(QStringLiteral("expected a violation containing \"%1\"; got:\n%2")
                            .arg(expected, report.violations.join(u'\n'))));
}

QTEST_GUILESS_MAIN(TestSoakAudit)
#include "TestSoakAudit.moc"
