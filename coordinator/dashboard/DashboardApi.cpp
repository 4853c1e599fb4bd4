#include "dashboard/DashboardApi.h"

#include "enrollment/Tokens.h"
#include "dashboard/DashboardAssets.h"
#include "dashboard/EventStream.h"

#include <QJsonDocument>

namespace gleaner::coordinator::dashboard {

namespace {

constexpr qint64 kLoginBody = 4 * 1024;
constexpr qint64 kAdminBody = 1024 * 1024; // a job spec

// The page runs its own script and style sheet only, talks to this origin only, and is never framed.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

QList<QByteArray> segments(const RequestHead& head)
{
    QList<QByteArray> parts = head.path().split('/');
    parts.removeAll(QByteArray());
    return parts;
}

bool isLoopback(const QString& address)
{
    return address.startsWith(u"127.") || address == u"::1";
}

bool readOnly(const QByteArray& method)
{
    return method == "GET" || method == "HEAD";
}

bool acceptsGzip(const RequestHead& head)
{
    for (const QByteArray& item : head.header("Accept-Encoding").split(',')) {
        const QList<QByteArray> params = item.split(';');
        if (params[0].trimmed().toLower() != "gzip")
            continue;
        bool refused = false; // "gzip;q=0"
        for (qsizetype i = 1; i < params.size(); ++i) {
            const QByteArray param = params[i].trimmed().toLower();
            if (param.startsWith("q="))
                refused = param.mid(2).toDouble() <= 0.0;
        }
        if (!refused)
            return true;
    }
    return false;
}

HttpResponse needsCredentials()
{
    return HttpResponse::error(
        401, QStringLiteral("this endpoint needs \"Authorization: Bearer <token>\" with the "
                            "admin token, or a dashboard session (log in at /)"));
}

} // namespace

DashboardApi::DashboardApi(Coordinator& coordinator)
    : m_coordinator(coordinator),
      m_sessions(coordinator.clock(), qint64(coordinator.config().sessionIdleSeconds) * 1000,
                 qint64(coordinator.config().sessionLifetimeSeconds) * 1000)
{
}

QByteArray DashboardApi::sessionCookie(const RequestHead& head)
{
    for (const HttpHeader& header : head.headers) {
        if (header.name.compare("Cookie", Qt::CaseInsensitive) != 0)
            continue;
        for (const QByteArray& pair : header.value.split(';')) {
            const QByteArray trimmed = pair.trimmed();
            const qsizetype equals = trimmed.indexOf('=');
            if (equals > 0 && trimmed.left(equals) == kCookieName)
                return trimmed.mid(equals + 1).trimmed();
        }
    }
    return {};
}

bool DashboardApi::isAdminToken(QByteArrayView token) const
{
    return !token.isEmpty() && m_coordinator.admission().isAdminTokenHash(Tokens::hash(token));
}

std::optional<HttpResponse> DashboardApi::crossSiteRefusal(const RequestHead& head)
{
    // A browser names where a request comes from; only this origin's own page may use its cookie.
    const QByteArray site = head.header("Sec-Fetch-Site").trimmed().toLower();
    if (!site.isEmpty() && site != "same-origin" && site != "none")
        return HttpResponse::error(
            403, QStringLiteral("cross-site request refused (Sec-Fetch-Site: %1): the dashboard's "
                                "session works from its own page only")
                     .arg(QString::fromLatin1(site)));
    const QByteArray origin = head.header("Origin").trimmed();
    if (!origin.isEmpty()) {
        const QByteArray expected = "https://" + head.header("Host").trimmed();
        if (origin.compare(expected, Qt::CaseInsensitive) != 0)
            return HttpResponse::error(
                403, QStringLiteral("cross-site request refused: Origin %1 is not this coordinator "
                                    "(%2)")
                         .arg(QString::fromLatin1(origin), QString::fromLatin1(expected)));
    }
    return std::nullopt;
}

std::variant<DashboardApi::Caller, HttpResponse> DashboardApi::authenticate(const RequestHead& head,
                                                                            bool changesState)
{
    // An Authorization header is an explicit choice: it decides, even when a cookie comes along.
    if (!head.header("Authorization").isEmpty()) {
        const QByteArray token = head.bearerToken();
        if (token.isEmpty())
            return needsCredentials();
        if (!isAdminToken(token))
            return HttpResponse::error(401,
                                       QStringLiteral("the admin token is not valid for this coordinator"));
        return Caller{Via::Token, {}};
    }
    const QByteArray id = sessionCookie(head);
    if (id.isEmpty())
        return needsCredentials();
    if (!m_sessions.use(id))
        return HttpResponse::error(
            401, QStringLiteral("the dashboard session has expired or was ended; log in again"));
    if (auto refusal = crossSiteRefusal(head))
        return *refusal;
    if (changesState && !m_sessions.csrfMatches(id, head.header(kCsrfHeader).trimmed()))
        return HttpResponse::error(403,
                                   QStringLiteral("a dashboard request that changes something must carry its "
                                                  "session's %1 header (reload the page)")
                                       .arg(QString::fromLatin1(kCsrfHeader)));
    return Caller{Via::Session, id};
}

std::optional<std::variant<BodyPolicy, HttpResponse>> DashboardApi::admitOutsideApi(const RequestHead& head)
{
    const QList<QByteArray> parts = segments(head);
    const bool page = parts.isEmpty() || (parts.size() == 1 && parts[0] == "index.html") ||
                      (parts.size() == 2 && parts[0] == "assets");
    const bool metrics = parts.size() == 1 && parts[0] == "metrics";
    if (!page && !metrics)
        return std::nullopt;
    if (!readOnly(head.method)) {
        HttpResponse refusal = HttpResponse::error(405, QStringLiteral("use GET"));
        refusal.headers.append(HttpHeader{"Allow", "GET, HEAD"});
        return refusal;
    }
    if (page)
        return BodyPolicy{0, false}; // the page holds no data: everything it shows comes from the admin API
    if (m_coordinator.config().metricsAccess == CoordinatorConfig::MetricsAccess::Loopback &&
        isLoopback(head.remoteAddress))
        return BodyPolicy{0, false};
    auto who = authenticate(head, false);
    if (auto* refusal = std::get_if<HttpResponse>(&who))
        return *refusal;
    return BodyPolicy{0, false};
}

std::variant<BodyPolicy, HttpResponse> DashboardApi::admitAdmin(const RequestHead& head,
                                                                const QList<QByteArray>& parts)
{
    if (parts.size() == 4 && parts[3] == "session" && head.method == "POST") {
        // Logging in needs no credentials but the token in the body; a foreign page may not log a browser in.
        if (auto refusal = crossSiteRefusal(head))
            return *refusal;
        return BodyPolicy{kLoginBody, false};
    }
    auto who = authenticate(head, !readOnly(head.method));
    if (auto* refusal = std::get_if<HttpResponse>(&who))
        return *refusal;
    return BodyPolicy{kAdminBody, false};
}

QByteArray DashboardApi::cookie(const QByteArray& value, qint64 maxAgeSeconds) const
{
    // __Host-: the browser keeps it only from a secure origin, for Path=/ and without Domain.
    return QByteArray(kCookieName) + '=' + value +
           "; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=" + QByteArray::number(maxAgeSeconds);
}

HttpResponse DashboardApi::login(const HttpRequest& request)
{
    QByteArray token = request.head.bearerToken();
    if (token.isEmpty() && !request.body.trimmed().isEmpty()) {
        const QJsonDocument doc = QJsonDocument::fromJson(request.body);
        if (!doc.isObject())
            return HttpResponse::error(
                400, QStringLiteral("the request body must be a JSON object: {\"token\": \"gla_...\"}"));
        token = doc.object().value(QStringLiteral("token")).toString().trimmed().toUtf8();
    }
    if (token.isEmpty())
        return HttpResponse::error(
            401, QStringLiteral("log in with the admin token: {\"token\": \"gla_...\"} (it is in "
                                "the data directory's admin-token file)"));
    if (!isAdminToken(token))
        return HttpResponse::error(401, QStringLiteral("the admin token is not valid for this coordinator"));
    const AdminSessions::Created session = m_sessions.create();
    QJsonObject reply;
    reply.insert(QStringLiteral("csrf_token"), QString::fromLatin1(session.csrfToken));
    reply.insert(QStringLiteral("expires_ms"), session.expiresMs);
    reply.insert(QStringLiteral("idle_seconds"), m_sessions.idleMs() / 1000);
    HttpResponse response = HttpResponse::json(201, reply);
    response.headers.append(HttpHeader{"Set-Cookie", cookie(session.id, m_sessions.lifetimeMs() / 1000)});
    response.headers.append(HttpHeader{"Cache-Control", "no-store"});
    return response;
}

HttpResponse DashboardApi::sessionInfo(const RequestHead& head)
{
    const QByteArray id = head.header("Authorization").isEmpty() ? sessionCookie(head) : QByteArray();
    QJsonObject reply;
    reply.insert(QStringLiteral("via"), id.isEmpty() ? QStringLiteral("token") : QStringLiteral("session"));
    if (!id.isEmpty())
        reply.insert(QStringLiteral("csrf_token"), QString::fromLatin1(m_sessions.csrfToken(id)));
    reply.insert(QStringLiteral("idle_seconds"), m_sessions.idleMs() / 1000);
    HttpResponse response = HttpResponse::json(200, reply);
    response.headers.append(HttpHeader{"Cache-Control", "no-store"});
    return response;
}

HttpResponse DashboardApi::logout(const RequestHead& head)
{
    const QByteArray id = sessionCookie(head);
    if (!id.isEmpty())
        m_sessions.remove(id);
    HttpResponse response =
        HttpResponse::json(200, QJsonObject{{QStringLiteral("logged_out"), !id.isEmpty()}});
    response.headers.append(HttpHeader{"Set-Cookie", cookie("", 0)});
    return response;
}

HttpResponse DashboardApi::asset(const RequestHead& head) const
{
    QByteArray path = head.path();
    if (path == "/index.html")
        path = "/";
    for (const DashboardAsset& file : dashboardAssets()) {
        if (file.path != path)
            continue;
        const bool gzip = acceptsGzip(head) && !file.gzipBody.isEmpty();
        // A strong tag names the bytes sent: the compressed copy has a tag of its own.
        const QByteArray etag = '"' + file.etag.toByteArray() + (gzip ? "-gz\"" : "\"");
        HttpResponse response;
        response.headers.append(HttpHeader{"ETag", etag});
        response.headers.append(
            HttpHeader{"Cache-Control", "no-cache"}); // revalidated: a new binary, new files
        response.headers.append(HttpHeader{"Vary", "Accept-Encoding"});
        response.headers.append(HttpHeader{"X-Content-Type-Options", "nosniff"});
        if (path == "/") {
            response.headers.append(HttpHeader{"Content-Security-Policy", kContentSecurityPolicy});
            response.headers.append(HttpHeader{"X-Frame-Options", "DENY"});
            response.headers.append(HttpHeader{"Referrer-Policy", "no-referrer"});
        }
        const QByteArray ifNoneMatch = head.header("If-None-Match");
        if (!ifNoneMatch.isEmpty() && (ifNoneMatch.contains(etag) || ifNoneMatch.trimmed() == "*")) {
            response.status = 304;
            return response;
        }
        response.status = 200;
        response.contentType = file.contentType.toByteArray();
        if (gzip) {
            response.headers.append(HttpHeader{"Content-Encoding", "gzip"});
            response.body = QByteArray::fromRawData(file.gzipBody.data(), file.gzipBody.size());
        } else {
            response.body = QByteArray::fromRawData(file.body.data(), file.body.size());
        }
        return response;
    }
    return HttpResponse::error(404, QStringLiteral("no such file: %1").arg(QString::fromUtf8(path)));
}

bool DashboardApi::handle(HttpRequest& request, Responder& respond)
{
    const RequestHead& head = request.head;
    const QList<QByteArray> parts = segments(head);
    Coordinator& c = m_coordinator;
    const bool api = parts.size() >= 2 && parts[0] == "api" && parts[1] == "v1";
    if (!api) {
        if (parts.size() == 1 && parts[0] == "metrics") {
            c.state().post([&c, this, respond] {
                respond(c.views().metricsText([this](metrics::MetricsRegistry& registry) {
                    registry.setGaugeFamily("gleaner_admin_sessions", "Dashboard sessions logged in.",
                                            {{{}, double(m_sessions.count())}});
                }));
            });
            return true;
        }
        respond(asset(head));
        return true;
    }
    if (parts.value(2) != "admin")
        return false;
    const QByteArray what = parts.value(3);
    const QByteArray& method = head.method;
    if (what == "session" && parts.size() == 4) {
        if (method == "POST")
            respond(login(request));
        else if (method == "GET")
            respond(sessionInfo(head));
        else if (method == "DELETE")
            respond(logout(head));
        else
            return false;
        return true;
    }
    if (what == "events" && parts.size() == 4 && method == "GET") {
        respond(EventStream::open(c.events(), QJsonObject{{QStringLiteral("now_ms"), c.clock().nowMs()}}));
        return true;
    }
    bool idOk = false;
    const qint64 id = parts.value(4).toLongLong(&idOk);
    if (what == "jobs" && parts.size() == 6 && idOk && parts[5] == "history" && method == "GET") {
        c.state().post([&c, id, respond] { respond(c.views().jobHistory(id)); });
        return true;
    }
    if (what == "agents" && parts.size() == 4 && method == "GET") {
        c.state().post([&c, respond] { respond(c.views().listAgentsDetailed()); });
        return true;
    }
    if (what == "agents" && parts.size() == 5 && method == "GET") {
        c.state().post(
            [&c, agent = QString::fromLatin1(parts[4]), respond] { respond(c.views().agentDetail(agent)); });
        return true;
    }
    return false;
}

} // namespace gleaner::coordinator::dashboard
