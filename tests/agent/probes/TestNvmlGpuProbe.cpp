// NvmlGpuProbe: no NVIDIA driver is "no GPU information", never an error and never a line on the terminal
// (this is the case on the build machine); a driver that is there but fails is a warning; with a fake NVML
// library the probe reads the GPUs through dlopen as it would the driver's.
#include "config/Enroller.h"
#include "gpu/GpuProbe.h"
#include "gpu/NvmlGpuProbe.h"

#include <QFile>
#include <QTemporaryDir>
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
    void brokenLibraryIsAWarning();
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

namespace {
// Every message logged while one is alive: `gleaner-agent enroll` runs the probe with stderr on the terminal.
class LoggedMessages
{
public:
    LoggedMessages()
    {
        s_lines.clear();
        m_previous = qInstallMessageHandler(record);
    }
    ~LoggedMessages() { qInstallMessageHandler(m_previous); }
    QStringList lines() const { return s_lines; }

private:
    static void record(QtMsgType, const QMessageLogContext&, const QString& message) { s_lines << message; }
    static inline QStringList s_lines;
    QtMessageHandler m_previous;
};
} // namespace

void TestNvmlGpuProbe::absentLibraryIsUnknown()
{
    LoggedMessages logged;
    NvmlGpuProbe probe(QStringLiteral("libnvidia-ml-not-here.so.1"));
    QVERIFY(!probe.sample().known);
    QVERIFY(probe.driverMissing());
    QVERIFY2(probe.unavailableReason().contains(u"no NVIDIA driver") &&
                 probe.unavailableReason().contains(u"libnvidia-ml-not-here.so.1") &&
                 probe.unavailableReason().contains(u"install the NVIDIA driver"),
             qPrintable(probe.unavailableReason()));
    QVERIFY(!probe.sample().known); // asked again: the same answer, no crash

    // What enroll declares and the agent's status shows: no GPU fields, a note that says why.
    const MachineHardware hardware = machineHardware(QStringLiteral("libnvidia-ml-not-here.so.1"));
    QVERIFY(!hardware.capabilities.contains(u"gpu") && !hardware.capabilities.contains(u"gpus"));
    QVERIFY(hardware.capabilities.value(u"cores").toInt() >= 1);
    QVERIFY(hardware.gpuDriverMissing);
    QCOMPARE(hardware.gpu.value(u"count").toInt(-1), 0);
    QVERIFY(hardware.gpu.value(u"note").toString().startsWith(u"no NVIDIA driver"));
    // A fact about the machine, said by the agent once in its log: the probe itself prints nothing.
    QVERIFY2(logged.lines().isEmpty(), qPrintable(logged.lines().join(u'\n')));
}

void TestNvmlGpuProbe::brokenLibraryIsAWarning()
{
    // A driver's library that is there but cannot be loaded (here: not an ELF file at all).
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("libnvidia-ml.so.1"));
    QFile broken(path);
    QVERIFY(broken.open(QIODevice::WriteOnly));
    broken.write("not a shared library\n");
    broken.close();
    NvmlGpuProbe probe(path);
    QTest::ignoreMessage(QtWarningMsg,
                         QRegularExpression(QStringLiteral("libnvidia-ml.so.1 could not be loaded")));
    QVERIFY(!probe.sample().known);
    QVERIFY(!probe.driverMissing());
    QVERIFY2(probe.unavailableReason().contains(u"reinstall the NVIDIA driver"),
             qPrintable(probe.unavailableReason()));
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

    const MachineHardware hardware = machineHardware(QStringLiteral(FAKE_NVML_PATH));
    QCOMPARE(hardware.capabilities.value(u"gpus").toInt(), 2);
    QCOMPARE(hardware.capabilities.value(u"gpu").toString(), QStringLiteral("NVIDIA GeForce RTX 3060"));
    QCOMPARE(hardware.gpu.value(u"count").toInt(), 2);
    QVERIFY(hardware.gpu.value(u"note").isNull());
    QVERIFY(!hardware.gpuDriverMissing);
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
