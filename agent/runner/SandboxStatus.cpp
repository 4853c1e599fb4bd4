#include "runner/SandboxStatus.h"

#include <algorithm>

namespace gleaner::agent {
namespace {

constexpr qsizetype kMaxReason = 300;

} // namespace

std::optional<SandboxStatus::Observed> SandboxStatus::parse(const QJsonObject& event)
{
    const QJsonValue landlock = event.value(QStringLiteral("landlock"));
    const QJsonValue abi = event.value(QStringLiteral("landlock_abi"));
    if (event.value(QStringLiteral("event")).toString() != u"sandbox" || !landlock.isBool() || !abi.isDouble())
        return std::nullopt;
    Observed observed;
    observed.landlock = landlock.toBool();
    observed.landlockAbi = std::clamp(abi.toInt(), 0, 1000);
    observed.tcpDenied = event.value(QStringLiteral("tcp_denied")).toBool();
    if (!observed.landlock) {
        observed.reason = event.value(QStringLiteral("reason")).toString().left(kMaxReason);
        if (observed.reason.isEmpty())
            observed.reason = QStringLiteral("the worker did not say why");
    }
    return observed;
}

QString SandboxStatus::observe(const QJsonObject& event)
{
    const std::optional<Observed> observed = parse(event);
    if (!observed || observed == m_observed)
        return {};
    m_observed = observed;
    if (observed->landlock)
        return QStringLiteral("workers are confined by Landlock (ABI %1): they read and write their task folder only")
            .arg(observed->landlockAbi);
    return QStringLiteral("workers run without a file-system sandbox: %1. They can read every file this user can "
                          "read, the agent's credentials included")
        .arg(observed->reason);
}

QJsonValue SandboxStatus::toJson() const
{
    if (!m_observed)
        return QJsonValue(QJsonValue::Null);
    return QJsonObject{{QStringLiteral("landlock"), m_observed->landlock},
                       {QStringLiteral("landlock_abi"), m_observed->landlockAbi},
                       {QStringLiteral("tcp_denied"), m_observed->tcpDenied},
                       {QStringLiteral("reason"), m_observed->landlock ? QJsonValue(QJsonValue::Null)
                                                                       : QJsonValue(m_observed->reason)}};
}

} // namespace gleaner::agent
