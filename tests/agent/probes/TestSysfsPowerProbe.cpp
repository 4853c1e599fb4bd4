// SysfsPowerProbe on recorded /sys/class/power_supply trees: laptops on battery and on their chargers, a
// desktop with a UPS, a wireless mouse's battery that must not count, and machines without any supply.
#include "ProbeTestData.h"
#include "power/PowerProbe.h"
#include "power/SysfsPowerProbe.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;
using namespace gleaner::test;

class TestSysfsPowerProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void machines_data();
    void machines();
    void noSupplyAtAll();
    void missingFolder();
    void followsChanges();
    void fake();
};

void TestSysfsPowerProbe::machines_data()
{
    QTest::addColumn<QString>("machine");
    QTest::addColumn<bool>("known");
    QTest::addColumn<bool>("onBattery");
    QTest::addColumn<int>("percent");

    QTest::newRow("laptop unplugged") << "laptop-on-battery" << true << true << 57;
    QTest::newRow("laptop charging (charge_* in µAh)") << "laptop-charging" << true << false << 80;
    QTest::newRow("laptop on a USB-C charger, no Mains supply") << "laptop-usbc-full" << true << false << 100;
    QTest::newRow("weak charger: discharging but plugged in") << "laptop-weak-charger" << true << false << 40;
    QTest::newRow("two batteries: energy summed") << "laptop-two-batteries" << true << true << 56;
    QTest::newRow("empty second bay ignored") << "laptop-empty-bay" << true << true << 33;
    QTest::newRow("desktop with a UPS on mains") << "desktop-ups" << true << false << 100;
    QTest::newRow("desktop whose UPS took over") << "desktop-ups-on-battery" << true << true << 90;
    QTest::newRow("only a wireless mouse's battery") << "desktop-mouse" << false << false << -1;
    QTest::newRow("laptop with a charging mouse") << "laptop-with-mouse" << true << true << 71;
}

void TestSysfsPowerProbe::machines()
{
    QFETCH(QString, machine);
    SysfsPowerProbe probe(probeData(QStringLiteral("power_supply/") + machine));
    const PowerObservation observation = probe.sample();
    QTEST(observation.known, "known");
    QTEST(observation.onBattery, "onBattery");
    QTEST(observation.batteryPercent, "percent");
}

void TestSysfsPowerProbe::noSupplyAtAll()
{
    const auto dir = scratchDir(); // a desktop: /sys/class/power_supply exists and is empty
    const PowerObservation observation = SysfsPowerProbe(dir->path()).sample();
    QVERIFY(!observation.known);
    QVERIFY(!observation.onBattery);
    QCOMPARE(observation.batteryPercent, -1);
}

void TestSysfsPowerProbe::missingFolder()
{
    const PowerObservation observation =
        SysfsPowerProbe(QStringLiteral("/nonexistent/power_supply")).sample();
    QVERIFY(!observation.known);
    QVERIFY(!observation.onBattery);
}

void TestSysfsPowerProbe::followsChanges()
{
    const auto dir = scratchDir();
    QVERIFY(copyTree(probeData(QStringLiteral("power_supply/laptop-on-battery")), dir->path()));
    SysfsPowerProbe probe(dir->path());
    QVERIFY(probe.sample().onBattery);
    // The owner plugs the charger in: the adapter comes online before the battery's status changes.
    QVERIFY(writeFile(dir->filePath(QStringLiteral("AC/online")), "1\n"));
    QVERIFY(!probe.sample().onBattery);
    QVERIFY(writeFile(dir->filePath(QStringLiteral("BAT0/status")), "Charging\n"));
    QVERIFY(writeFile(dir->filePath(QStringLiteral("BAT0/energy_now")), "29000000\n"));
    const PowerObservation charging = probe.sample();
    QVERIFY(!charging.onBattery);
    QCOMPARE(charging.batteryPercent, 58);
}

void TestSysfsPowerProbe::fake()
{
    FakePowerProbe probe;
    probe.next = PowerObservation{true, true, 12};
    QCOMPARE(probe.sample().batteryPercent, 12);
}

QTEST_GUILESS_MAIN(TestSysfsPowerProbe)
#include "TestSysfsPowerProbe.moc"
