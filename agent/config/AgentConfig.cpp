#include "config/AgentConfig.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

namespace gleaner::agent {

QString AgentConfig::configPath(const QString& dir) { return QDir(dir).filePath(QStringLiteral("agent.json")); }
QString AgentConfig::tokenPath(const QString& dir) { return QDir(dir).filePath(QStringLiteral("agent-token")); }
QString AgentConfig::signingKeyPath(const QString& dir) { return QDir(dir).filePath(QStringLiteral("coordinator-key.pem")); }
QString AgentConfig::caPath(const QString& dir) { return QDir(dir).filePath(QStringLiteral("coordinator-ca.pem")); }

bool AgentConfig::isEnrolled(const QString& dir)
{
    return QFile::exists(configPath(dir));
}

Result<AgentConfig> AgentConfig::load(const QString& dir)
{
    QFile file(configPath(dir));
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: this agent is not enrolled (%2); run `gleaner-agent enroll URL --token T` first")
                        .arg(file.fileName(), file.errorString()));
    const QJsonObject json = QJsonDocument::fromJson(file.readAll()).object();
    AgentConfig config;
    config.coordinatorUrl = json.value(QStringLiteral("coordinator_url")).toString();
    config.agentId = json.value(QStringLiteral("agent_id")).toString();
    config.name = json.value(QStringLiteral("name")).toString();
    config.enrolledMs = json.value(QStringLiteral("enrolled_ms")).toInteger();
    if (config.coordinatorUrl.isEmpty() || config.agentId.isEmpty())
        return fail(QStringLiteral("%1 is incomplete; enroll again into an empty folder").arg(file.fileName()));
    return config;
}

Status AgentConfig::save(const QString& dir) const
{
    const QJsonObject json{{QStringLiteral("coordinator_url"), coordinatorUrl},
                           {QStringLiteral("agent_id"), agentId},
                           {QStringLiteral("name"), name},
                           {QStringLiteral("enrolled_ms"), enrolledMs}};
    QSaveFile file(configPath(dir));
    if (!file.open(QIODevice::WriteOnly) || file.write(QJsonDocument(json).toJson()) < 0 || !file.commit())
        return fail(QStringLiteral("%1: cannot write: %2").arg(file.fileName(), file.errorString()));
    return {};
}

} // namespace gleaner::agent
