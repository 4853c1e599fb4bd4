#include "AgentStatus.h"

#include <QJsonArray>

namespace gleaner::gui {
namespace {

QString str(const QJsonObject& o, QStringView key)
{
    return o.value(key).toString();
}

bool isFinalSubtaskState(const QString& state)
{
    return state == u"done" || state == u"failed" || state == u"dropped";
}

// Copies the listed members of `from` into `to` (a member absent from `from` stays as it was).
bool copyMembers(QJsonObject& to, const QJsonObject& from, std::initializer_list<QStringView> keys)
{
    bool changed = false;
    for (QStringView key : keys) {
        const auto it = from.constFind(key);
        if (it == from.constEnd())
            continue;
        if (to.value(key) != it.value()) {
            to.insert(key.toString(), it.value());
            changed = true;
        }
    }
    return changed;
}

bool applySubtaskEvent(QJsonObject& status, const QJsonObject& event, bool progress, bool* needsRefresh)
{
    const QString lease = str(event, u"lease_id");
    if (lease.isEmpty())
        return false;
    QJsonArray subtasks = status.value(u"subtasks").toArray();
    qsizetype index = -1;
    for (qsizetype i = 0; i < subtasks.size(); ++i)
        if (subtasks.at(i).toObject().value(u"lease_id").toString() == lease)
            index = i;
    if (!progress && isFinalSubtaskState(str(event, u"state"))) {
        if (needsRefresh)
            *needsRefresh = true;
        if (index < 0)
            return false;
        subtasks.removeAt(index);
        status.insert(QStringLiteral("subtasks"), subtasks);
        return true;
    }
    QJsonObject subtask =
        index >= 0 ? subtasks.at(index).toObject() : QJsonObject{{QStringLiteral("lease_id"), lease}};
    const bool changed =
        progress ? copyMembers(subtask, event, {u"step", u"of", u"loss", u"samples_per_s", u"eta_seconds"})
                 : copyMembers(subtask, event, {u"state", u"job", u"epoch", u"shard", u"error"});
    if (!changed && index >= 0)
        return false;
    if (progress && !subtask.contains(u"state"))
        subtask.insert(QStringLiteral("state"), QStringLiteral("training"));
    if (index >= 0)
        subtasks.replace(index, subtask);
    else
        subtasks.append(subtask);
    status.insert(QStringLiteral("subtasks"), subtasks);
    return true;
}

} // namespace

TrayState trayStateFor(const QString& agentState)
{
    if (agentState == u"training" || agentState == u"finishing")
        return TrayState::Training;
    if (agentState == u"paused")
        return TrayState::Paused;
    if (agentState == u"error")
        return TrayState::Error;
    if (agentState == u"offline" || agentState == u"stopped")
        return TrayState::Offline;
    return TrayState::Waiting;
}

QString trayStateName(TrayState state)
{
    switch (state) {
    case TrayState::Training:
        return QStringLiteral("training");
    case TrayState::Waiting:
        return QStringLiteral("waiting");
    case TrayState::Paused:
        return QStringLiteral("paused");
    case TrayState::Error:
        return QStringLiteral("error");
    case TrayState::Offline:
        break;
    }
    return QStringLiteral("offline");
}

QString stateTitle(const QString& agentState)
{
    if (agentState == u"training")
        return QStringLiteral("Training");
    if (agentState == u"waiting")
        return QStringLiteral("Waiting");
    if (agentState == u"paused")
        return QStringLiteral("Paused");
    if (agentState == u"finishing")
        return QStringLiteral("Finishing");
    if (agentState == u"stopped")
        return QStringLiteral("Stopped");
    if (agentState == u"offline")
        return QStringLiteral("Offline");
    if (agentState == u"error")
        return QStringLiteral("Needs attention");
    if (agentState.isEmpty())
        return QStringLiteral("Unknown");
    QString title = agentState;
    title[0] = title[0].toUpper();
    return title;
}

bool applyEvent(QJsonObject& status, const QJsonObject& event, bool* needsRefresh)
{
    const QString name = str(event, u"event");
    if (name == u"state") {
        bool changed = copyMembers(status, event, {u"state", u"reason"});
        // An event without reason_code (an older agent) must not leave the previous state's code behind.
        const QJsonValue code = event.value(u"reason_code");
        if (status.value(u"reason_code") != code) {
            if (code.isUndefined())
                status.remove(u"reason_code");
            else
                status.insert(QStringLiteral("reason_code"), code);
            changed = true;
        }
        return changed;
    }
    if (name == u"subtask" || name == u"progress")
        return applySubtaskEvent(status, event, name == u"progress", needsRefresh);
    if (name == u"coordinator") {
        QJsonObject coordinator = status.value(u"coordinator").toObject();
        if (!copyMembers(coordinator, event, {u"reachable", u"last_error", u"next_try_ms", u"url", u"quarantined", u"signing_key"}))
            return false;
        status.insert(QStringLiteral("coordinator"), coordinator);
        return true;
    }
    return false;
}

bool isPausedByUser(const QJsonObject& status)
{
    const QString code = str(status, u"reason_code");
    if (code == u"paused_by_user" || code == u"snoozed")
        return true;
    return code.isEmpty() && str(status, u"state") == u"paused";
}

QDateTime snoozedUntil(const QJsonObject& status)
{
    const QJsonValue until = status.value(u"policy").toObject().value(u"snoozed_until_ms");
    if (!until.isDouble() || until.toDouble() <= 0)
        return {};
    return QDateTime::fromMSecsSinceEpoch(qint64(until.toDouble()));
}

} // namespace gleaner::gui
