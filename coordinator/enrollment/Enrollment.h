#pragma once
// Agents and enrollment tokens: enrolling an agent (spending a token, making the agent's own token), the
// admin's tokens and agents (create, list, revoke), and each agent's record of work (seen, done, timed out,
// invalid, failed). The database is the record; the admission cache learns each agent's token as it enrolls
// or is revoked, so that the HTTP threads admit it without asking. The state thread only.
//
// What else must happen when an agent changes (the dashboard's event; a revoked agent's work handed to
// others) is its owner's: Enrollment calls the hooks it was given.

#include "Result.h"
#include "admission/AdmissionCache.h"
#include "http/HttpTypes.h"
#include "util/Clock.h"

#include <QJsonObject>

#include <functional>

namespace gleaner::coordinator {

class Database;

class Enrollment
{
public:
    struct Hooks
    {
        // The agent enrolled, was revoked, ... (`what`, for the dashboard).
        std::function<void(const QString& agentId, const char* what)> agentChanged;
        // The agent was revoked: its work in flight will never come back.
        std::function<void(const QString& agentId)> agentRevoked;
        // The manifest signing key in force, as PEM: an enrolled agent pins it.
        std::function<QByteArray()> signingPublicKeyPem;
    };
    // `openEnrollment`: agents may enroll without a token (config open_enrollment).
    Enrollment(Database& db, AdmissionCache& admission, const Clock& clock, bool openEnrollment, Hooks hooks);

    // At start: the admin tokens and every agent into the admission cache; `noteSpeed` gets each agent's
    // samples and seconds of training so far (speed-aware jobs size leases by them, also across a restart).
    Status load(const std::function<void(const QString& agentId, qint64 samples, double seconds)>& noteSpeed);
    // POST /api/v1/enroll: {"name", "platform", "hardware", "enrollment_token"} -> the agent's id and token.
    HttpResponse enroll(const QJsonObject& request);
    // The admin's enrollment tokens: {"uses", "expires_seconds"} (each optional) -> the token, shown once.
    HttpResponse createToken(const QJsonObject& request);
    HttpResponse listTokens();
    HttpResponse revokeToken(qint64 id);
    // The admin's agents, with their records.
    HttpResponse listAgents();
    HttpResponse revokeAgent(const QString& agentId);

    // Marks the agent seen now; answers the machine its record holds (`hardware`, empty when unknown).
    QJsonObject touch(const QString& agentId);
    // Adds one to the agent's count `column` (done, timed_out, invalid, failed), with the samples and seconds
    // the work took.
    void recordOutcome(const QString& agentId, const char* column, qint64 samples = 0, double seconds = 0);

private:
    Database& m_db;
    AdmissionCache& m_admission;
    const Clock& m_clock;
    const bool m_openEnrollment;
    const Hooks m_hooks;
};

} // namespace gleaner::coordinator
