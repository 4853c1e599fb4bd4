#pragma once
// The HTTP side of the admin dashboard (docs/dashboard.md): the page and its assets at `/`, `GET /metrics`,
// admin sessions, and the admin endpoints that exist for the page (live events, job history, agents with what
// they hold). It also decides who may use the admin area: the admin token as a bearer token, or a session
// cookie with the same-origin and CSRF checks a browser's ambient credential needs. ApiHandler asks it first;
// what it does not answer goes on to ApiHandler's own routes.

#include "core/Coordinator.h"
#include "dashboard/AdminSessions.h"
#include "http/HttpTypes.h"

#include <optional>
#include <variant>

namespace gleaner::coordinator::dashboard {

class DashboardApi
{
public:
    static constexpr const char* kCookieName = "__Host-gleaner_session";
    static constexpr const char* kCsrfHeader = "X-Gleaner-CSRF";

    explicit DashboardApi(Coordinator& coordinator);

    AdminSessions& sessions() { return m_sessions; }

    // A path outside /api/v1/: the page, its assets, /metrics; nullopt for every other path.
    std::optional<std::variant<BodyPolicy, HttpResponse>> admitOutsideApi(const RequestHead& head);
    // Any /api/v1/admin/... request (parts: the path's segments).
    std::variant<BodyPolicy, HttpResponse> admitAdmin(const RequestHead& head,
                                                      const QList<QByteArray>& parts);
    // Answers the dashboard's requests; false leaves the request (untouched) to the caller.
    bool handle(HttpRequest& request, Responder& respond);

    // The session cookie's value in a request; empty when there is none.
    static QByteArray sessionCookie(const RequestHead& head);

private:
    enum class Via
    {
        Token,
        Session
    };
    struct Caller
    {
        Via via = Via::Token;
        QByteArray sessionId;
    };
    // The admin token, or a live session (same-origin, and with its CSRF header when `changesState`).
    std::variant<Caller, HttpResponse> authenticate(const RequestHead& head, bool changesState);
    static std::optional<HttpResponse> crossSiteRefusal(const RequestHead& head);
    bool isAdminToken(QByteArrayView token) const;

    HttpResponse login(const HttpRequest& request);
    HttpResponse sessionInfo(const RequestHead& head);
    HttpResponse logout(const RequestHead& head);
    HttpResponse asset(const RequestHead& head) const;
    QByteArray cookie(const QByteArray& value, qint64 maxAgeSeconds) const;

    Coordinator& m_coordinator;
    AdminSessions m_sessions;
};

} // namespace gleaner::coordinator::dashboard
