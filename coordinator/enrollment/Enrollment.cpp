#include "enrollment/Enrollment.h"

#include "enrollment/EnrollmentTokenUse.h"
#include "enrollment/Tokens.h"
#include "store/Database.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QSqlQuery>

Q_LOGGING_CATEGORY(lcEnrollment, "gleaner.coordinator.enrollment")

namespace gleaner::coordinator {

Enrollment::Enrollment(Database& db, AdmissionCache& admission, const Clock& clock, bool openEnrollment,
                       Hooks hooks)
    : m_db(db), m_admission(admission), m_clock(clock), m_openEnrollment(openEnrollment),
      m_hooks(std::move(hooks))
{
}

QJsonObject Enrollment::touch(const QString& agentId)
{
    auto seen =
        m_db.exec(QStringLiteral("UPDATE agents SET last_seen_ms = ? WHERE id = ? RETURNING hardware"),
                  {m_clock.nowMs(), agentId});
    return seen && seen->next() ? QJsonDocument::fromJson(seen->value(0).toByteArray()).object()
                                : QJsonObject();
}

void Enrollment::recordOutcome(const QString& agentId, const char* column, qint64 samples, double seconds)
{
    (void)m_db.exec(QStringLiteral("UPDATE agents SET %1 = %1 + 1, samples = samples + ?, train_seconds = "
                                   "train_seconds + ? WHERE id = ?")
                        .arg(QString::fromLatin1(column)),
                    {samples, seconds, agentId});
}

Status
Enrollment::load(const std::function<void(const QString& agentId, qint64 samples, double seconds)>& noteSpeed)
{
    auto admins = m_db.exec(QStringLiteral("SELECT hash FROM admin_tokens"));
    if (!admins)
        return fail(admins.error());
    while (admins->next())
        m_admission.addAdminTokenHash(admins->value(0).toString());
    auto agents =
        m_db.exec(QStringLiteral("SELECT id, token_hash, revoked, samples, train_seconds FROM agents"));
    if (!agents)
        return fail(agents.error());
    while (agents->next()) {
        m_admission.setAgent(agents->value(1).toString(),
                             {agents->value(0).toString(), agents->value(2).toInt() != 0});
        noteSpeed(agents->value(0).toString(), agents->value(3).toLongLong(), agents->value(4).toDouble());
    }
    return {};
}

HttpResponse Enrollment::enroll(const QJsonObject& request)
{
    const QString name = request.value(QStringLiteral("name")).toString().trimmed();
    const QString platform = request.value(QStringLiteral("platform")).toString().trimmed();
    if (name.isEmpty() || name.size() > 200)
        return HttpResponse::error(422,
                                   QStringLiteral("name: expected the machine's name, 1 to 200 characters"));
    if (platform.size() > 200)
        return HttpResponse::error(422, QStringLiteral("platform: at most 200 characters"));
    const QByteArray token = request.value(QStringLiteral("enrollment_token")).toString().toUtf8();
    const qint64 now = m_clock.nowMs();

    if (!token.isEmpty() || !m_openEnrollment) {
        if (token.isEmpty())
            return HttpResponse::error(401,
                                       QStringLiteral("this coordinator needs an enrollment token; ask its "
                                                      "admin for one (gleaner-coordinator token create)"));
        auto spent = EnrollmentTokenUse::spend(m_db, Tokens::hash(token), now);
        if (!spent)
            return HttpResponse::error(500, spent.error());
        if (*spent != EnrollmentTokenUse::Outcome::Enrolled)
            return HttpResponse::error(401, EnrollmentTokenUse::refusal(*spent));
    }

    const QString agentId = Tokens::randomId();
    const QByteArray agentToken = Tokens::generate("gag_");
    const QString tokenHash = Tokens::hash(agentToken);
    const QByteArray hardware =
        QJsonDocument(request.value(QStringLiteral("hardware")).toObject()).toJson(QJsonDocument::Compact);
    auto inserted = m_db.exec(QStringLiteral("INSERT INTO agents (id, token_hash, name, platform, hardware, "
                                             "enrolled_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?, ?)"),
                              {agentId, tokenHash, name, platform, QString::fromUtf8(hardware), now, now});
    if (!inserted)
        return HttpResponse::error(500, inserted.error());
    m_admission.setAgent(tokenHash, {agentId, false});
    qCInfo(lcEnrollment) << "agent" << agentId << "enrolled:" << name << platform;
    m_hooks.agentChanged(agentId, "enrolled");

    QJsonObject reply;
    reply.insert(QStringLiteral("agent_id"), agentId);
    reply.insert(QStringLiteral("agent_token"), QString::fromLatin1(agentToken));
    reply.insert(QStringLiteral("signing_public_key"), QString::fromLatin1(m_hooks.signingPublicKeyPem()));
    return HttpResponse::json(200, reply);
}

HttpResponse Enrollment::createToken(const QJsonObject& request)
{
    const QJsonValue uses = request.value(QStringLiteral("uses"));
    const QJsonValue expires = request.value(QStringLiteral("expires_seconds"));
    if (!uses.isUndefined() && !uses.isNull() && (!uses.isDouble() || uses.toInteger(-1) < 1))
        return HttpResponse::error(422, QStringLiteral("uses: expected a positive integer"));
    if (!expires.isUndefined() && !expires.isNull() && (!expires.isDouble() || expires.toInteger(-1) < 1))
        return HttpResponse::error(422, QStringLiteral("expires_seconds: expected a positive integer"));
    const QByteArray token = Tokens::generate("gle_");
    const qint64 now = m_clock.nowMs();
    const QVariant expiresMs = expires.isDouble() ? QVariant(now + expires.toInteger() * 1000) : QVariant();
    const QVariant usesLeft = uses.isDouble() ? QVariant(uses.toInteger()) : QVariant();
    auto inserted = m_db.insertReturningId(QStringLiteral("INSERT INTO enrollment_tokens (hash, created_ms, "
                                                          "expires_ms, uses_left) VALUES (?, ?, ?, ?)"),
                                           {Tokens::hash(token), now, expiresMs, usesLeft});
    if (!inserted)
        return HttpResponse::error(500, inserted.error());
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), *inserted);
    reply.insert(QStringLiteral("token"), QString::fromLatin1(token));
    return HttpResponse::json(201, reply);
}

HttpResponse Enrollment::listTokens()
{
    auto rows = m_db.exec(QStringLiteral("SELECT id, created_ms, expires_ms, uses_left, used, revoked FROM "
                                         "enrollment_tokens ORDER BY id"));
    if (!rows)
        return HttpResponse::error(500, rows.error());
    QJsonArray tokens;
    const qint64 now = m_clock.nowMs();
    while (rows->next()) {
        QJsonObject token;
        token.insert(QStringLiteral("id"), rows->value(0).toLongLong());
        token.insert(QStringLiteral("created_ms"), rows->value(1).toLongLong());
        token.insert(QStringLiteral("expires_ms"),
                     rows->value(2).isNull() ? QJsonValue() : rows->value(2).toLongLong());
        token.insert(QStringLiteral("uses_left"),
                     rows->value(3).isNull() ? QJsonValue() : rows->value(3).toLongLong());
        token.insert(QStringLiteral("used"), rows->value(4).toLongLong());
        const bool revoked = rows->value(5).toInt() != 0;
        const bool expired = !rows->value(2).isNull() && rows->value(2).toLongLong() <= now;
        const bool usedUp = !rows->value(3).isNull() && rows->value(3).toLongLong() <= 0;
        token.insert(QStringLiteral("state"), revoked   ? QStringLiteral("revoked")
                                              : expired ? QStringLiteral("expired")
                                              : usedUp  ? QStringLiteral("used up")
                                                        : QStringLiteral("valid"));
        tokens.append(token);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("tokens"), tokens);
    return HttpResponse::json(200, reply);
}

HttpResponse Enrollment::revokeToken(qint64 id)
{
    auto updated = m_db.exec(QStringLiteral("UPDATE enrollment_tokens SET revoked = 1 WHERE id = ?"), {id});
    if (!updated)
        return HttpResponse::error(500, updated.error());
    if (updated->numRowsAffected() == 0)
        return HttpResponse::error(404, QStringLiteral("no enrollment token has id %1").arg(id));
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), id);
    reply.insert(QStringLiteral("state"), QStringLiteral("revoked"));
    return HttpResponse::json(200, reply);
}

HttpResponse Enrollment::listAgents()
{
    auto rows =
        m_db.exec(QStringLiteral("SELECT id, name, platform, hardware, enrolled_ms, last_seen_ms, revoked, "
                                 "done, timed_out, invalid, samples, train_seconds, failed, quarantined_ms, "
                                 "quarantine_reason, disagreed FROM agents ORDER BY enrolled_ms"));
    if (!rows)
        return HttpResponse::error(500, rows.error());
    QJsonArray agents;
    while (rows->next()) {
        QJsonObject agent;
        agent.insert(QStringLiteral("id"), rows->value(0).toString());
        agent.insert(QStringLiteral("name"), rows->value(1).toString());
        agent.insert(QStringLiteral("platform"), rows->value(2).toString());
        agent.insert(QStringLiteral("hardware"),
                     QJsonDocument::fromJson(rows->value(3).toByteArray()).object());
        agent.insert(QStringLiteral("enrolled_ms"), rows->value(4).toLongLong());
        agent.insert(QStringLiteral("last_seen_ms"), rows->value(5).toLongLong());
        agent.insert(QStringLiteral("revoked"), rows->value(6).toInt() != 0);
        agent.insert(QStringLiteral("done"), rows->value(7).toLongLong());
        agent.insert(QStringLiteral("timed_out"), rows->value(8).toLongLong());
        agent.insert(QStringLiteral("invalid"), rows->value(9).toLongLong());
        agent.insert(QStringLiteral("failed"), rows->value(12).toLongLong());
        agent.insert(QStringLiteral("samples"), rows->value(10).toLongLong());
        const double seconds = rows->value(11).toDouble();
        agent.insert(QStringLiteral("train_seconds"), seconds);
        agent.insert(QStringLiteral("samples_per_second"),
                     seconds > 0 ? rows->value(10).toDouble() / seconds : 0.0);
        agent.insert(QStringLiteral("disagreed"), rows->value(15).toLongLong());
        const bool quarantined = !rows->value(13).isNull();
        agent.insert(QStringLiteral("quarantined"), quarantined);
        if (quarantined) {
            agent.insert(QStringLiteral("quarantined_ms"), rows->value(13).toLongLong());
            agent.insert(QStringLiteral("quarantine_reason"), rows->value(14).toString());
        }
        agents.append(agent);
    }
    QJsonObject reply;
    reply.insert(QStringLiteral("agents"), agents);
    return HttpResponse::json(200, reply);
}

HttpResponse Enrollment::revokeAgent(const QString& agentId)
{
    auto row = m_db.exec(QStringLiteral("SELECT token_hash FROM agents WHERE id = ?"), {agentId});
    if (!row || !row->next())
        return HttpResponse::error(404, QStringLiteral("no agent has id %1").arg(agentId));
    const QString hash = row->value(0).toString();
    (void)m_db.exec(QStringLiteral("UPDATE agents SET revoked = 1 WHERE id = ?"), {agentId});
    m_admission.setAgent(hash, {agentId, true});
    m_hooks.agentRevoked(agentId);
    m_hooks.agentChanged(agentId, "revoked");
    QJsonObject reply;
    reply.insert(QStringLiteral("id"), agentId);
    reply.insert(QStringLiteral("revoked"), true);
    return HttpResponse::json(200, reply);
}

} // namespace gleaner::coordinator
