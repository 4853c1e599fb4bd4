// The tray app with and without a system tray, against a FakeAgent: the menu's actions send the right
// requests, the menu, tooltip and icon follow the state the agent pushes, and without a tray the window opens
// and important changes go out as notifications (or, when those fail, into the window).
#include "AgentActions.h"
#include "AgentLink.h"
#include "FakeAgent.h"
#include "FirstRunDialog.h"
#include "GuiTestSupport.h"
#include "MainWindow.h"
#include "StateIcons.h"
#include "TestSupport.h"
#include "TrayApp.h"
#include "TrayController.h"
#include "control/ControlProtocol.h"
#include "control/ControlServer.h"

#include <QAction>
#include <QApplication>
#include <QDialog>
#include <QMenu>
#include <QPointer>
#include <QSignalSpy>
#include <QSystemTrayIcon>
#include <QTest>

using namespace gleaner;
using namespace gleaner::gui;
using namespace gleaner::gui::test;
using gleaner::test::scratchDir;

namespace {

struct Harness
{
    explicit Harness(bool tray, bool autostart = false, bool enrolled = true)
    {
        dir = scratchDir();
        if (enrolled)
            markEnrolled(dir->path());
        TrayAppOptions options;
        options.dataDir = dir->path();
        options.autostart = autostart;
        options.trayAvailable = [tray] { return tray; };
        options.notifier = &notifier;
        options.launcher = &launcher;
        options.startGraceMs = 60000; // these tests start their FakeAgent themselves
        app = std::make_unique<TrayApp>(options);
        app->actions().setConfirm([this](const QString&, const QString&) {
            ++confirmations;
            return confirmAnswer;
        });
    }

    std::unique_ptr<QTemporaryDir> dir;
    FakeNotifier notifier;
    FakeLauncher launcher;
    FakeAgent agent;
    std::unique_ptr<TrayApp> app;
    int confirmations = 0;
    bool confirmAnswer = true;
};

QStringList menuTexts(QMenu* menu)
{
    QStringList texts;
    for (QAction* action : menu->actions())
        if (!action->isSeparator())
            texts << action->text();
    return texts;
}

QImage iconImage(const QIcon& icon)
{
    return icon.pixmap(22, 22).toImage().convertToFormat(QImage::Format_ARGB32);
}

void pushState(FakeAgent& agent, const QString& state, const QString& reason, const QString& code)
{
    agent.pushEvent(agent::controlEvent(QStringLiteral("state"), {{QStringLiteral("state"), state},
                                                                  {QStringLiteral("reason"), reason},
                                                                  {QStringLiteral("reason_code"), code}}));
}

} // namespace

class TestTrayController : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void theMenuSendsTheRightRequests();
    void finishAsksFirst();
    void menuTooltipAndIconFollowTheAgent();
    void theIconsDiffer();
    void withATrayAutostartShowsNoWindow();
    void withoutATrayTheWindowOpensAndNotificationsTell();
    void aNotificationThatFailsLandsInTheWindow();
    void quitLeavesTheAgentRunning();
    void aFolderNotEnrolledOpensTheFirstRunDialog();
    void atLoginTheTrayMayComeLater();
    void preferencesOpensTheDialog();
};

void TestTrayController::theMenuSendsTheRightRequests()
{
    Harness h(true);
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    TrayController* tray = h.app->tray();
    QVERIFY(tray && tray->hasTray());
    QTRY_VERIFY(h.app->link().isConnected());
    QTRY_COMPARE(h.app->link().state(), QStringLiteral("waiting"));

    AgentActions& actions = h.app->actions();
    QVERIFY(tray->menu()->actions().contains(actions.pauseResume()));
    QCOMPARE(actions.pauseResume()->text(), QStringLiteral("Pause"));
    actions.pauseResume()->trigger();
    QVERIFY(h.agent.waitForRequest(QStringLiteral("pause")));
    QTRY_COMPARE(actions.pauseResume()->text(), QStringLiteral("Resume"));

    h.agent.clearRequests();
    actions.pauseResume()->trigger();
    QVERIFY(h.agent.waitForRequest(QStringLiteral("resume")));
    QTRY_COMPARE(actions.pauseResume()->text(), QStringLiteral("Pause"));

    actions.snooze()->trigger();
    QVERIFY(h.agent.waitForRequest(QStringLiteral("snooze")));
    QCOMPARE(h.agent.lastArgs(QStringLiteral("snooze")), (QJsonObject{{QStringLiteral("seconds"), 3600}}));
    // Snoozed: Resume ends it early.
    QTRY_COMPARE(actions.pauseResume()->text(), QStringLiteral("Resume"));
    QTRY_VERIFY(actions.snooze()->text().startsWith(QStringLiteral("Snooze 1 hour (snoozed until ")));
    h.agent.clearRequests();
    actions.pauseResume()->trigger();
    QVERIFY(h.agent.waitForRequest(QStringLiteral("resume")));

    actions.finish()->trigger();
    QVERIFY(h.agent.waitForRequest(QStringLiteral("finish")));
    QTRY_COMPARE(h.app->link().state(), QStringLiteral("finishing"));
    // Nothing to pause or finish any more.
    QVERIFY(!actions.finish()->isEnabled());
    QVERIFY(!actions.pauseResume()->isEnabled());
}

void TestTrayController::finishAsksFirst()
{
    Harness h(true);
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    QTRY_VERIFY(h.app->link().isConnected());
    h.confirmAnswer = false;
    h.app->actions().finish()->trigger();
    QCOMPARE(h.confirmations, 1);
    QTest::qWait(200);
    QVERIFY(!h.agent.receivedCommands().contains(QStringLiteral("finish")));
}

void TestTrayController::menuTooltipAndIconFollowTheAgent()
{
    Harness h(true);
    h.agent.setStatus(realisticStatus(h.dir->path()));
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    TrayController* tray = h.app->tray();
    QTRY_COMPARE(tray->iconState(), TrayState::Training);
    QCOMPARE(tray->trayIcon()->toolTip(),
             QStringLiteral("Gleaner: Training: the computer has been idle for 12 min"));
    QCOMPARE(iconImage(tray->trayIcon()->icon()), iconImage(stateIcon(TrayState::Training)));
    QCOMPARE(menuTexts(tray->menu()),
             (QStringList{QStringLiteral("Training: the computer has been idle for 12 min"),
                          QStringLiteral("Pause"), QStringLiteral("Snooze 1 hour"),
                          QStringLiteral("Finish and stop…"), QStringLiteral("Open Gleaner"),
                          QStringLiteral("Preferences…"), QStringLiteral("Quit")}));
    QVERIFY(!h.app->actions().statusLine()->isEnabled());
    QTRY_COMPARE(h.agent.server()->subscriberCount(), 1);

    pushState(h.agent, QStringLiteral("waiting"), QStringLiteral("Paused: you are using the computer"),
              QStringLiteral("user_active"));
    QTRY_COMPARE(tray->iconState(), TrayState::Waiting);
    QCOMPARE(tray->trayIcon()->toolTip(), QStringLiteral("Gleaner: Paused: you are using the computer"));
    QCOMPARE(h.app->actions().statusLine()->text(), QStringLiteral("Paused: you are using the computer"));
    QCOMPARE(h.app->actions().pauseResume()->text(), QStringLiteral("Pause"));
    QCOMPARE(iconImage(tray->trayIcon()->icon()), iconImage(stateIcon(TrayState::Waiting)));

    pushState(h.agent, QStringLiteral("paused"), QStringLiteral("paused on request"),
              QStringLiteral("paused_by_user"));
    QTRY_COMPARE(tray->iconState(), TrayState::Paused);
    QCOMPARE(h.app->actions().pauseResume()->text(), QStringLiteral("Resume"));
    QCOMPARE(iconImage(tray->trayIcon()->icon()), iconImage(stateIcon(TrayState::Paused)));

    const QString error =
        QStringLiteral("The coordinator refused this agent's token; enroll this computer again.");
    pushState(h.agent, QStringLiteral("error"), error, QStringLiteral("error"));
    QTRY_COMPARE(tray->iconState(), TrayState::Error);
    QCOMPARE(tray->trayIcon()->toolTip(), QStringLiteral("Gleaner: ") + error);
    // A long reason is shortened in the menu; the tooltip keeps all of it.
    QVERIFY(h.app->actions().statusLine()->text().endsWith(QChar(0x2026)));
    QVERIFY(h.app->actions().statusLine()->text().size() <= 71);

    // The agent goes away: offline, and the toggle offers to start it again.
    h.agent.stop();
    QTRY_COMPARE(tray->iconState(), TrayState::Offline);
    QVERIFY2(tray->trayIcon()->toolTip().contains(QStringLiteral("not running")),
             qPrintable(tray->trayIcon()->toolTip()));
    QCOMPARE(h.app->actions().pauseResume()->text(), QStringLiteral("Start the agent"));
    QVERIFY(!h.app->actions().snooze()->isEnabled());
    QVERIFY(!h.app->actions().finish()->isEnabled());
    h.launcher.onStart = [&](const QString& dir) { return h.agent.start(dir); };
    h.app->actions().pauseResume()->trigger();
    QCOMPARE(h.launcher.started.size(), 1);
    QTRY_VERIFY(h.app->link().isConnected());
    // With a tray nothing went out as a desktop notification.
    QVERIFY(h.notifier.shown.isEmpty());
}

void TestTrayController::theIconsDiffer()
{
    const TrayState states[] = {TrayState::Training, TrayState::Waiting, TrayState::Paused, TrayState::Error,
                                TrayState::Offline};
    for (int size : {16, 22, 48}) {
        QList<QImage> images;
        for (TrayState state : states) {
            const QImage image = stateIcon(state).pixmap(size, size).toImage();
            QVERIFY2(!image.isNull(), qPrintable(trayStateName(state)));
            QCOMPARE(image.size(), QSize(size, size));
            for (const QImage& other : std::as_const(images))
                QVERIFY2(image != other, qPrintable(trayStateName(state)));
            images << image;
        }
    }
    QVERIFY(!appIcon().pixmap(64, 64).isNull());
}

void TestTrayController::withATrayAutostartShowsNoWindow()
{
    Harness h(true, true);
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    QTRY_VERIFY(h.app->link().isConnected());
    QVERIFY(!h.app->window().isVisible());
    QVERIFY(!QApplication::quitOnLastWindowClosed());
    // "Open Gleaner" shows it; closing it only hides it.
    h.app->actions().openWindow()->trigger();
    QVERIFY(h.app->window().isVisible());
    h.app->window().close();
    QVERIFY(!h.app->window().isVisible());
}

void TestTrayController::withoutATrayTheWindowOpensAndNotificationsTell()
{
    Harness h(false, true);
    h.agent.setStatus(realisticStatus(h.dir->path()));
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    TrayController* tray = h.app->tray();
    QVERIFY(tray && !tray->hasTray());
    QVERIFY(!tray->trayIcon());
    // Even started at login: without a tray the window is the only way to see Gleaner.
    QVERIFY(h.app->window().isVisible());
    QVERIFY(QApplication::quitOnLastWindowClosed());
    QTRY_COMPARE(h.app->link().state(), QStringLiteral("training"));
    QTRY_COMPARE(h.agent.server()->subscriberCount(), 1);

    pushState(h.agent, QStringLiteral("error"), QStringLiteral("The disk is full; free 2 GB in /home."),
              QStringLiteral("error"));
    QTRY_COMPARE(h.notifier.shown.size(), 1);
    QCOMPARE(h.notifier.shown.at(0).summary, QStringLiteral("Gleaner needs your attention"));
    QCOMPARE(h.notifier.shown.at(0).body, QStringLiteral("The disk is full; free 2 GB in /home."));
    QCOMPARE(h.notifier.shown.at(0).urgency, Notifier::Urgency::Critical);

    // A pause by the owner's rules, once per cause.
    pushState(h.agent, QStringLiteral("waiting"), QStringLiteral("Paused: on battery"),
              QStringLiteral("on_battery"));
    QTRY_COMPARE(h.notifier.shown.size(), 2);
    QCOMPARE(h.notifier.shown.at(1).summary, QStringLiteral("Gleaner paused"));
    pushState(h.agent, QStringLiteral("training"), QStringLiteral("idle"), QStringLiteral("computing"));
    pushState(h.agent, QStringLiteral("waiting"), QStringLiteral("Paused: on battery"),
              QStringLiteral("on_battery"));
    QTRY_COMPARE(h.app->link().reasonCode(), QStringLiteral("on_battery"));
    QTest::qWait(100);
    QCOMPARE(h.notifier.shown.size(), 2);

    // The agent goes away: offline.
    h.agent.stop();
    QTRY_COMPARE(h.notifier.shown.size(), 3);
    QCOMPARE(h.notifier.shown.at(2).summary, QStringLiteral("Gleaner is offline"));
}

void TestTrayController::aNotificationThatFailsLandsInTheWindow()
{
    Harness h(false);
    h.notifier.failing = true;
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    QTRY_VERIFY(h.app->link().isConnected());
    QTRY_COMPARE(h.agent.server()->subscriberCount(), 1);
    pushState(h.agent, QStringLiteral("error"), QStringLiteral("The disk is full."), QStringLiteral("error"));
    QTRY_COMPARE(h.app->window().noticeText(),
                 QStringLiteral("Gleaner needs your attention: The disk is full."));

    // A refused action reaches the window too.
    h.app->link().snooze(0);
    QTRY_VERIFY2(h.app->window().noticeText().startsWith(QStringLiteral("Could not snooze the agent")),
                 qPrintable(h.app->window().noticeText()));
}

void TestTrayController::quitLeavesTheAgentRunning()
{
    Harness h(true);
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    QTRY_VERIFY(h.app->link().isConnected());
    QSignalSpy quit(h.app.get(), &TrayApp::quitRequested);
    h.app->actions().quit()->trigger();
    QCOMPARE(quit.size(), 1);
    h.app.reset();
    QTest::qWait(100);
    QVERIFY(h.agent.isRunning());
    const QStringList sent = h.agent.receivedCommands();
    QVERIFY2(!sent.contains(QStringLiteral("finish")) && !sent.contains(QStringLiteral("pause")),
             qPrintable(sent.join(u' ')));
}

void TestTrayController::aFolderNotEnrolledOpensTheFirstRunDialog()
{
    Harness h(true, false, false);
    h.launcher.onStart = [&](const QString& dir) { return h.agent.start(dir); };
    h.app->start();
    QVERIFY(h.app->window().isVisible());
    QVERIFY(h.app->firstRunDialog());
    QVERIFY(h.app->firstRunDialog()->isVisible());
    QCOMPARE(h.app->link().reasonCode(), QStringLiteral("not_enrolled"));
    QVERIFY(!h.app->actions().pauseResume()->isEnabled());
    QVERIFY(h.launcher.started.isEmpty());

    // The dialog enrolled the folder: the agent is started for it.
    QVERIFY(markEnrolled(h.dir->path()));
    Q_EMIT h.app->firstRunDialog()->enrolled(QStringLiteral("a-7f3a"));
    QCOMPARE(h.launcher.started, QStringList{h.dir->path()});
    QTRY_VERIFY(h.app->link().isConnected());
    QTRY_COMPARE(h.app->link().state(), QStringLiteral("waiting"));
}

void TestTrayController::preferencesOpensTheDialog()
{
    Harness h(true);
    QVERIFY(h.agent.start(h.dir->path()).ok());
    h.app->start();
    QTRY_VERIFY(h.app->link().isConnected());
    QTRY_VERIFY(h.app->actions().preferences()->isEnabled());
    h.agent.clearRequests();
    h.app->actions().preferences()->trigger();
    QPointer<QDialog> dialog = h.app->preferencesDialog();
    QVERIFY(dialog);
    QVERIFY(dialog->isVisible());
    // It asks the agent itself, over the tray app's connection.
    QVERIFY(h.agent.waitForRequest(QStringLiteral("preferences")));
    // Chosen again: the same window comes forward.
    h.app->actions().preferences()->trigger();
    QCOMPARE(h.app->preferencesDialog(), dialog.data());
    dialog->close();
    QTRY_VERIFY(!dialog);
}

void TestTrayController::atLoginTheTrayMayComeLater()
{
    // The panel comes up a moment after the tray app: it waits for it rather than opening the window.
    {
        Harness h(true, true);
        int asked = 0;
        TrayAppOptions options;
        options.dataDir = h.dir->path();
        options.autostart = true;
        options.trayWaitMs = 5000;
        options.trayAvailable = [&asked] { return ++asked > 1; };
        options.notifier = &h.notifier;
        options.launcher = &h.launcher;
        options.startGraceMs = 60000;
        TrayApp app(options);
        app.start();
        QVERIFY(!app.tray());
        QTRY_VERIFY(app.tray());
        QVERIFY(app.tray()->hasTray());
        QVERIFY(!app.window().isVisible());
    }
    // No panel at all: after the wait, the window.
    {
        Harness h(false, true);
        TrayAppOptions options;
        options.dataDir = h.dir->path();
        options.autostart = true;
        options.trayWaitMs = 1000;
        options.trayAvailable = [] { return false; };
        options.notifier = &h.notifier;
        options.launcher = &h.launcher;
        options.startGraceMs = 60000;
        TrayApp app(options);
        app.start();
        QVERIFY(!app.tray());
        QTRY_VERIFY(app.tray());
        QVERIFY(!app.tray()->hasTray());
        QVERIFY(app.window().isVisible());
    }
}

QTEST_MAIN(TestTrayController)
#include "TestTrayController.moc"
