// The open-file limit `serve` raises at start, and how many connections fit in a given limit.
#include "http/OpenFileLimit.h"

#include <QTest>

#include <sys/resource.h>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestOpenFileLimit : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void softLimitIsRaisedToTheHardLimit();
    void connectionsThatFit_data();
    void connectionsThatFit();
};

void TestOpenFileLimit::softLimitIsRaisedToTheHardLimit()
{
    rlimit before{};
    QCOMPARE(::getrlimit(RLIMIT_NOFILE, &before), 0);
    if (before.rlim_max != RLIM_INFINITY && before.rlim_max < 64)
        QSKIP("the hard open-file limit is too low to lower the soft one under it");
    // Start from a soft limit below the hard one, as many systems start a process.
    rlimit lowered = before;
    lowered.rlim_cur = 48;
    QCOMPARE(::setrlimit(RLIMIT_NOFILE, &lowered), 0);

    const auto raised = raiseOpenFileLimit();
    QVERIFY2(raised.ok(), qPrintable(raised.error()));
    QCOMPARE(raised->previous, quint64(48));
    QVERIFY(raised->soft > 48);
    QCOMPARE(raised->soft, raised->hard);
    rlimit after{};
    QCOMPARE(::getrlimit(RLIMIT_NOFILE, &after), 0);
    QCOMPARE(quint64(after.rlim_cur), raised->soft);
    qInfo("open-file limit raised from 48 to %llu", static_cast<unsigned long long>(raised->soft));

    // Raising what is raised already changes nothing.
    const auto again = raiseOpenFileLimit();
    QVERIFY(again.ok());
    QCOMPARE(again->previous, raised->soft);
    QCOMPARE(again->soft, raised->soft);
}

void TestOpenFileLimit::connectionsThatFit_data()
{
    QTest::addColumn<quint64>("openFiles");
    QTest::addColumn<int>("wanted");
    QTest::addColumn<int>("fit");
    QTest::newRow("the common 1024") << quint64(1024) << 2048 << 384; // (1024 - 256) / 2
    QTest::newRow("a systemd service's 524288") << quint64(524'288) << 2048 << 2048;
    QTest::newRow("exactly enough") << quint64(2 * 2048 + 256) << 2048 << 2048;
    QTest::newRow("one short") << quint64(2 * 2048 + 255) << 2048 << 2047;
    QTest::newRow("next to nothing") << quint64(16) << 2048 << 1;
}

void TestOpenFileLimit::connectionsThatFit()
{
    QFETCH(quint64, openFiles);
    QFETCH(int, wanted);
    QFETCH(int, fit);
    QCOMPARE(gleaner::coordinator::connectionsThatFit(openFiles, wanted), fit);
}

QTEST_GUILESS_MAIN(TestOpenFileLimit)
#include "TestOpenFileLimit.moc"
