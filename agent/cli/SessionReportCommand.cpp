#include "cli/SessionReportCommand.h"

#include "cli/CliErrors.h"
#include "control/ControlConnection.h"
#include "idle/SystemIdleProbe.h"

#include <QCommandLineParser>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QTextStream>
#include <QThread>

namespace gleaner::agent::cli {

namespace {
const QString kCommand = QStringLiteral("session-report");
}

int sessionReportCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral(
        "Reports this session's input idle time to the system agent of a shared workstation, every few seconds, "
        "so that it pauses while anyone uses the machine. Started in each graphical session by the autostart "
        "entry gleaner-session.desktop; waits quietly while no system agent listens."));
    parser.addHelpOption();
    parser.addOption({QStringLiteral("socket"), QStringLiteral("The system agent's session socket (default "
                                                               "/run/gleaner/sessions.sock)."),
                      QStringLiteral("PATH"), QStringLiteral("/run/gleaner/sessions.sock")});
    parser.addOption({QStringLiteral("session"), QStringLiteral("This session's id (default $XDG_SESSION_ID)."),
                      QStringLiteral("ID")});
    parser.addOption({QStringLiteral("idle-source"),
                      QStringLiteral("Where this session's idle time comes from: auto, logind, mutter, screensaver "
                                     "or x11 (default auto)."),
                      QStringLiteral("SOURCE"), QStringLiteral("auto")});
    parser.addOption({QStringLiteral("interval"), QStringLiteral("Seconds between reports, 1 to 60 (default 5)."),
                      QStringLiteral("SECONDS"), QStringLiteral("5")});
    parser.addOption({QStringLiteral("once"), QStringLiteral("Report once, print the agent's answer, and exit.")});
    if (!parser.parse(arguments))
        return usageError(kCommand, parser.errorText());
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    bool ok = false;
    const int interval = parser.value(QStringLiteral("interval")).toInt(&ok);
    if (!ok || interval < 1 || interval > 60)
        return usageError(kCommand, QStringLiteral("--interval takes 1 to 60 seconds, not \"%1\"")
                                        .arg(parser.value(QStringLiteral("interval"))));
    const QString source = parser.value(QStringLiteral("idle-source"));
    if (auto valid = SystemIdleProbe::checkPreference(source); !valid || source == u"sessions" || source == u"none")
        return usageError(kCommand, QStringLiteral("--idle-source takes auto, logind, mutter, screensaver or x11, "
                                                   "not \"%1\"")
                                        .arg(source));
    const QString session = parser.isSet(QStringLiteral("session")) ? parser.value(QStringLiteral("session"))
                                                                     : qEnvironmentVariable("XDG_SESSION_ID");
    if (!QRegularExpression(QStringLiteral("^[A-Za-z0-9_-]{1,64}$")).match(session).hasMatch())
        return usageError(kCommand, session.isEmpty()
                                        ? QStringLiteral("no $XDG_SESSION_ID: run this inside a login session, or "
                                                         "pass --session ID")
                                        : QStringLiteral("\"%1\" is not a session id").arg(session));
    const QString socketPath = parser.value(QStringLiteral("socket"));
    const bool once = parser.isSet(QStringLiteral("once"));

    SystemIdleProbe probe(source);
    std::unique_ptr<ControlConnection> agent;
    QString lastProblem;
    QString lastState;
    QTextStream err(stderr);
    QTextStream out(stdout);
    for (;;) {
        const IdleObservation seen = probe.sample();
        if (!agent) {
            auto opened = ControlConnection::openSocket(socketPath, 2000);
            if (opened)
                agent = std::move(*opened);
            else if (once) {
                err << "gleaner-agent session-report: " << opened.error() << "\n";
                return 1;
            } else if (opened.error() != lastProblem) {
                err << "gleaner-agent session-report: " << opened.error() << " (trying again every " << interval
                    << " s)\n";
                err.flush();
                lastProblem = opened.error();
            }
        }
        if (agent) {
            // An inhibitor (a video, a presentation) means someone is there: idle 0.
            const qint64 idleMs = !seen.known ? 0 : seen.inhibited ? 0 : seen.idleMs;
            const QString from = !seen.known     ? QStringLiteral("unknown")
                                 : seen.inhibited ? QStringLiteral("inhibitor")
                                                  : seen.source;
            auto reply = agent->call(QStringLiteral("report_idle"),
                                     QJsonObject{{QStringLiteral("session"), session},
                                                 {QStringLiteral("idle_ms"), double(idleMs)},
                                                 {QStringLiteral("source"), from}});
            if (once) {
                if (!reply) {
                    err << "gleaner-agent session-report: " << reply.error() << "\n";
                    return 1;
                }
                out << QJsonDocument(*reply).toJson(QJsonDocument::Compact) << "\n";
                return 0;
            }
            if (!reply) {
                if (reply.error() != lastProblem)
                    err << "gleaner-agent session-report: " << reply.error() << "\n";
                lastProblem = reply.error();
                agent.reset(); // connect again at the next report
            } else {
                lastProblem.clear();
                const QString state = reply->value(QStringLiteral("state")).toString();
                if (state != lastState)
                    out << "the system agent is " << state << "\n";
                out.flush();
                lastState = state;
            }
        }
        QThread::sleep(unsigned(interval));
    }
}

} // namespace gleaner::agent::cli
