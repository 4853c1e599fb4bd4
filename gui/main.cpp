// gleaner: the volunteer's tray app. Parses the command line and starts TrayApp; everything else is in
// gleaner_gui.
#include "AgentPaths.h"
#include "SingleInstance.h"
#include "StateIcons.h"
#include "TrayApp.h"
#include "config/AgentConfig.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QTextStream>

using namespace gleaner;

namespace {

const char kSessionSocket[] = "/run/gleaner/sessions.sock";

struct Options
{
    gui::TrayAppOptions app;
    int exitCode = -1; // >= 0: end now with it
};

// The command line, read before any window system is needed, so --help and --version work anywhere.
Options parseCommandLine(int argc, char** argv)
{
    QCoreApplication core(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("gleaner"));
    QCoreApplication::setApplicationVersion(QStringLiteral(GLEANER_VERSION));
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Gleaner's tray app: shows what this computer's Gleaner agent does and why, and lets you "
        "pause it, snooze it and set when it may compute. It starts the agent when it is not "
        "running; quitting it leaves the agent running."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption({QStringLiteral("data-dir"),
                      QStringLiteral("The agent's folder (default: %1).")
                          .arg(agent::defaultDataDir(agent::AgentScope::User)),
                      QStringLiteral("DIR")});
    parser.addOption(
        {QStringLiteral("system"),
         QStringLiteral("Show this computer's Gleaner service (the system agent an organisation runs) instead of "
                        "your own agent, read-only (at login this is chosen by itself when you have no agent of "
                        "your own and the service runs).")});
    parser.addOption({QStringLiteral("session-socket"),
                      QStringLiteral("With --system: the service's session socket (default %1).")
                          .arg(QLatin1StringView(kSessionSocket)),
                      QStringLiteral("PATH")});
    parser.addOption(
        {QStringLiteral("autostart"),
         QStringLiteral("Started at login: only the tray icon, no window (unless there is no tray).")});
    parser.process(core); // --help, --version and unknown options end here
    Options options;
    if (!parser.positionalArguments().isEmpty()) {
        QTextStream(stderr) << "gleaner: unexpected argument \"" << parser.positionalArguments().first()
                            << "\"\nRun `gleaner --help` for usage.\n";
        options.exitCode = 2;
        return options;
    }
    options.app.dataDir = parser.isSet(QStringLiteral("data-dir"))
                              ? QDir(parser.value(QStringLiteral("data-dir"))).absolutePath()
                              : agent::defaultDataDir(agent::AgentScope::User);
    options.app.autostart = parser.isSet(QStringLiteral("autostart"));
    if (parser.isSet(QStringLiteral("system")) || parser.isSet(QStringLiteral("session-socket")))
        options.app.systemSocket = parser.isSet(QStringLiteral("session-socket"))
                                       ? parser.value(QStringLiteral("session-socket"))
                                       : QString::fromLatin1(kSessionSocket);
    // At login the panel may come up after this app.
    options.app.trayWaitMs = options.app.autostart ? 30000 : 0;

    // The autostart entry is installed for every user of the machine; one who never enrolled is not asked at
    // each login.
    // A desk user on a machine whose organisation runs the system agent: show that one.
    if (options.app.autostart && options.app.systemSocket.isEmpty() &&
        !agent::AgentConfig::isEnrolled(options.app.dataDir) && QFileInfo::exists(QString::fromLatin1(kSessionSocket)))
        options.app.systemSocket = QString::fromLatin1(kSessionSocket);
    if (options.app.autostart && options.app.systemSocket.isEmpty() &&
        !agent::AgentConfig::isEnrolled(options.app.dataDir)) {
        QTextStream(stderr)
            << "gleaner: " << options.app.dataDir
            << " is not enrolled with a coordinator; nothing to do at login. Run `gleaner` to "
               "enroll this computer.\n";
        options.exitCode = 0;
        return options;
    }
    if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") &&
        qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        QTextStream(stderr)
            << "gleaner: there is no graphical session here (neither DISPLAY nor WAYLAND_DISPLAY "
               "is set); run it from your desktop, or use `gleaner-agent status` in a terminal.\n";
        options.exitCode = 1;
    }
    return options;
}

} // namespace

int main(int argc, char** argv)
{
    const Options options = parseCommandLine(argc, argv);
    if (options.exitCode >= 0)
        return options.exitCode;

    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("gleaner"));
    QApplication::setApplicationDisplayName(QStringLiteral("Gleaner"));
    QApplication::setApplicationVersion(QStringLiteral(GLEANER_VERSION));
    QApplication::setDesktopFileName(QStringLiteral("gleaner"));
    QApplication::setWindowIcon(gui::appIcon());

    gui::SingleInstance instance(options.app.systemSocket.isEmpty() ? options.app.dataDir : options.app.systemSocket);
    if (!instance.claim()) {
        QTextStream(stdout) << "gleaner: already running for " << options.app.dataDir
                            << "; showing its window.\n";
        return 0;
    }

    gui::TrayApp tray(options.app);
    QObject::connect(&tray, &gui::TrayApp::quitRequested, &app, &QApplication::quit);
    QObject::connect(&instance, &gui::SingleInstance::activated, &tray, &gui::TrayApp::showWindow);
    // In tray mode the last window closing does not end the app; TrayApp switches that on without a tray.
    QApplication::setQuitOnLastWindowClosed(false);
    tray.start();
    return app.exec();
}
