// WorkerControl: the commands the agent writes to a worker's stdin, parsed and applied between mini-batches.

#include "worker/WorkerRun.h"

#include <QElapsedTimer>
#include <QTest>

#include <thread>

using namespace gleaner::agent;

class TestWorkerControl : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void applies_data();
    void applies();
    void shareKeepsTheLastValidValue();
    void restEndsWhenACommandArrives();
};

void TestWorkerControl::applies_data()
{
    QTest::addColumn<QString>("line");
    QTest::addColumn<bool>("known");
    QTest::addColumn<double>("share"); // the share afterwards, from an initial 1.0
    QTest::newRow("pause") << "pause" << true << 1.0;
    QTest::newRow("resume with spaces") << "  resume \n" << true << 1.0;
    QTest::newRow("share half") << "share 0.5" << true << 0.5;
    QTest::newRow("share one") << "share 1" << true << 1.0;
    QTest::newRow("share tenth") << "share 0.1" << true << 0.1;
    QTest::newRow("share zero refused") << "share 0" << false << 1.0;
    QTest::newRow("share above one refused") << "share 1.5" << false << 1.0;
    QTest::newRow("share not a number") << "share lots" << false << 1.0;
    QTest::newRow("share without value") << "share" << false << 1.0;
    QTest::newRow("unknown word") << "faster" << false << 1.0;
}

void TestWorkerControl::applies()
{
    QFETCH(QString, line);
    QFETCH(bool, known);
    QFETCH(double, share);
    WorkerControl control;
    QCOMPARE(control.apply(line), known);
    QCOMPARE(control.cpuShare(1.0), share);
}

void TestWorkerControl::shareKeepsTheLastValidValue()
{
    WorkerControl control;
    QCOMPARE(control.cpuShare(0.7), 0.7); // no command yet: the start-up value
    QVERIFY(control.apply(QStringLiteral("share 0.25")));
    QVERIFY(!control.apply(QStringLiteral("share -1")));
    QCOMPARE(control.cpuShare(0.7), 0.25);
}

void TestWorkerControl::restEndsWhenACommandArrives()
{
    WorkerControl control;
    QElapsedTimer timer;
    timer.start();
    std::thread sender([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        control.apply(QStringLiteral("pause"));
    });
    control.rest(30.0); // would hold a small share's rest for 30 s without the command
    sender.join();
    QVERIFY2(timer.elapsed() < 20'000, qPrintable(QString::number(timer.elapsed())));
    QVERIFY(control.paused());
}

QTEST_GUILESS_MAIN(TestWorkerControl)
#include "TestWorkerControl.moc"
