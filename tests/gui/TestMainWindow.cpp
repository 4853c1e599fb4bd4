// The main window against a FakeAgent: the state and reason, each subtask with its progress, the machine's
// contribution, the coordinator and the recent log, all following what the agent pushes.
#include "AgentActions.h"
#include "AgentLink.h"
#include "FakeAgent.h"
#include "GuiTestSupport.h"
#include "MainWindow.h"
#include "SubtaskView.h"
#include "TestSupport.h"
#include "control/ControlProtocol.h"
#include "control/ControlServer.h"

#include <QJsonArray>
#include <QLabel>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QToolButton>

using namespace gleaner;
using namespace gleaner::gui;
using namespace gleaner::gui::test;
using gleaner::test::scratchDir;

namespace {

QJsonObject agentEvent(const QString& name, const QJsonObject& members)
{
    return agent::controlEvent(name, members);
}

struct Harness
{
    Harness()
    {
        dir = scratchDir();
        agent.setStatus(realisticStatus(dir->path()));
    }
    bool start()
    {
        if (!agent.start(dir->path()).ok())
            return false;
        link = std::make_unique<AgentLink>(dir->path(), nullptr);
        actions = std::make_unique<AgentActions>(*link);
        window = std::make_unique<MainWindow>(*link, *actions);
        link->start();
        window->show();
        return QTest::qWaitFor([this] { return link->state() == u"training"; }) &&
               QTest::qWaitFor([this] { return agent.server()->subscriberCount() == 1; });
    }

    std::unique_ptr<QTemporaryDir> dir;
    FakeAgent agent;
    std::unique_ptr<AgentLink> link;
    std::unique_ptr<AgentActions> actions;
    std::unique_ptr<MainWindow> window;
};

} // namespace

class TestMainWindow : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { QLocale::setDefault(QLocale(QLocale::English, QLocale::UnitedStates)); }
    void showsTheStatus();
    void subtasksFollowTheEvents();
    void theCoordinatorAndTheLogFollowTheEvents();
    void theWorkersSandboxIsOneLine();
    void theButtonsAreTheActions();
    void offlineSaysWhyAndOffersEnrollment();
    void closingHidesOrCloses();
};

void TestMainWindow::showsTheStatus()
{
    Harness h;
    QVERIFY(h.start());
    MainWindow& w = *h.window;
    QCOMPARE(w.stateText(), QStringLiteral("Training"));
    QCOMPARE(w.reasonText(), QStringLiteral("Training: the computer has been idle for 12 min"));
    QCOMPARE(
        w.contributionText(),
        QStringLiteral("5.2 hours of training · 41 subtasks done (2 failed) · 1,234,000 samples trained"));
    QCOMPARE(w.coordinatorText(), QStringLiteral("https://coord.example:8443, as office-pc-12\nReachable."));

    const QList<SubtaskView*> views = w.subtaskViews();
    QCOMPARE(views.size(), 2);
    QCOMPARE(views.at(0)->title(), QStringLiteral("fashion-cnn, epoch 3, shard 12: training"));
    QCOMPARE(views.at(0)->progressBar()->value(), 620);
    QCOMPARE(views.at(0)->progressBar()->maximum(), 1000);
    QCOMPARE(views.at(0)->progressBar()->text(), QStringLiteral("620 of 1,000 steps (62%)"));
    QCOMPARE(views.at(0)->details(), QStringLiteral("loss 0.4123 · 512 samples/s · 4 min 10 s left"));
    QCOMPARE(views.at(1)->title(), QStringLiteral("fashion-cnn, epoch 3, shard 13: downloading its data"));
    QCOMPARE(views.at(1)->progressBar()->text(), QStringLiteral("not started"));
    QVERIFY(!w.findChild<QLabel*>(QStringLiteral("noSubtasks"))->isVisible());
    QVERIFY(!w.findChild<QPushButton*>(QStringLiteral("enroll"))->isVisible());
}

void TestMainWindow::subtasksFollowTheEvents()
{
    Harness h;
    QVERIFY(h.start());
    MainWindow& w = *h.window;
    h.agent.pushEvent(
        agentEvent(QStringLiteral("progress"), {{QStringLiteral("lease_id"), QStringLiteral("L-17")},
                                                {QStringLiteral("step"), 900},
                                                {QStringLiteral("of"), 1000},
                                                {QStringLiteral("loss"), 0.3},
                                                {QStringLiteral("samples_per_s"), 600.0},
                                                {QStringLiteral("eta_seconds"), 60}}));
    QTRY_COMPARE(w.subtaskViews().at(0)->progressBar()->value(), 900);
    QCOMPARE(w.subtaskViews().at(0)->details(), QStringLiteral("loss 0.3000 · 600 samples/s · 1 min left"));

    h.agent.pushEvent(agentEvent(
        QStringLiteral("subtask"),
        {{QStringLiteral("lease_id"), QStringLiteral("L-18")},
         {QStringLiteral("state"), QStringLiteral("training")},
         {QStringLiteral("job"), QJsonObject{{QStringLiteral("id"), QStringLiteral("j-1")},
                                             {QStringLiteral("name"), QStringLiteral("fashion-cnn")}}},
         {QStringLiteral("epoch"), 3},
         {QStringLiteral("shard"), 13}}));
    QTRY_COMPARE(w.subtaskViews().at(1)->title(), QStringLiteral("fashion-cnn, epoch 3, shard 13: training"));

    // L-17 ends: it leaves the list, and the totals the status brings again show it.
    QJsonObject status = h.agent.status();
    QJsonObject totals = status.value(u"totals").toObject();
    totals.insert(QStringLiteral("subtasks_done"), 42);
    totals.insert(QStringLiteral("train_seconds"), 36000);
    status.insert(QStringLiteral("totals"), totals);
    status.insert(QStringLiteral("subtasks"), QJsonArray{status.value(u"subtasks").toArray().at(1)});
    h.agent.setStatus(status);
    h.agent.pushEvent(
        agentEvent(QStringLiteral("subtask"), {{QStringLiteral("lease_id"), QStringLiteral("L-17")},
                                               {QStringLiteral("state"), QStringLiteral("done")}}));
    QTRY_COMPARE(w.subtaskViews().size(), 1);
    QCOMPARE(w.subtaskViews().at(0)->objectName(), QStringLiteral("subtask-L-18"));
    QTRY_COMPARE(
        w.contributionText(),
        QStringLiteral("10.0 hours of training · 42 subtasks done (2 failed) · 1,234,000 samples trained"));

    // As a real agent, the status no longer lists the subtask it dropped: the window re-reads the status after a
    // final event, and a stale list would bring the view back (whether the test saw it empty in between was a
    // matter of timing).
    status.insert(QStringLiteral("subtasks"), QJsonArray());
    h.agent.setStatus(status);
    h.agent.pushEvent(agentEvent(QStringLiteral("subtask"),
                                 {{QStringLiteral("lease_id"), QStringLiteral("L-18")},
                                  {QStringLiteral("state"), QStringLiteral("dropped")},
                                  {QStringLiteral("error"), QStringLiteral("deadline passed")}}));
    QTRY_VERIFY(w.subtaskViews().isEmpty());
    QVERIFY(w.findChild<QLabel*>(QStringLiteral("noSubtasks"))->isVisible());
}

void TestMainWindow::theCoordinatorAndTheLogFollowTheEvents()
{
    Harness h;
    QVERIFY(h.start());
    MainWindow& w = *h.window;
    h.agent.pushEvent(agentEvent(
        QStringLiteral("coordinator"),
        {{QStringLiteral("reachable"), false},
         {QStringLiteral("last_error"), QStringLiteral("coord.example:8443: connection refused")}}));
    QTRY_COMPARE(w.coordinatorText(),
                 QStringLiteral("https://coord.example:8443, as office-pc-12\nNot reachable.\n"
                                "Last error: coord.example:8443: connection refused"));

    h.agent.pushEvent(
        agentEvent(QStringLiteral("log"), {{QStringLiteral("level"), QStringLiteral("warning")},
                                           {QStringLiteral("message"), QStringLiteral("download retried")}}));
    h.agent.pushEvent(agentEvent(QStringLiteral("log"),
                                 {{QStringLiteral("level"), QStringLiteral("info")},
                                  {QStringLiteral("message"), QStringLiteral("paused on request")}}));
    QTRY_VERIFY(w.logText().contains(QStringLiteral("paused on request")));
    const QStringList lines = w.logText().split(u'\n');
    QVERIFY2(lines.size() >= 3, qPrintable(w.logText()));
    QVERIFY(lines.at(0).contains(QStringLiteral("Connected to the Gleaner agent")));
    QVERIFY(lines.at(lines.size() - 2).endsWith(QStringLiteral("Warning: download retried")));
    QVERIFY(lines.last().endsWith(QStringLiteral("  paused on request")));
}

void TestMainWindow::theWorkersSandboxIsOneLine()
{
    Harness h;
    QJsonObject status = h.agent.status();
    const QString summary = QStringLiteral("landlock (ABI 2), seccomp, network namespace; missing: landlock TCP rules, "
                                           "landlock scopes, memory cap");
    status.insert(QStringLiteral("sandbox"), QJsonObject{{QStringLiteral("landlock"), true},
                                                         {QStringLiteral("summary"), summary}});
    h.agent.setStatus(status);
    QVERIFY(h.start());
    QCOMPARE(h.window->coordinatorText(), QStringLiteral("https://coord.example:8443, as office-pc-12\nReachable.\n"
                                                         "Workers' sandbox: ") + summary);
}

void TestMainWindow::theButtonsAreTheActions()
{
    Harness h;
    QVERIFY(h.start());
    QToolButton* pause = nullptr;
    QToolButton* snooze = nullptr;
    for (QToolButton* button : h.window->findChildren<QToolButton*>()) {
        if (button->defaultAction() == h.actions->pauseResume())
            pause = button;
        if (button->defaultAction() == h.actions->snooze())
            snooze = button;
    }
    QVERIFY(pause && snooze);
    QCOMPARE(pause->text(), QStringLiteral("Pause"));
    QTest::mouseClick(pause, Qt::LeftButton);
    QVERIFY(h.agent.waitForRequest(QStringLiteral("pause")));
    QTRY_COMPARE(pause->text(), QStringLiteral("Resume"));
    QTRY_COMPARE(h.window->stateText(), QStringLiteral("Paused"));
    QTest::mouseClick(snooze, Qt::LeftButton);
    QVERIFY(h.agent.waitForRequest(QStringLiteral("snooze")));
    QCOMPARE(h.agent.lastArgs(QStringLiteral("snooze")).value(u"seconds").toInt(), 3600);
}

void TestMainWindow::offlineSaysWhyAndOffersEnrollment()
{
    const auto dir = scratchDir();
    AgentLink link(dir->path(), nullptr);
    AgentActions actions(link);
    MainWindow window(link, actions);
    window.show();
    link.setStartGraceMs(10);
    link.start();
    QTRY_COMPARE(link.reasonCode(), QStringLiteral("not_enrolled"));
    QCOMPARE(window.stateText(), QStringLiteral("Not connected"));
    QVERIFY2(window.reasonText().contains(QStringLiteral("not enrolled")), qPrintable(window.reasonText()));
    auto* enroll = window.findChild<QPushButton*>(QStringLiteral("enroll"));
    QVERIFY(enroll->isVisible());
    QSignalSpy asked(&window, &MainWindow::enrollRequested);
    QTest::mouseClick(enroll, Qt::LeftButton);
    QCOMPARE(asked.size(), 1);
    QCOMPARE(window.contributionText(), QStringLiteral("Nothing recorded yet."));
}

void TestMainWindow::closingHidesOrCloses()
{
    Harness h;
    QVERIFY(h.start());
    h.window->setHideOnClose(true);
    h.window->close();
    QVERIFY(!h.window->isVisible());
    QVERIFY(h.agent.isRunning());
    h.window->show();
    h.window->setHideOnClose(false);
    QVERIFY(h.window->close());
    QVERIFY(!h.window->isVisible());
    QVERIFY(!h.agent.receivedCommands().contains(QStringLiteral("finish")));
}

QTEST_MAIN(TestMainWindow)
#include "TestMainWindow.moc"
