#include "cli/ControlCommands.h"

#include "cli/CliErrors.h"

#include "AgentPaths.h"
#include "cli/StatusText.h"
#include "control/ControlConnection.h"

#include <QCommandLineParser>
#include <QDateTime>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>
#include <QTime>

#include <cmath>

namespace gleaner::agent::cli {
namespace {

struct CommandInfo
{
    const char* name;
    const char* description;
};

const CommandInfo kCommands[] = {
    {"status",
     "Shows what the gleaner-agent of this machine does: its state and why, the coordinator, each "
     "subtask's progress, and the totals. With --follow, then prints each change as it happens until "
     "Ctrl-C (the agent pushes them; nothing is polled)."},
    {"pause",
     "Pauses the agent: training stops between two mini-batches and nothing is lost; `resume` continues."},
    {"resume", "Lets a paused agent train again."},
    {"finish", "Lets the agent finish the subtasks it holds without leasing new ones; it exits when they are "
               "done. With --now it leaves at once instead: each subtask is checkpointed and handed back to the "
               "coordinator, which gives it to the next agent to resume."},
    {"snooze",
     "Pauses the agent for MINUTES (default 60), after which it resumes by itself; `resume` ends it "
     "early."},
};

QString compact(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

// Subscribes, prints the current status, then every event until the agent goes away.
int follow(const QString& dataDir, ControlConnection& connection, bool json)
{
    const QString command = QStringLiteral("status");
    if (auto subscribed = connection.call(QStringLiteral("subscribe")); !subscribed)
        return commandFailure(command, subscribed.error());
    // Asked after subscribing, so no change falls between the status and the first event.
    auto status = connection.call(command);
    if (!status)
        return commandFailure(command, status.error());
    QString lastState = status->value(QStringLiteral("state")).toString();
    if (json)
        QTextStream(stdout) << compact(*status) << "\n";
    else
        QTextStream(stdout) << formatStatus(*status, QDateTime::currentMSecsSinceEpoch())
                            << "\nFollowing the gleaner-agent for " << dataDir << "; Ctrl-C stops.\n";
    while (true) {
        auto event = connection.nextEvent();
        if (!event) {
            // After `finish` the agent exits on purpose: following it to the end is a success.
            if (lastState == u"finishing" || lastState == u"stopped") {
                if (!json)
                    QTextStream(stdout) << "The gleaner-agent for " << dataDir << " has stopped.\n";
                return 0;
            }
            return commandFailure(command, event.error());
        }
        if (event->value(QStringLiteral("event")).toString() == u"state")
            lastState = event->value(QStringLiteral("state")).toString();
        if (json)
            QTextStream(stdout) << compact(*event) << "\n";
        else
            QTextStream(stdout) << QTime::currentTime().toString(QStringLiteral("HH:mm:ss")) << "  "
                                << formatEvent(*event) << "\n";
    }
}

QString describeResult(const QString& command, const QString& dataDir, const QJsonObject& result)
{
    const QString state = result.value(QStringLiteral("state")).toString();
    QString line =
        QStringLiteral("The gleaner-agent for %1 is %2").arg(dataDir, state.isEmpty() ? command : state);
    if (const QString reason = result.value(QStringLiteral("reason")).toString(); !reason.isEmpty())
        line += QStringLiteral(" (%1)").arg(reason);
    line += u'.';
    if (command == u"pause")
        line += QStringLiteral(" Nothing is lost; `gleaner-agent resume` continues.");
    else if (command == u"snooze")
        line += QStringLiteral(" It resumes by itself at %1; `gleaner-agent resume` ends the snooze early.")
                    .arg(QDateTime::fromMSecsSinceEpoch(
                             qint64(result.value(QStringLiteral("until_ms")).toDouble()))
                             .toString(QStringLiteral("HH:mm")));
    else if (command == u"finish" && result.value(QStringLiteral("leaving")).toBool())
        line += QStringLiteral(" It hands the subtasks it holds back to the coordinator, with their checkpoints, "
                               "and exits.");
    else if (command == u"finish")
        line +=
            QStringLiteral(" It completes the subtasks it holds, leases no new ones, and exits when they are "
                           "done.");
    return line;
}

} // namespace

bool isControlCommand(const QString& command)
{
    for (const CommandInfo& info : kCommands)
        if (command == QLatin1StringView(info.name))
            return true;
    return false;
}

int controlCommand(const QStringList& arguments)
{
    const QString command = arguments.value(0);
    const CommandInfo* info = nullptr;
    for (const CommandInfo& candidate : kCommands)
        if (command == QLatin1StringView(candidate.name))
            info = &candidate;
    if (!info)
        return usageError(command, QStringLiteral("not a control command"));
    const bool isStatus = command == u"status";

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QString::fromUtf8(info->description) +
        QStringLiteral(" Without --data-dir this is the agent of %1.").arg(defaultDataDir(AgentScope::User)));
    parser.addHelpOption();
    parser.addOption(
        {QStringLiteral("data-dir"), QStringLiteral("The agent's folder."), QStringLiteral("DIR")});
    parser.addOption(
        {QStringLiteral("system"), QStringLiteral("The system service's agent, /var/lib/gleaner.")});
    parser.addOption({QStringLiteral("json"), isStatus
                                                  ? QStringLiteral("Print the agent's status object as JSON "
                                                                   "(with --follow, then each event, one "
                                                                   "compact JSON object per line).")
                                                  : QStringLiteral("Print the agent's reply as JSON.")});
    if (isStatus)
        parser.addOption(
            {QStringLiteral("follow"), QStringLiteral("Keep printing each change until Ctrl-C.")});
    if (command == u"finish")
        parser.addOption({QStringLiteral("now"),
                          QStringLiteral("Hand the subtasks back (with their checkpoints) and exit, instead of "
                                         "finishing them.")});
    const bool isSnooze = command == u"snooze";
    if (isSnooze)
        parser.addPositionalArgument(QStringLiteral("MINUTES"),
                                     QStringLiteral("How long to pause, 1 to 1440 (default 60)."));
    if (!parser.parse(arguments))
        return usageError(command, parser.errorText());
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    QJsonObject args;
    if (command == u"finish" && parser.isSet(QStringLiteral("now")))
        args.insert(QStringLiteral("now"), true);
    const QStringList positional = parser.positionalArguments();
    if (isSnooze && positional.size() <= 1) {
        bool ok = true;
        const double minutes = positional.isEmpty() ? 60.0 : positional.first().toDouble(&ok);
        if (!ok || !std::isfinite(minutes) || minutes < 1 || minutes > 1440)
            return usageError(command, QStringLiteral("MINUTES must be a number from 1 to 1440, not \"%1\"")
                                           .arg(positional.value(0)));
        args.insert(QStringLiteral("seconds"), qRound64(minutes * 60));
    } else if (!positional.isEmpty()) {
        return usageError(command, QStringLiteral("unexpected argument \"%1\"").arg(positional.first()));
    }

    const QString dataDir =
        parser.isSet(QStringLiteral("data-dir"))
            ? parser.value(QStringLiteral("data-dir"))
            : defaultDataDir(parser.isSet(QStringLiteral("system")) ? AgentScope::System : AgentScope::User);
    const bool json = parser.isSet(QStringLiteral("json"));
    auto connection = ControlConnection::open(dataDir);
    if (!connection)
        return commandFailure(command, connection.error());
    if (isStatus && parser.isSet(QStringLiteral("follow")))
        return follow(dataDir, **connection, json);

    auto result = (*connection)->call(command, args);
    if (!result)
        return commandFailure(command, result.error());
    if (json)
        QTextStream(stdout) << QJsonDocument(*result).toJson(QJsonDocument::Indented);
    else if (isStatus)
        QTextStream(stdout) << formatStatus(*result, QDateTime::currentMSecsSinceEpoch());
    else
        QTextStream(stdout) << describeResult(command, dataDir, *result) << "\n";
    return 0;
}

} // namespace gleaner::agent::cli
