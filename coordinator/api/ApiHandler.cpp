#include "api/ApiHandler.h"

#include "aggregation/UpdateChecker.h"
#include "crypto/Sha256.h"
#include "enrollment/EnrollmentTokenTerms.h"
#include "enrollment/Tokens.h"
#include "intake/AgentStanding.h"
#include "util/Durability.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>


Q_DECLARE_LOGGING_CATEGORY(lcCoordinator)

namespace gleaner::coordinator {
namespace {

constexpr qint64 kSmallBody = 64 * 1024;
constexpr qint64 kJobSpecBody = 1024 * 1024;
constexpr qint64 kLeaseBody = 1024 * 1024; // a large cache list: 64-byte hashes, thousands of them
// A legitimate client misses the admission cache once per coordinator (its token) or per lease it got
// elsewhere.
constexpr int kTokenLookupsPerMinute = 30;
constexpr int kLeaseCatchUpsPerMinute = 60;

QList<QByteArray> pathParts(const RequestHead& head)
{
    QList<QByteArray> parts = head.path().split('/');
    parts.removeAll(QByteArray());
    return parts;
}

std::optional<QJsonObject> jsonBody(const QByteArray& body)
{
    if (body.trimmed().isEmpty())
        return QJsonObject();
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(body, &error);
    if (!doc.isObject())
        return std::nullopt;
    return doc.object();
}

HttpResponse wrongMethod(const char* allowed)
{
    HttpResponse response = HttpResponse::error(405, QStringLiteral("use %1").arg(QString::fromLatin1(allowed)));
    response.headers.append(HttpHeader{"Allow", allowed});
    return response;
}

HttpResponse badJson()
{
    return HttpResponse::error(400, QStringLiteral("the request body must be a JSON object"));
}

bool isApi(const QList<QByteArray>& parts)
{
    return parts.size() >= 2 && parts[0] == "api" && parts[1] == "v1";
}

} // namespace

ApiHandler::ApiHandler(Coordinator& coordinator)
    : m_coordinator(coordinator), m_dashboard(coordinator),
      m_enrollLimit(
          ClientRateLimit::Policy{coordinator.config().enrollPerMinute, coordinator.config().enrollBurst},
          coordinator.clock()),
      m_tokenLookups(ClientRateLimit::Policy{kTokenLookupsPerMinute, kTokenLookupsPerMinute},
                     coordinator.clock()),
      m_leaseCatchUps(ClientRateLimit::Policy{kLeaseCatchUpsPerMinute, kLeaseCatchUpsPerMinute},
                      coordinator.clock())
{
}

bool ApiHandler::catchUpOnLeasesFor(const QString& agentId)
{
    if (!m_leaseCatchUps.take(agentId).allowed)
        return false;
    m_coordinator.deployment().catchUpOnLeases();
    return true;
}

ApiHandler::~ApiHandler()
{
    m_coordinator.state().call([] {}); // tasks that may still post to the checker have run
    m_checker.stop();                  // the checks they posted have run (and posted back to the state thread)
    m_coordinator.state().call([] {});
}

std::variant<ApiHandler::Identity, HttpResponse> ApiHandler::identify(const RequestHead& head, bool agentAllowed,
                                                                      bool adminAllowed) const
{
    const QByteArray token = head.bearerToken();
    if (token.isEmpty())
        return HttpResponse::error(401, QStringLiteral("this endpoint needs \"Authorization: Bearer <token>\""));
    const QString hash = Tokens::hash(token);
    if (adminAllowed && m_coordinator.admission().isAdminTokenHash(hash))
        return Identity{Caller::Admin, {}};
    if (agentAllowed) {
        auto agent = m_coordinator.admission().agentByTokenHash(hash);
        if (!agent) {
            // Enrolled at another coordinator of the deployment, perhaps: the database knows.
            const QString client = head.remoteKey.isEmpty() ? head.remoteAddress : head.remoteKey;
            if (m_tokenLookups.take(client).allowed)
                agent = m_coordinator.deployment().lookUpAgent(hash);
        }
        if (agent) {
            if (agent->revoked)
                return HttpResponse::error(403, QStringLiteral("this agent was revoked by the coordinator's admin; "
                                                               "enroll again with a new token"));
            return Identity{Caller::Agent, agent->id};
        }
    }
    return HttpResponse::error(401, adminAllowed && !agentAllowed
                                        ? QStringLiteral("the admin token is not valid for this coordinator")
                                        : QStringLiteral("the token is not valid for this coordinator; enroll again"));
}

std::variant<BodyPolicy, HttpResponse> ApiHandler::admit(const RequestHead& head)
{
    const QList<QByteArray> parts = pathParts(head);
    const QByteArray& method = head.method;
    if (!isApi(parts)) {
        if (auto dashboard = m_dashboard.admitOutsideApi(head))
            return *dashboard;
        return HttpResponse::error(404, QStringLiteral("no such endpoint: %1").arg(QString::fromUtf8(head.path())));
    }
    const QByteArray area = parts.value(2);

    if ((area == "info" || area == "signing-keys") && parts.size() == 3)
        return method == "GET" ? std::variant<BodyPolicy, HttpResponse>(BodyPolicy{0, false})
                               : wrongMethod("GET");
    if (area == "agents" && parts.value(3) == "enroll" && parts.size() == 4) {
        if (method != "POST")
            return wrongMethod("POST");
        if (auto refusal = limitEnrollment(head))
            return *refusal;
        return BodyPolicy{kSmallBody, false};
    }

    if (area == "admin")
        return m_dashboard.admitAdmin(head, parts); // the admin token, or a dashboard session

    auto who = identify(head, true, area == "files");
    if (auto* refusal = std::get_if<HttpResponse>(&who))
        return *refusal;
    const Identity identity = std::get<Identity>(who);

    if (area == "files" && parts.size() == 4) {
        if (method != "GET" && method != "HEAD")
            return wrongMethod("GET");
        // An agent reads the files of its own open leases only; the same answer as for a file that does not exist.
        const QString sha = QString::fromLatin1(parts[3]);
        const auto mayRead = [&] { return m_coordinator.admission().agentMayRead(identity.agentId, sha); };
        if (identity.caller == Caller::Agent && !mayRead() &&
            !(catchUpOnLeasesFor(identity.agentId) && mayRead())) {
            if (auto left = m_coordinator.notServedHere(identity.agentId, {})) // a file of such a job's lease
                return *left;
            return HttpResponse::error(404, QStringLiteral("no file has SHA-256 %1 for this agent's leases").arg(sha));
        }
        return BodyPolicy{0, false};
    }
    if (area == "work" && parts.size() == 4 && parts[3] == "lease")
        return method == "POST" ? std::variant<BodyPolicy, HttpResponse>(BodyPolicy{kLeaseBody, false})
                                : wrongMethod("POST");
    if (area == "work" && parts.size() == 5 && parts[4] == "progress")
        return method == "POST" ? std::variant<BodyPolicy, HttpResponse>(BodyPolicy{kSmallBody, false})
                                : wrongMethod("POST");
    if (area == "work" && parts.size() == 5 && parts[4] == "fail")
        return method == "POST" ? std::variant<BodyPolicy, HttpResponse>(BodyPolicy{kSmallBody, false})
                                : wrongMethod("POST");
    if (area == "work" && parts.size() == 5 && (parts[4] == "result" || parts[4] == "handback")) {
        if (method != "PUT")
            return wrongMethod("PUT");
        const QString leaseId = QString::fromLatin1(parts[3]);
        auto lease = m_coordinator.admission().lease(leaseId);
        if (!lease && catchUpOnLeasesFor(identity.agentId)) // issued by another coordinator, perhaps
            lease = m_coordinator.admission().lease(leaseId);
        if (!lease) {
            if (auto left = m_coordinator.notServedHere(identity.agentId, leaseId))
                return *left;
            return HttpResponse::error(404, QStringLiteral("lease %1 is not open (unknown, finished, or its job has "
                                                           "ended)")
                                                .arg(leaseId));
        }
        if (lease->agentId != identity.agentId)
            return HttpResponse::error(409, QStringLiteral("lease %1 belongs to another agent").arg(leaseId));
        if (!lease->closedReason.isEmpty())
            return HttpResponse::error(409, lease->closedReason);
        // A handed-back checkpoint holds the model and the optimizer's state (CheckpointChecker::maxBytes).
        return BodyPolicy{parts[4] == "handback" ? 3 * lease->maxUploadBytes : lease->maxUploadBytes, true};
    }
    return HttpResponse::error(404, QStringLiteral("no such endpoint: %1 %2")
                                        .arg(QString::fromLatin1(method), QString::fromUtf8(head.path())));
}

std::optional<HttpResponse> ApiHandler::limitEnrollment(const RequestHead& head)
{
    const QString client = head.remoteKey.isEmpty() ? head.remoteAddress : head.remoteKey;
    const ClientRateLimit::Decision decision = m_enrollLimit.take(client);
    if (decision.allowed)
        return std::nullopt;
    const ClientRateLimit::Policy& policy = m_enrollLimit.policy();
    const QString why =
        decision.tooManyClients
            ? QStringLiteral("too many clients are enrolling at once; try again in %1 s").arg(decision.retryAfterSeconds)
            : QStringLiteral("too many enrollment requests from %1: this coordinator takes %2 a minute from one "
                             "address, in bursts of up to %3; try again in %4 s")
                  .arg(client)
                  .arg(policy.perMinute)
                  .arg(policy.burst)
                  .arg(decision.retryAfterSeconds);
    HttpResponse response = HttpResponse::json(
        429, QJsonObject{{QStringLiteral("error"), why}, {QStringLiteral("retry_after"), decision.retryAfterSeconds}});
    response.headers.append(HttpHeader{"Retry-After", QByteArray::number(decision.retryAfterSeconds)});
    return response;
}

HttpResponse ApiHandler::info() const
{
    QJsonObject reply;
    reply.insert(QStringLiteral("name"), QStringLiteral("gleaner-coordinator"));
    reply.insert(QStringLiteral("version"), QStringLiteral(GLEANER_VERSION));
    reply.insert(QStringLiteral("protocol"), 1);
    reply.insert(QStringLiteral("signing_public_key"), QString::fromLatin1(m_coordinator.signingPublicKeyPem()));
    reply.insert(QStringLiteral("open_enrollment"), m_coordinator.config().openEnrollment);
    return HttpResponse::json(200, reply);
}

void ApiHandler::handle(HttpRequest request, Responder respond)
{
    if (m_dashboard.handle(request, respond))
        return;
    const QList<QByteArray> parts = pathParts(request.head);
    const QByteArray area = parts.value(2);
    Coordinator& c = m_coordinator;

    if (area == "info") {
        respond(info());
        return;
    }
    if (area == "signing-keys") {
        // Public, like info: public keys and signatures, which let an agent follow a rotation (protocol 7.5).
        respond(HttpResponse::json(200, c.signingKeys()));
        return;
    }
    if (area == "agents") {
        auto body = jsonBody(request.body);
        if (!body) {
            respond(badJson());
            return;
        }
        c.state().post([&c, body = *body, respond] { respond(c.enrollment().enroll(body)); });
        return;
    }
    if (area == "admin") {
        handleAdmin(parts, std::move(request), std::move(respond));
        return;
    }
    const auto who = identify(request.head, true, area == "files");
    if (const auto* refusal = std::get_if<HttpResponse>(&who)) {
        respond(*refusal);
        return;
    }
    const QString agentId = std::get<Identity>(who).agentId;

    if (area == "files") {
        const QString sha = QString::fromLatin1(parts[3]);
        const QString path = c.blobs().path(sha);
        if (path.isEmpty() || !QFile::exists(path)) {
            respond(HttpResponse::error(404, QStringLiteral("no file has SHA-256 %1").arg(sha)));
            return;
        }
        HttpResponse file = HttpResponse::file(path, sha.toLatin1(), "application/octet-stream");
        // Content-addressed: a file never changes under its name.
        file.headers.append(HttpHeader{"Cache-Control", "private, max-age=31536000, immutable"});
        // The nginx in front sends it from the blob folder, once this coordinator has said who may have it.
        if (request.head.viaProxy && !c.config().accelRedirect.isEmpty())
            file.accelRedirect = (c.config().accelRedirect + c.blobs().relativePath(sha)).toLatin1();
        respond(file);
        return;
    }
    if (parts.value(3) == "lease") {
        auto body = jsonBody(request.body);
        if (!body) {
            respond(badJson());
            return;
        }
        c.state().post(
            [&c, agentId, body = *body, respond] { c.pacer().whenCurrent(agentId, body, respond); });
        return;
    }
    const QString leaseId = QString::fromLatin1(parts[3]);
    if (parts.value(4) == "progress") {
        auto body = jsonBody(request.body);
        if (!body) {
            respond(badJson());
            return;
        }
        c.state().post([&c, agentId, leaseId, body = *body, respond] {
            respond(c.leases().progress(agentId, leaseId, body));
        });
        return;
    }
    if (parts.value(4) == "fail") {
        auto body = jsonBody(request.body);
        if (!body) {
            respond(badJson());
            return;
        }
        c.state().post([&c, agentId, leaseId, body = *body, respond] {
            respond(c.handBacks().failed(agentId, leaseId, body));
        });
        return;
    }
    if (parts.value(4) == "handback") {
        handleHandBack(agentId, leaseId, std::move(request), std::move(respond));
        return;
    }
    handleResult(agentId, leaseId, std::move(request), std::move(respond));
}

void ApiHandler::handleHandBack(const QString& agentId, const QString& leaseId, HttpRequest request, Responder respond)
{
    Coordinator& c = m_coordinator;
    const QString file = request.bodyFile;
    if (file.isEmpty() || QFileInfo(file).size() == 0) { // handed back without a checkpoint
        if (!file.isEmpty())
            QFile::remove(file);
        c.state().post([&c, agentId, leaseId, respond] {
            respond(c.handBacks().handBack(agentId, leaseId, std::nullopt, std::nullopt, {}));
        });
        return;
    }
    // state: what the checkpoint must match -> checker: check it, keep it as a blob -> state: record the hand-back.
    c.state().post([this, &c, agentId, leaseId, file, respond] {
        auto expected = c.handBacks().checkpointExpectationsFor(leaseId);
        if (!expected) { // not open, or its job takes no work: the lease is handed back all the same
            QFile::remove(file);
            respond(c.handBacks().handBack(agentId, leaseId, std::nullopt, std::nullopt, {}));
            return;
        }
        m_checker.post([this, &c, agentId, leaseId, file, expected = std::move(*expected), respond] {
            QString refusal;
            bool refusedByCheck = false;
            std::optional<CheckedCheckpoint> checked;
            std::optional<BlobInfo> blob;
            auto base = m_bases.get(expected.baseWeightsSha, expected.baseWeightsPath);
            if (!base) {
                qCCritical(lcCoordinator) << "cannot read the base weights of lease" << leaseId << ":" << base.error();
                refusal = QStringLiteral("the coordinator cannot read the weights the lease trained from");
            } else if (auto result = CheckpointChecker::check(file, expected, **base, m_shardHashes); !result) {
                refusal = result.error();
                refusedByCheck = true;
            } else if (auto kept = c.blobs().adoptFile(file); !kept) {
                qCCritical(lcCoordinator) << "cannot keep the checkpoint of lease" << leaseId << ":" << kept.error();
                refusal = QStringLiteral("the coordinator cannot keep the checkpoint");
            } else {
                checked = *result;
                blob = *kept;
            }
            QFile::remove(file); // moved into the store, or refused
            if (!refusal.isEmpty())
                qCWarning(lcCoordinator).nospace() << "the checkpoint agent " << agentId << " handed back with lease "
                                                   << leaseId << " was refused: " << refusal;
            c.state().post([&c, agentId, leaseId, blob, checked, refusal, refusedByCheck, respond] {
                respond(c.handBacks().handBack(agentId, leaseId, blob, checked, refusal, refusedByCheck));
            });
        });
    });
}

void ApiHandler::observe(const RequestHead& head, const RequestOutcome& outcome)
{
    Coordinator& c = m_coordinator;
    c.metrics().observeRequest(head, outcome);
    // File bytes by what they were for: the accounting of what a subtask costs an agent's downlink, whether
    // this process or the proxy in front sent them.
    const quint64 fileBytes = outcome.bytesOut + outcome.bytesByProxy;
    if (fileBytes > 0 && (outcome.status == 200 || outcome.status == 206) &&
        metrics::classifyRoute(head) == metrics::Route::Files) {
        const QByteArray path = head.path();
        const QString sha = QString::fromLatin1(path.mid(path.lastIndexOf('/') + 1));
        const auto use = c.admission().fileUse(sha);
        c.metrics().fileSent(use ? QByteArrayView(use->role) : QByteArrayView("other"), fileBytes);
        if (use)
            c.state().post([&c, jobId = use->jobId, role = use->role, bytes = fileBytes] {
                c.leases().noteDownloaded(jobId, role, bytes);
            });
    }
}

void ApiHandler::handleResult(const QString& agentId, const QString& leaseId, HttpRequest request, Responder respond)
{
    Coordinator& c = m_coordinator;
    const QString file = request.bodyFile;
    // state: which model must the upload match -> checker: parse and check it, make it durable -> state: record it.
    c.state().post([this, &c, agentId, leaseId, file, respond] {
        auto expected = c.results().expectationsFor(leaseId);
        if (!expected) {
            QFile::remove(file);
            respond(c.leaseNotInMemory(agentId, leaseId));
            return;
        }
        m_checker.post([this, &c, agentId, leaseId, file, expected = std::move(*expected), respond] {
            auto base = m_bases.get(expected.baseWeightsSha, expected.baseWeightsPath);
            if (!base) {
                // The coordinator's own trouble, not the agent's: nothing is counted against it.
                QFile::remove(file);
                qCCritical(lcCoordinator) << "cannot read the base weights of lease" << leaseId << ":" << base.error();
                respond(HttpResponse::error(503, QStringLiteral("the coordinator cannot read the weights this result "
                                                                "was trained from; try again later")));
                return;
            }
            auto update = UpdateChecker::check(file, expected, **base);
            if (!update) {
                QFile::remove(file);
                c.state().post([&c, agentId, leaseId, reason = update.error(), respond] {
                    respond(c.results().refuse(agentId, leaseId, reason));
                });
                return;
            }
            // The bytes reach the disk before the row that says they were received; an encoded update is kept as
            // it came (UpdateChecker::readKept reads it back).
            if (auto kept = Durability::syncFile(file); !kept) {
                QFile::remove(file);
                qCCritical(lcCoordinator) << "cannot keep the result of lease" << leaseId << ":" << kept.error();
                respond(HttpResponse::error(500, QStringLiteral("cannot make the upload durable on the coordinator's "
                                                                "disk; try again later")));
                return;
            }
            c.state().post([&c, agentId, leaseId, file, update = std::move(*update), respond]() mutable {
                respond(c.results().receive(agentId, leaseId, file, std::move(update)));
            });
        });
    });
}

void ApiHandler::handleAdmin(const QList<QByteArray>& parts, HttpRequest request, Responder respond)
{
    Coordinator& c = m_coordinator;
    const QByteArray& method = request.head.method;
    const QByteArray what = parts.value(3);
    bool idOk = false;
    const qint64 id = parts.value(4).toLongLong(&idOk);

    if (what == "jobs" && parts.size() == 4 && method == "GET")
        return (void)c.state().post([&c, respond] { respond(c.jobs().list()); });
    if (what == "jobs" && parts.size() == 4 && method == "POST")
        return c.jobs().submit(request.body, respond);
    if (what == "jobs" && parts.size() == 5 && idOk && method == "GET")
        return (void)c.state().post([&c, id, respond] { respond(c.jobs().status(id)); });
    if (what == "jobs" && parts.size() == 6 && idOk && parts[5] == "weights" && method == "GET")
        return (void)c.state().post([&c, id, respond] { c.weightsExport().serve(id, respond); });
    if (what == "jobs" && parts.size() == 6 && idOk && parts[5] == "torchscript" && method == "GET")
        return (void)c.state().post(
            [&c, id, respond] { c.weightsExport().serve(id, respond, /*torchscript=*/true); });
    if (what == "jobs" && parts.size() == 6 && idOk && method == "POST")
        return (void)c.state().post(
            [&c, id, action = parts[5], respond] { respond(c.jobs().setStatus(id, action)); });
    if (what == "tokens" && parts.size() == 4 && method == "GET")
        return (void)c.state().post([&c, respond] { respond(c.enrollment().listTokens()); });
    if (what == "tokens" && parts.size() == 4 && method == "POST") {
        auto body = jsonBody(request.body);
        if (!body)
            return respond(badJson());
        // Checked here, into terms whose lifetime cannot overflow the expiry time, with the default lifetime
        // filled in; the coordinator stores what it is given.
        const auto terms = EnrollmentTokenTerms::fromJson(*body);
        if (!terms)
            return respond(HttpResponse::error(422, terms.error()));
        return (void)c.state().post(
            [&c, body = terms->toJson(), respond] { respond(c.enrollment().createToken(body)); });
    }
    if (what == "tokens" && parts.size() == 6 && idOk && parts[5] == "revoke" && method == "POST")
        return (void)c.state().post([&c, id, respond] { respond(c.enrollment().revokeToken(id)); });
    if (what == "agents" && parts.size() == 4 && method == "GET")
        return (void)c.state().post([&c, respond] { respond(c.enrollment().listAgents()); });
    if (what == "agents" && parts.size() == 6 && parts[5] == "revoke" && method == "POST")
        return (void)c.state().post([&c, agent = QString::fromLatin1(parts[4]), respond] {
            respond(c.enrollment().revokeAgent(agent));
        });
    if (what == "agents" && parts.size() == 6 && parts[5] == "release" && method == "POST")
        return (void)c.state().post(
            [&c, agent = QString::fromLatin1(parts[4]), respond] { respond(c.standing().release(agent)); });
    if (what == "signing-key" && parts.size() == 4 && method == "GET")
        return respond(HttpResponse::json(200, c.signingKeys()));
    if (what == "signing-key" && parts.size() == 5 && parts[4] == "rotate" && method == "POST")
        return (void)c.state().post([&c, respond] { respond(c.rotateSigningKey()); });
    respond(HttpResponse::error(404, QStringLiteral("no such admin endpoint: %1 %2")
                                         .arg(QString::fromLatin1(method), QString::fromUtf8(request.head.path()))));
}

} // namespace gleaner::coordinator
