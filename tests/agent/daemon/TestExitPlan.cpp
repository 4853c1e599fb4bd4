// What a leaving agent does with each subtask it holds, within its grace budget: finish and upload, hand back with
// the checkpoint, or hand back bare (ExitPlan, used by Departure).
#include "daemon/ExitPlan.h"

#include <QTest>

using namespace gleaner::agent;

class TestExitPlan : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void choosesWhatFits_data();
    void choosesWhatFits();
};

void TestExitPlan::choosesWhatFits_data()
{
    QTest::addColumn<double>("secondsLeft");
    QTest::addColumn<double>("trainLeft");
    QTest::addColumn<qint64>("checkpointBytes");
    QTest::addColumn<double>("uplink");
    QTest::addColumn<bool>("written");
    QTest::addColumn<int>("expected");
    const qint64 mb = 1'000'000;
    const int finish = int(ExitStep::Finish), with = int(ExitStep::HandBackWithCheckpoint),
              bare = int(ExitStep::HandBackBare);
    // A subtask 3 s from its end, 100 s of grace: finishing loses nothing.
    QTest::newRow("almost done, AWS spot") << 100.0 << 3.0 << 5 * mb << 10e6 << false << finish;
    // The same subtask with 30 s on GCE: 1.5 x (3 + 0.2 + 1) fits in half of 30.
    QTest::newRow("almost done, GCE") << 30.0 << 3.0 << 5 * mb << 10e6 << false << finish;
    // Two minutes of training left: hand back with the checkpoint (2 + 0.5 + 1 s, x1.5 < 30).
    QTest::newRow("mid-subtask, GCE") << 30.0 << 120.0 << 5 * mb << 10e6 << false << with;
    // A pace not measured yet: never bet on finishing.
    QTest::newRow("pace unknown") << 30.0 << -1.0 << 5 * mb << 10e6 << false << with;
    // A 200 MB checkpoint on a 1 MB/s home uplink in 30 s: bare (the next agent starts now, from step 0).
    QTest::newRow("big checkpoint, slow uplink") << 30.0 << 120.0 << 200 * mb << 1e6 << false << bare;
    // The uplink not measured yet: 1 MB/s is assumed; 20 MB in 40 s fits, 40 MB does not.
    QTest::newRow("uplink unknown, fits") << 40.0 << 600.0 << 20 * mb << 0.0 << true << with;
    QTest::newRow("uplink unknown, too big") << 40.0 << 600.0 << 40 * mb << 0.0 << true << bare;
    // Nothing on disk: bare.
    QTest::newRow("no checkpoint") << 30.0 << -1.0 << qint64(0) << 10e6 << true << bare;
    // The worker has stopped already: its checkpoint goes, no stop time counted.
    QTest::newRow("stopped, 3 s left") << 3.0 << -1.0 << 1 * mb << 10e6 << true << with;
    QTest::newRow("no time at all") << 0.5 << 1.0 << 1 * mb << 10e6 << false << bare;
}

void TestExitPlan::choosesWhatFits()
{
    QFETCH(double, secondsLeft);
    QFETCH(double, trainLeft);
    QFETCH(qint64, checkpointBytes);
    QFETCH(double, uplink);
    QFETCH(bool, written);
    QFETCH(int, expected);
    ExitEstimate e;
    e.secondsLeft = secondsLeft;
    e.trainSecondsLeft = trainLeft;
    e.resultBytes = 2'000'000;
    e.checkpointBytes = checkpointBytes;
    e.uploadBytesPerSecond = uplink;
    e.checkpointWritten = written;
    QCOMPARE(int(ExitPlan::choose(e)), expected);
}

QTEST_APPLESS_MAIN(TestExitPlan)
#include "TestExitPlan.moc"
