// A short chaos soak (ChaosSoak) as a test: about 75 s of SIGKILLed agents and coordinator on a small
// Fashion-MNIST job, at least three agent kills and one coordinator kill, then the audit (SoakAudit): every
// update answered 202 folded in exactly once, no workunit lost or done twice, every job at its target.
// tests/e2e/chaos-soak.sh runs the same for as long as a developer likes.
#include "ChaosSoak.h"
#include "TestSupport.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace gleaner;
using namespace gleaner::e2e;

class TestChaosSoak : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void shortSoakKeepsEveryUpdateOnce();
};

void TestChaosSoak::initTestCase()
{
    QVERIFY2(QFileInfo::exists(test::fashionMnistDir() + QStringLiteral("/train-images-idx3-ubyte.gz")),
             qPrintable(QStringLiteral("Fashion-MNIST is missing from %1; install dataset-fashion-mnist")
                            .arg(test::fashionMnistDir())));
    QVERIFY2(QFileInfo(workerProgram()).isExecutable(), qPrintable(workerProgram()));
}

void TestChaosSoak::shortSoakKeepsEveryUpdateOnce()
{
    auto options = ChaosOptions::parse(
        {QStringLiteral("chaos_soak"), QStringLiteral("--seconds"), QStringLiteral("75"),
         QStringLiteral("--agents"), QStringLiteral("3"), QStringLiteral("--seed"),
         QStringLiteral("20261125"), QStringLiteral("--kill-interval-ms"), QStringLiteral("4000:10000"),
         QStringLiteral("--down-ms"), QStringLiteral("200:12000"),
         QStringLiteral("--coordinator-kill-probability"), QStringLiteral("0.3"),
         QStringLiteral("--min-agent-kills"), QStringLiteral("3"), QStringLiteral("--min-coordinator-kills"),
         QStringLiteral("1"), QStringLiteral("--finish-timeout"), QStringLiteral("600")});
    QVERIFY2(options, qPrintable(options.error()));
    auto scratch = test::scratchDir();
    ChaosSoak soak(*options, scratch->path());
    const QJsonObject figures = soak.run();
    const QByteArray text = QJsonDocument(figures).toJson(QJsonDocument::Indented);
    qInfo().noquote() << text;
    if (!figures.value(QStringLiteral("ok")).toBool() &&
        qEnvironmentVariableIsSet("GLEANER_KEEP_TEST_DATA")) {
        scratch->setAutoRemove(false);
        qWarning().noquote() << "logs and data kept in" << scratch->path();
    }
    QStringList violations;
    for (const auto& v : figures.value(QStringLiteral("violations")).toArray())
        violations << v.toString();
    QVERIFY2(violations.isEmpty(), qPrintable(violations.join(u'\n')));
    QVERIFY2(figures.value(QStringLiteral("agent_kills")).toInt() >= 3, text.constData());
    QVERIFY2(figures.value(QStringLiteral("coordinator_kills")).toInt() >= 1, text.constData());
    QVERIFY2(figures.value(QStringLiteral("target_reached")).toBool(), text.constData());
    QVERIFY2(figures.value(QStringLiteral("updates_accepted")).toInteger() > 0, text.constData());
    QCOMPARE(figures.value(QStringLiteral("final_version")).toInteger(), figures.value(QStringLiteral("jobs"))
                                                                             .toArray()
                                                                             .last()
                                                                             .toObject()
                                                                             .value(QStringLiteral("updates"))
                                                                             .toInteger());
}

int main(int argc, char** argv)
{
    // On a loaded machine the soak and its last job outlast QtTest's 5-minute watchdog, which would abort it
    // in the middle of the audit; ctest's TIMEOUT bounds it instead.
    qputenv("QTEST_FUNCTION_TIMEOUT", "1200000");
    QCoreApplication app(argc, argv);
    TestChaosSoak test;
    return QTest::qExec(&test, argc, argv);
}
#include "TestChaosSoak.moc"
