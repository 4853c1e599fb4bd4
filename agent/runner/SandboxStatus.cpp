#include "runner/SandboxStatus.h"

#include <QJsonArray>

#include <algorithm>
#include <utility>

namespace gleaner::agent {
namespace {

constexpr qsizetype kMaxReason = 300;

// The layers people are told about, in the order they are listed, with their names for people; no_new_privs,
// no_core_dumps and open_files hold wherever Linux runs and would only lengthen the line.
constexpr std::pair<const char*, const char*> kShown[] = {{"landlock", "landlock"},
                                                           {"landlock_tcp", "landlock TCP rules"},
                                                           {"landlock_scoped", "landlock scopes"},
                                                           {"seccomp", "seccomp"},
                                                           {"network_namespace", "network namespace"},
                                                           {"memory_cap", "memory cap"}};
constexpr const char* kKnown[] = {"no_new_privs",      "no_core_dumps", "open_files", "network_namespace",
                                  "memory_cap",        "landlock",      "landlock_tcp", "landlock_scoped",
                                  "seccomp"};

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
    // Workers before the layers were listed say only what Landlock did.
    const QJsonValue layers = event.value(QStringLiteral("layers"));
    QStringList in;
    if (layers.isArray()) {
        for (const QJsonValue& layer : layers.toArray())
            in << layer.toString();
    } else {
        if (observed.landlock)
            in << QStringLiteral("landlock");
        if (observed.tcpDenied)
            in << QStringLiteral("landlock_tcp");
    }
    for (const char* name : kKnown)
        (in.contains(QLatin1String(name)) ? observed.layers : observed.missing) << QLatin1String(name);
    if (observed.layers.contains(u"memory_cap"))
        observed.memoryCapMb = std::clamp<qint64>(event.value(QStringLiteral("memory_cap_mb")).toInteger(), 0, qint64(1) << 40);
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
        return QStringLiteral("workers are confined by Landlock (ABI %1): they read and write their task folder only; "
                              "sandbox: %2")
            .arg(observed->landlockAbi)
            .arg(summary(*observed));
    return QStringLiteral("workers run without a file-system sandbox: %1. They can read every file this user can "
                          "read, the agent's credentials included; sandbox: %2")
        .arg(observed->reason, summary(*observed));
}

QString SandboxStatus::summary(const Observed& observed)
{
    QStringList in;
    QStringList out;
    for (const auto& [name, said] : kShown) {
        QString text = QLatin1String(said);
        if (text == u"landlock" && observed.landlock)
            text += QStringLiteral(" (ABI %1)").arg(observed.landlockAbi);
        if (text == u"memory cap" && observed.memoryCapMb > 0)
            text += QStringLiteral(" %1 MB").arg(observed.memoryCapMb);
        (observed.layers.contains(QLatin1String(name)) ? in : out) << text;
    }
    QString line = in.isEmpty() ? QStringLiteral("none") : in.join(QStringLiteral(", "));
    if (!out.isEmpty())
        line += QStringLiteral("; missing: ") + out.join(QStringLiteral(", "));
    return line;
}

QJsonValue SandboxStatus::toJson() const
{
    if (!m_observed)
        return QJsonValue(QJsonValue::Null);
    return QJsonObject{{QStringLiteral("landlock"), m_observed->landlock},
                       {QStringLiteral("landlock_abi"), m_observed->landlockAbi},
                       {QStringLiteral("tcp_denied"), m_observed->tcpDenied},
                       {QStringLiteral("reason"), m_observed->landlock ? QJsonValue(QJsonValue::Null)
                                                                       : QJsonValue(m_observed->reason)},
                       {QStringLiteral("layers"), QJsonArray::fromStringList(m_observed->layers)},
                       {QStringLiteral("missing"), QJsonArray::fromStringList(m_observed->missing)},
                       {QStringLiteral("memory_cap_mb"), m_observed->memoryCapMb > 0 ? QJsonValue(m_observed->memoryCapMb)
                                                                                    : QJsonValue(QJsonValue::Null)},
                       {QStringLiteral("summary"), summary(*m_observed)}};
}

} // namespace gleaner::agent
