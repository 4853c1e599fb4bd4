#pragma once
// The v1 HTTP API (docs/protocol.md) over the Coordinator: routing, authentication, body limits and JSON.
// Decisions that can be made from a request's head (who is asking, may the body be this large) are made in
// admit() on the HTTP thread from the AdmissionCache; the work itself is posted to the coordinator's state
// thread, and an upload's checks run on the HTTP thread that received it.

#include "aggregation/UpdateChecker.h"
#include "api/ClientRateLimit.h"
#include "core/Coordinator.h"
#include "util/SerialExecutor.h"
#include "dashboard/DashboardApi.h"
#include "http/HttpTypes.h"

namespace gleaner::coordinator {

class ApiHandler final : public RequestHandler
{
public:
    explicit ApiHandler(Coordinator& coordinator);
    // Lets uploads already between the state thread and the checker finish first: both capture this handler.
    ~ApiHandler() override;

    std::variant<BodyPolicy, HttpResponse> admit(const RequestHead& head) override;
    void handle(HttpRequest request, Responder respond) override;
    void observe(const RequestHead& head, const RequestOutcome& outcome) override;

    dashboard::DashboardApi& dashboard() { return m_dashboard; }

private:
    enum class Caller { Nobody, Agent, Admin };
    struct Identity
    {
        Caller caller = Caller::Nobody;
        QString agentId;
    };
    // Who sent the request; a response when the credentials are refused.
    std::variant<Identity, HttpResponse> identify(const RequestHead& head, bool agentAllowed, bool adminAllowed) const;
    void handleResult(const QString& agentId, const QString& leaseId, HttpRequest request, Responder respond);
    // PUT .../handback (protocol 6.8): the body, when not empty, is the subtask's checkpoint.
    void handleHandBack(const QString& agentId, const QString& leaseId, HttpRequest request, Responder respond);
    void handleAdmin(const QList<QByteArray>& parts, HttpRequest request, Responder respond);
    HttpResponse info() const;
    // 429 when the client enrolls faster than the configured rate; nullopt when it may go on.
    std::optional<HttpResponse> limitEnrollment(const RequestHead& head);

    Coordinator& m_coordinator;
    dashboard::DashboardApi m_dashboard; // the page, /metrics, sessions, and who may use the admin area
    // Enrollment is open to anyone who can reach the server; each costs a database row and a token.
    ClientRateLimit m_enrollLimit;
    // What the admission cache does not know may be another coordinator's doing (an agent it enrolled, a
    // lease it issued): the HTTP thread then asks the state thread, which asks the database, and waits. The
    // one place an HTTP thread waits for the state thread; these bound how often a client can make it (a
    // token unknown to the deployment costs a lookup per try, per client address; an unknown lease, per
    // agent).
    mutable ClientRateLimit m_tokenLookups;
    ClientRateLimit m_leaseCatchUps;
    // An agent's lease or file that the admission cache does not know: caught up once (m_leaseCatchUps).
    bool catchUpOnLeasesFor(const QString& agentId);
    // Checks of uploaded results (parse, shapes, finite values, fsync): milliseconds each, kept off both the
    // HTTP threads (which must not block) and the state thread.
    BaseWeightsCache m_bases; // checker thread only
    CheckpointChecker::ShardHashes m_shardHashes; // checker thread only
    SerialExecutor m_checker; // last: its tasks use the members above
};

} // namespace gleaner::coordinator
