#include "daemon/SessionDesk.h"

#include "daemon/AgentDaemon.h"

#include <QJsonArray>

namespace gleaner::agent {

SessionDesk::SessionDesk(AgentDaemon& daemon, std::shared_ptr<SessionReports> reports, MonotonicClock clock)
    : m_daemon(daemon), m_reports(std::move(reports)), m_clock(std::move(clock))
{
}

QStringList SessionDesk::commands() const
{
    return {QStringLiteral("report_idle"), QStringLiteral("status"), QStringLiteral("preferences"),
            QStringLiteral("pause"),       QStringLiteral("resume"), QStringLiteral("finish"),
            QStringLiteral("snooze"),      QStringLiteral("set_preferences")};
}

Result<QJsonObject> SessionDesk::handle(const QString& cmd, const QJsonObject& args)
{
    return handleFrom(cmd, args, ControlPeer{});
}

Result<QJsonObject> SessionDesk::handleFrom(const QString& cmd, const QJsonObject& args, const ControlPeer& peer)
{
    if (cmd == u"report_idle") {
        const QJsonValue idle = args.value(QStringLiteral("idle_ms"));
        const QJsonValue session = args.value(QStringLiteral("session"));
        // Checked as a double first: casting one beyond qint64's range is undefined.
        const double idleMs = idle.toDouble(-1);
        if (!idle.isDouble() || !session.isString() || !(idleMs >= 0 && idleMs <= double(SessionReports::kMaxIdleMs)))
            return fail(QStringLiteral("report_idle needs {\"session\": \"ID\", \"idle_ms\": N} with N from 0 to %1")
                            .arg(SessionReports::kMaxIdleMs));
        const Status recorded = m_reports->record(SessionPeer{peer.connection, peer.uid, peer.pid}, session.toString(), qint64(idleMs), m_clock(),
                                                  args.value(QStringLiteral("source")).toString());
        if (!recorded)
            return fail(recorded.error());
        return QJsonObject{{QStringLiteral("state"), m_daemon.state()}};
    }
    if (cmd == u"status")
        return deskStatus(m_daemon.status());
    if (cmd == u"preferences") {
        const Result<QJsonObject> described = m_daemon.handle(cmd, {});
        QJsonObject preferences = described ? *described : QJsonObject();
        preferences.insert(QStringLiteral("read_only"), true);
        // From a desk session nothing can be changed: every key shows as the organisation's.
        preferences.insert(QStringLiteral("locked"),
                           QJsonArray::fromStringList(preferences.value(QStringLiteral("values")).toObject().keys()));
        return preferences;
    }
    const QString policy = m_daemon.policyFile();
    return fail(QStringLiteral("this machine's agent runs for the organisation under %1; %2 is for its "
                               "administrator, not a desk session (ask your IT administrator)")
                    .arg(policy.isEmpty() ? QStringLiteral("its policy") : policy, cmd));
}

void SessionDesk::connectionClosed(const ControlPeer& peer)
{
    m_reports->forget(peer.connection);
}

namespace {

// The reason as a desk user reads it: the same sentence where it names nobody's activity, else only its kind.
QString deskReason(const QString& reason, const QString& code)
{
    if (code == u"user_active")
        return QStringLiteral("Paused: someone is using this computer");
    if (code == u"idle_wait")
        return QStringLiteral("Waiting: this computer was in use recently");
    if (code == u"program_running")
        return QStringLiteral("Paused: a program that pauses Gleaner is running");
    if (code == u"inhibited")
        return QStringLiteral("Paused: a program keeps a screen awake");
    // "Computing: you have been idle for 5 min" and "Training 2 subtask(s): ..." say the idle time after
    // their first ": ".
    if (code == u"computing")
        return reason.section(QStringLiteral(": "), 0, 0);
    // "Finishing 2 subtask(s), then stopping; on hold now: <any of the reasons above>".
    if (code == u"finishing")
        return reason.section(QStringLiteral("; on hold now"), 0, 0);
    return reason;
}

} // namespace

QJsonObject SessionDesk::deskStatus(QJsonObject status)
{
    status.remove(QStringLiteral("log"));
    status.remove(QStringLiteral("data_dir"));
    QJsonObject policy = status.value(QStringLiteral("policy")).toObject();
    for (const char* key : {"idle_seconds", "inhibited_by", "pause_programs_running"})
        policy.remove(QLatin1StringView(key));
    if (status.contains(QStringLiteral("policy")))
        status.insert(QStringLiteral("policy"), policy);
    status.insert(QStringLiteral("reason"), deskReason(status.value(QStringLiteral("reason")).toString(),
                                                       status.value(QStringLiteral("reason_code")).toString()));
    status.insert(QStringLiteral("read_only"), true);
    return status;
}

std::optional<QJsonObject> SessionDesk::forDesks(const QJsonObject& event)
{
    const QString name = event.value(QStringLiteral("event")).toString();
    if (name == u"log")
        return std::nullopt;
    if (name != u"state")
        return event;
    QJsonObject shown = event;
    shown.insert(QStringLiteral("reason"), deskReason(event.value(QStringLiteral("reason")).toString(),
                                                      event.value(QStringLiteral("reason_code")).toString()));
    return shown;
}

} // namespace gleaner::agent
