// NvmlGpuProbe: no NVIDIA driver is "no GPU information", never an error (this is the case on the build
// machine), and with a fake NVML library the probe reads the GPUs through dlopen as it would the driver's.
#include "gpu/GpuProbe.h"
#include "gpu/NvmlGpuProbe.h"

#include <QTest>

#include <dlfcn.h>

using namespace gleaner::agent;

class TestNvmlGpuProbe : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cleanupTestCase();
    void absentLibraryIsUnknown();
    void theDriversLibraryOnThisMachine();
    void initFailureIsUnknownAndNotRetried();
    void readsTheGpus();
    void fake();

private:
    // The fake's counters. The test holds its own handle for the whole run, so the library stays loaded (and
    // its counters alive) when a probe's destructor closes the probe's handle.
    int fakeCounter(const char* name) const
    {
        const int* counter = static_cast<const int*>(dlsym(m_fake, name));
        return counter ? *counter : -1;
    }
    void* m_fake = nullptr;
};

void TestNvmlGpuProbe::initTestCase()
{
    m_fake = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    QVERIFY2(m_fake, dlerror());
}

void TestNvmlGpuProbe::cleanupTestCase()
{
    if (m_fake)
        dlclose(m_fake);
}

void TestNvmlGpuProbe::absentLibraryIsUnknown()
{
    NvmlGpuProbe probe(QStringLiteral("libnvidia-ml-not-here.so.1"));
    QVERIFY(!probe.sample().known);
    QVERIFY2(probe.unavailableReason().contains(u"libnvidia-ml-not-here.so.1") &&
                 probe.unavailableReason().contains(u"install the NVIDIA driver"),
             qPrintable(probe.unavailableReason()));
    QVERIFY(!probe.sample().known); // asked again: the same answer, no crash
}

void TestNvmlGpuProbe::theDriversLibraryOnThisMachine()
{
    NvmlGpuProbe probe; // libnvidia-ml.so.1
    const GpuObservation observation = probe.sample();
    if (!observation.known) {
        // The build machines have no NVIDIA driver: "unknown" with a reason, and nothing else.
        QVERIFY(!probe.unavailableReason().isEmpty());
        QCOMPARE(observation.count, 0);
        return;
    }
    QVERIFY(observation.count >= 0);
    QVERIFY(observation.utilisationPercent >= 0 && observation.utilisationPercent <= 100);
}

void TestNvmlGpuProbe::initFailureIsUnknownAndNotRetried()
{
    qputenv("FAKE_NVML_INIT_ERROR", "1");
    {
        NvmlGpuProbe probe(QStringLiteral(FAKE_NVML_PATH));
        QTest::ignoreMessage(
            QtWarningMsg, QRegularExpression(QStringLiteral("nvmlInit from .* failed: Driver Not Loaded")));
        QVERIFY(!probe.sample().known);
        const int inits = fakeCounter("fakeNvmlInits");
        QCOMPARE(inits, 1);
        QVERIFY(!probe.sample().known);
        QCOMPARE(fakeCounter("fakeNvmlInits"), inits); // not retried on every sample
    }
    // A failed init is not shut down.
    QCOMPARE(fakeCounter("fakeNvmlShutdowns"), 0);
    qunsetenv("FAKE_NVML_INIT_ERROR");
}

void TestNvmlGpuProbe::readsTheGpus()
{
    const int initsBefore = fakeCounter("fakeNvmlInits");
    {
        NvmlGpuProbe probe(QStringLiteral(FAKE_NVML_PATH));
        GpuObservation observation = probe.sample();
        QVERIFY(observation.known);
        QCOMPARE(observation.count, 2);
        QCOMPARE(observation.name, QStringLiteral("NVIDIA GeForce RTX 3060"));
        QCOMPARE(observation.utilisationPercent, 87); // the busiest GPU
        QVERIFY(probe.unavailableReason().isEmpty());
        observation = probe.sample();
        QVERIFY(observation.known);
        QCOMPARE(fakeCounter("fakeNvmlInits"), initsBefore + 1); // once, at the first sample
    }
    QCOMPARE(fakeCounter("fakeNvmlShutdowns"), 1); // by the destructor
}

void TestNvmlGpuProbe::fake()
{
    FakeGpuProbe probe;
    QVERIFY(!probe.sample().known);
    probe.next.known = true;
    probe.next.count = 1;
    QCOMPARE(probe.sample().count, 1);
}

QTEST_GUILESS_MAIN(TestNvmlGpuProbe)
#include "TestNvmlGpuProbe.moc"
