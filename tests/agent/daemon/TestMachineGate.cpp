// The machine's say over the work (MachineGate) on a dedicated agent, seen only through its hooks, as the
// daemon wires them: the owner's pause holds leasing until resume asks for work at once, a snooze ends by
// itself (on the wall clock) and asks for work again, and a snooze outside one second to a day is refused
// with the remedy. No daemon and no coordinator: what the hooks were told is what the agent would do.

#include "cache/FileCache.h"
#include "daemon/DesktopPolicy.h"
#include "daemon/EventFeed.h"
#include "daemon/MachineGate.h"
#include "daemon/SubtaskTable.h"
#include "policy/PreferenceStore.h"
#include "util/Clock.h"

#include <QTemporaryDir>
#include <QTest>

#include <memory>

using namespace gleaner;
using namespace gleaner::agent;

class TestMachineGate : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void pauseHoldsLeasingAndResumeAsksAtOnce();
    void snoozeEndsByItselfAndAsksForWork();
    void snoozeOutsideADayIsRefused_data();
    void snoozeOutsideADayIsRefused();
    void finishEndsTheOwnersHold();

private:
    std::unique_ptr<QTemporaryDir> m_dir;
    ManualClock m_clock;
    std::unique_ptr<FileCache> m_cache;
    std::unique_ptr<EventFeed> m_feed;
    SubtaskTable m_subtasks;
    std::unique_ptr<MachineGate> m_gate;
    int m_holds = 0;
    int m_leaseNows = 0;
};

void TestMachineGate::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    QVERIFY(m_dir->isValid());
    auto store = PreferenceStore::open(m_dir->filePath(QStringLiteral("preferences.json")), QString());
    QVERIFY2(store, qPrintable(store.error()));
    auto cache = FileCache::open(m_dir->filePath(QStringLiteral("cache")), 1LL << 30, m_clock);
    QVERIFY2(cache, qPrintable(cache.error()));
    m_cache = std::move(*cache);
    m_feed = std::make_unique<EventFeed>(m_clock);
    m_holds = 0;
    m_leaseNows = 0;
    MachineGate::Hooks hooks;
    hooks.startWorker = [](const LeaseId&) {};
    hooks.leaseNow = [this] { ++m_leaseNows; };
    hooks.holdLeasing = [this] { ++m_holds; };
    hooks.stateChanged = [] {};
    hooks.rateLimitsChanged = [](qint64, qint64) {};
    m_gate = std::make_unique<MachineGate>(
        std::make_unique<DesktopPolicy>(std::move(*store), DesktopProbes(), m_clock, true), MachineLimits{},
        MachineGate::Settings{true, 2, QStringLiteral("cpu")}, m_subtasks, *m_cache, *m_feed, m_clock,
        std::move(hooks));
    m_gate->start();
}

void TestMachineGate::cleanup()
{
    m_gate.reset();
    m_feed.reset();
    m_cache.reset();
    m_dir.reset();
}

void TestMachineGate::pauseHoldsLeasingAndResumeAsksAtOnce()
{
    QVERIFY(m_gate->computeAllowed()); // a dedicated agent computes unless its owner says otherwise
    QCOMPARE(m_gate->taskSlots(), 2);
    m_gate->pause();
    QVERIFY(!m_gate->computeAllowed());
    QVERIFY(m_gate->paused());
    QCOMPARE(m_holds, 1);
    m_gate->pause(); // already paused: nothing more
    QCOMPARE(m_holds, 1);
    QCOMPARE(m_leaseNows, 0);
    m_gate->resume();
    QVERIFY(m_gate->computeAllowed());
    QCOMPARE(m_leaseNows, 1);
    m_gate->resume(); // nothing held: no second request
    QCOMPARE(m_leaseNows, 1);
}

void TestMachineGate::snoozeEndsByItselfAndAsksForWork()
{
    const qint64 before = m_clock.nowMs();
    auto until = m_gate->snooze(QJsonObject{{QStringLiteral("seconds"), 1}});
    QVERIFY2(until, qPrintable(until.error()));
    QCOMPARE(*until, before + 1000);
    QVERIFY(m_gate->snoozed());
    QVERIFY(!m_gate->computeAllowed());
    QCOMPARE(m_holds, 1);
    // The snooze's end is wall time: once it has passed, the next check ends the snooze and asks for work.
    m_clock.advance(1500);
    QTRY_COMPARE_WITH_TIMEOUT(m_leaseNows, 1, 5000);
    QVERIFY(!m_gate->snoozed());
    QVERIFY(m_gate->computeAllowed());
}

void TestMachineGate::snoozeOutsideADayIsRefused_data()
{
    QTest::addColumn<QJsonObject>("args");
    QTest::newRow("no seconds") << QJsonObject{};
    QTest::newRow("half a second") << QJsonObject{{QStringLiteral("seconds"), 0.5}};
    QTest::newRow("a day and a second") << QJsonObject{{QStringLiteral("seconds"), 86401}};
    QTest::newRow("text") << QJsonObject{{QStringLiteral("seconds"), QStringLiteral("60")}};
}

void TestMachineGate::snoozeOutsideADayIsRefused()
{
    QFETCH(QJsonObject, args);
    auto until = m_gate->snooze(args);
    QVERIFY(!until);
    QVERIFY2(until.error().contains(QStringLiteral("from 1 to 86400")), qPrintable(until.error()));
    QVERIFY(!m_gate->snoozed());
    QVERIFY(m_gate->computeAllowed());
    QCOMPARE(m_holds, 0);
}

void TestMachineGate::finishEndsTheOwnersHold()
{
    m_gate->pause();
    QVERIFY(m_gate->snooze(QJsonObject{{QStringLiteral("seconds"), 600}}));
    QVERIFY(!m_gate->computeAllowed());
    m_gate->endOwnerHold(); // `finish`: what is held is computed to its end
    QVERIFY(!m_gate->paused());
    QVERIFY(!m_gate->snoozed());
    QVERIFY(m_gate->computeAllowed());
}

QTEST_GUILESS_MAIN(TestMachineGate)
#include "TestMachineGate.moc"
