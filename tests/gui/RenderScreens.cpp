// gleaner_render_screens OUTDIR: draws the tray app's windows, filled from a realistic agent (a FakeAgent on
// a real control socket), into PNG files for a person to look at: the main window (training, and not
// enrolled), the tray menu, the state icons at panel sizes on light and dark panels, the first-run dialog
// with a fetched certificate, and the preferences dialog's simple and advanced pages with a preference locked
// by an organisation. Run it on a real X server: tests/tools/with-xvfb.sh (ctest -R render_screens).
#include "AgentActions.h"
#include "AgentLink.h"
#include "FakeAgent.h"
#include "FirstRunDialog.h"
#include "GuiTestSupport.h"
#include "MainWindow.h"
#include "PreferencesDialog.h"
#include "StateIcons.h"
#include "TrayController.h"
#include "control/ControlClient.h"
#include "control/ControlProtocol.h"
#include "control/ControlServer.h"
#include "crypto/TlsCertificate.h"

#include <QApplication>
#include <QCheckBox>
#include <QDir>
#include <QJsonArray>
#include <QLineEdit>
#include <QMenu>
#include <QPainter>
#include <QPushButton>
#include <QSslKey>
#include <QSslSocket>
#include <QTabWidget>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QTest>
#include <QTextStream>

using namespace gleaner;
using namespace gleaner::gui;
using namespace gleaner::gui::test;

namespace {

QDir g_out;
int g_failures = 0;

void save(QWidget& widget, const QString& name)
{
    QTest::qWait(150); // let the last layout and paint events run
    const QString path = g_out.filePath(name + QStringLiteral(".png"));
    if (!widget.grab().save(path)) {
        QTextStream(stderr) << "gleaner_render_screens: cannot write " << path << "\n";
        ++g_failures;
        return;
    }
    QTextStream(stdout) << path << "\n";
}

bool waitFor(const std::function<bool()>& condition, const char* what)
{
    if (QTest::qWaitFor(condition, 10000))
        return true;
    QTextStream(stderr) << "gleaner_render_screens: timed out waiting for " << what << "\n";
    ++g_failures;
    return false;
}

void push(FakeAgent& agent, const QString& name, const QJsonObject& members)
{
    agent.pushEvent(agent::controlEvent(name, members));
}

QJsonObject logLine(const QString& level, const QString& message)
{
    return {{QStringLiteral("level"), level}, {QStringLiteral("message"), message}};
}

void renderIcons()
{
    const TrayState states[] = {TrayState::Training, TrayState::Waiting, TrayState::Paused, TrayState::Error,
                                TrayState::Offline};
    const int sizes[] = {16, 22, 24, 32, 48};
    const int cell = 56;
    QImage image(cell * 5, cell * 5 * 2, QImage::Format_ARGB32);
    QPainter painter(&image);
    for (int background = 0; background < 2; ++background) {
        painter.fillRect(0, background * cell * 5, cell * 5, cell * 5,
                         background ? QColor(0x2b, 0x2b, 0x2b) : QColor(0xf2, 0xf2, 0xf2));
        for (int row = 0; row < 5; ++row)
            for (int column = 0; column < 5; ++column) {
                const int size = sizes[column];
                const QPixmap pixmap = stateIcon(states[row]).pixmap(size, size);
                painter.drawPixmap(column * cell + (cell - size) / 2,
                                   background * cell * 5 + row * cell + (cell - size) / 2, pixmap);
            }
    }
    painter.end();
    const QString path = g_out.filePath(QStringLiteral("icons.png"));
    if (!image.save(path))
        ++g_failures;
    QTextStream(stdout) << path << "\n";
    // The panel sizes blown up pixel for pixel, to judge what a 16 or 22 px panel really shows.
    QImage zoomed(5 * (16 + 22 + 8) * 4, 22 * 4, QImage::Format_ARGB32);
    zoomed.fill(QColor(0xf2, 0xf2, 0xf2));
    QPainter zoomPainter(&zoomed);
    int x = 0;
    for (TrayState state : states)
        for (int size : {16, 22}) {
            zoomPainter.drawImage(QRect(x, 0, size * 4, size * 4),
                                  stateIcon(state).pixmap(size, size).toImage());
            x += (size + 4) * 4;
        }
    zoomPainter.end();
    if (!zoomed.save(g_out.filePath(QStringLiteral("icons-zoomed.png"))))
        ++g_failures;
    const QString app = g_out.filePath(QStringLiteral("app-icon.png"));
    if (!appIcon().pixmap(128, 128).save(app))
        ++g_failures;
    QTextStream(stdout) << app << "\n";
}

void renderMainWindow(const QString& dataDir)
{
    FakeAgent agent;
    QJsonObject status = realisticStatus(dataDir);
    // The workers' sandbox as a Debian 12 kernel (Landlock ABI 2) gives it.
    status.insert(QStringLiteral("sandbox"),
                  QJsonObject{{QStringLiteral("summary"),
                               QStringLiteral("landlock (ABI 2), seccomp, network namespace, memory cap 2048 MB; "
                                              "missing: landlock TCP rules, landlock scopes")}});
    agent.setStatus(status);
    if (const Status started = agent.start(dataDir); !started) {
        QTextStream(stderr) << "gleaner_render_screens: " << started.error() << "\n";
        ++g_failures;
        return;
    }
    AgentLink link(dataDir, nullptr);
    AgentActions actions(link);
    MainWindow window(link, actions);
    TrayController tray(link, actions, false, nullptr);
    link.start();
    window.show();
    if (!waitFor([&] { return link.state() == u"training" && agent.server()->subscriberCount() == 1; },
                 "the main window to connect"))
        return;
    push(agent, QStringLiteral("log"),
         logLine(QStringLiteral("info"),
                 QStringLiteral("leased 2 subtasks of fashion-cnn (epoch 3, shards 12 and 13)")));
    push(agent, QStringLiteral("log"),
         logLine(QStringLiteral("warning"),
                 QStringLiteral("downloading shard 13 failed (connection reset); retrying in 2 s")));
    push(agent, QStringLiteral("log"),
         logLine(QStringLiteral("info"), QStringLiteral("the computer has been idle for 12 min: training")));
    push(agent, QStringLiteral("progress"),
         {{QStringLiteral("lease_id"), QStringLiteral("L-17")},
          {QStringLiteral("step"), 655},
          {QStringLiteral("of"), 1000},
          {QStringLiteral("loss"), 0.4087},
          {QStringLiteral("samples_per_s"), 508.9},
          {QStringLiteral("eta_seconds"), 231}});
    waitFor([&] { return link.log().size() >= 4; }, "the log events");
    save(window, QStringLiteral("main-window"));
    tray.menu()->adjustSize();
    save(*tray.menu(), QStringLiteral("tray-menu"));

    push(agent, QStringLiteral("state"),
         {{QStringLiteral("state"), QStringLiteral("waiting")},
          {QStringLiteral("reason"), QStringLiteral("Paused: you are using the computer")},
          {QStringLiteral("reason_code"), QStringLiteral("user_active")}});
    push(agent, QStringLiteral("coordinator"),
         {{QStringLiteral("reachable"), false},
          {QStringLiteral("last_error"),
           QStringLiteral("coord.example:8443: connection timed out after 30 s")},
          {QStringLiteral("next_try_ms"), 45000}});
    waitFor([&] { return link.reasonCode() == u"user_active"; }, "the waiting state");
    save(window, QStringLiteral("main-window-waiting"));

    // The coordinator refuses this computer work until its admin lifts a quarantine.
    const QString why = QStringLiteral("this agent is quarantined: 3 refused results in a row (the last: the result "
                                       "moves the weights too far); the coordinator's admin can lift it");
    push(agent, QStringLiteral("coordinator"),
         QJsonObject{{QStringLiteral("reachable"), true}, {QStringLiteral("last_error"), QJsonValue(QJsonValue::Null)}});
    push(agent, QStringLiteral("coordinator"), QJsonObject{{QStringLiteral("quarantined"), why}});
    push(agent, QStringLiteral("state"),
         {{QStringLiteral("state"), QStringLiteral("waiting")},
          {QStringLiteral("reason"), QString(QStringLiteral("The coordinator gives this agent no work: ") + why)},
          {QStringLiteral("reason_code"), QStringLiteral("quarantined")}});
    waitFor([&] { return link.reasonCode() == u"quarantined"; }, "the quarantined state");
    save(window, QStringLiteral("main-window-quarantined"));
}

// A desk user on a shared workstation: the tray app shows the organisation's system agent, read-only.
void renderSystemAgent(const QString& agentDir, const QString& userDir)
{
    FakeAgent agent;
    QJsonObject status = realisticStatus(agentDir);
    status.insert(QStringLiteral("read_only"), true);
    status.insert(QStringLiteral("state"), QStringLiteral("waiting"));
    status.insert(QStringLiteral("reason"), QStringLiteral("Paused: someone is using the computer (idle 4 s, in session 3)"));
    status.insert(QStringLiteral("reason_code"), QStringLiteral("user_active"));
    agent.setStatus(status);
    if (const Status started = agent.start(agentDir); !started) {
        QTextStream(stderr) << "gleaner_render_screens: " << started.error() << "\n";
        ++g_failures;
        return;
    }
    AgentLink link(userDir, nullptr);
    link.watchSystemAgent(agent.server()->socketPath());
    AgentActions actions(link);
    MainWindow window(link, actions);
    TrayController tray(link, actions, false, nullptr);
    link.start();
    window.show();
    if (!waitFor([&] { return link.reasonCode() == u"user_active"; }, "the system agent's state"))
        return;
    save(window, QStringLiteral("main-window-system-agent"));
    tray.menu()->adjustSize();
    save(*tray.menu(), QStringLiteral("tray-menu-system-agent"));
}

void renderNotEnrolled(const QString& dataDir)
{
    AgentLink link(dataDir, nullptr);
    AgentActions actions(link);
    MainWindow window(link, actions);
    link.setStartGraceMs(10);
    link.start();
    window.show();
    waitFor([&] { return link.reasonCode() == u"not_enrolled"; }, "the not-enrolled state");
    save(window, QStringLiteral("main-window-not-enrolled"));
}

class TlsServer : public QTcpServer
{
public:
    explicit TlsServer(TlsIdentity identity) : m_identity(std::move(identity)) {}

protected:
    void incomingConnection(qintptr descriptor) override
    {
        auto* socket = new QSslSocket(this);
        socket->setSocketDescriptor(descriptor);
        socket->setLocalCertificate(QSslCertificate(m_identity.certificatePem));
        socket->setPrivateKey(QSslKey(m_identity.privateKeyPem, QSsl::Ec));
        socket->startServerEncryption();
    }

private:
    TlsIdentity m_identity;
};

void renderFirstRun(const QString& dataDir)
{
    auto identity =
        TlsCertificate::generateSelfSigned({QStringLiteral("localhost"), QStringLiteral("127.0.0.1")});
    if (!identity) {
        ++g_failures;
        return;
    }
    TlsServer server(*identity);
    server.listen(QHostAddress::LocalHost);
    FirstRunDialog dialog(dataDir, QStringLiteral("/usr/bin/gleaner-agent"));
    dialog.show();
    save(dialog, QStringLiteral("first-run-empty"));
    dialog.urlEdit()->setText(QStringLiteral("https://127.0.0.1:%1").arg(server.serverPort()));
    dialog.tokenEdit()->setText(QStringLiteral("gt_4f9c2a7e81d0b3c5"));
    dialog.fetchButton()->click();
    if (!waitFor([&] { return !dialog.isBusy() && !dialog.fingerprintText().isEmpty(); }, "the certificate"))
        return;
    dialog.comparedCheckBox()->setChecked(true);
    dialog.adjustSize();
    save(dialog, QStringLiteral("first-run-certificate"));
}

void renderPreferences(const QString& dataDir)
{
    FakeAgent agent;
    agent.setLocked({QStringLiteral("idle_seconds")});
    agent.setValues({{QStringLiteral("idle_seconds"), 600},
                     {QStringLiteral("schedule"),
                      QJsonArray{QStringLiteral("mon-fri 18:00-08:00"), QStringLiteral("sat,sun")}}});
    if (!agent.start(dataDir)) {
        ++g_failures;
        return;
    }
    agent::ControlClient client(dataDir);
    client.setSubscribed(true);
    client.start();
    PreferencesDialog dialog(client);
    dialog.show();
    if (!waitFor([&] { return dialog.isLoaded(); }, "the preferences"))
        return;
    auto* tabs = dialog.findChild<QTabWidget*>();
    if (!tabs) {
        ++g_failures;
        return;
    }
    tabs->setCurrentIndex(0);
    save(dialog, QStringLiteral("preferences-simple"));
    tabs->setCurrentIndex(1);
    save(dialog, QStringLiteral("preferences-advanced"));
}

} // namespace

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("gleaner"));
    if (argc != 2) {
        QTextStream(stderr) << "usage: gleaner_render_screens OUTDIR\n";
        return 2;
    }
    g_out = QDir(QString::fromLocal8Bit(argv[1]));
    if (!g_out.mkpath(QStringLiteral("."))) {
        QTextStream(stderr) << "gleaner_render_screens: cannot create " << g_out.path() << "\n";
        return 1;
    }
    QLocale::setDefault(QLocale(QLocale::English, QLocale::UnitedStates));
    QTemporaryDir scratch;
    for (const char* folder : {"training", "new", "prefs", "system", "desk"})
        QDir(scratch.path()).mkpath(QString::fromLatin1(folder));
    renderIcons();
    renderMainWindow(scratch.filePath(QStringLiteral("training")));
    renderNotEnrolled(scratch.filePath(QStringLiteral("new")));
    renderSystemAgent(scratch.filePath(QStringLiteral("system")), scratch.filePath(QStringLiteral("desk")));
    renderFirstRun(scratch.filePath(QStringLiteral("new")));
    renderPreferences(scratch.filePath(QStringLiteral("prefs")));
    return g_failures == 0 ? 0 : 1;
}
