// AgentDaemon: the control requests (docs/control-protocol.md), each handed to the part it concerns.

#include "daemon/AgentDaemon.h"
#include "daemon/Departure.h"
#include "daemon/LeaseDesk.h"

#include "cache/FileCache.h"
#include "daemon/StopSignal.h"

#include <QDateTime>
#include <QJsonArray>
#include <QSet>

namespace gleaner::agent {

QJsonObject AgentDaemon::status() const
{
    return m_status->toJson();
}

const QString& AgentDaemon::state() const
{
    return m_status->state();
}

QStringList AgentDaemon::commands() const
{
    return {QStringLiteral("status"),         QStringLiteral("pause"),  QStringLiteral("resume"),
            QStringLiteral("finish"),         QStringLiteral("snooze"), QStringLiteral("preferences"),
            QStringLiteral("set_preferences")};
}

Result<QJsonObject> AgentDaemon::handle(const QString& command, const QJsonObject& args)
{
    if (command == u"status")
        return status();
    if (command == u"preferences" || command == u"set_preferences")
        return m_gate->preferences(command,
                                   args); // the preferences can be read and changed while stopping too
    if (m_lifecycle.stopping)
        return fail(QStringLiteral("the agent is stopping"));
    if (command == u"pause" || command == u"resume") {
        if (command == u"pause")
            m_gate->pause();
        else
            m_gate->resume();
        m_status->update();
        return QJsonObject{{QStringLiteral("state"), m_status->state()}};
    }
    if (command == u"finish" && args.value(QStringLiteral("now")).toBool()) {
        m_departure->leave(QStringLiteral("finish --now"));
        return QJsonObject{{QStringLiteral("state"), m_status->state()}, {QStringLiteral("leaving"), true}};
    }
    if (command == u"finish") {
        m_lifecycle.finishing = true;
        m_leasing->hold();
        // Finishing means computing what is held: the owner's pause ends; the desktop policy still holds.
        m_gate->endOwnerHold();
        m_feed.log(QStringLiteral("info"), QStringLiteral("finishing the current subtasks, then stopping"));
        m_status->update();
        QTimer::singleShot(0, this, [this] { m_departure->checkFinished(); });
        return QJsonObject{{QStringLiteral("state"), m_status->state()}};
    }
    if (command == u"snooze") {
        auto until = m_gate->snooze(args);
        if (!until)
            return fail(until.error());
        m_status->update();
        return QJsonObject{{QStringLiteral("state"), m_status->state()},
                           {QStringLiteral("until_ms"), *until}};
    }
    return fail(QStringLiteral("unknown command \"%1\"").arg(command));
}

void AgentDaemon::shutdown()
{
    m_departure->shutdown();
}

void AgentDaemon::reloadPolicy(const QString& why)
{
    m_gate->reloadPolicy(why);
}

QString AgentDaemon::policyFile() const
{
    return m_gate->policyFile();
}

} // namespace gleaner::agent
