#pragma once
// A real coordinator (ManualClock, scratch data directory) behind the real ApiHandler and HTTPS server on an
// ephemeral loopback port, with the helpers the dashboard's and the metrics' tests share: an admin session,
// an enrolled agent, a tiny job, uploads.

#include "CoordinatorFixture.h"

#include "api/ApiHandler.h"
#include "http/HttpServer.h"
#include "http/HttpsClient.h"

#include <QJsonObject>

#include <memory>

namespace gleaner::test {

struct AdminLogin
{
    QByteArray cookie; // "__Host-gleaner_session=gls_..."
    QByteArray csrf;
    QByteArray setCookie; // the Set-Cookie header as sent
};

class DashboardFixture
{
public:
    // `tweak` may change the configuration before the coordinator opens.
    bool start(const std::function<void(coordinator::CoordinatorConfig&)>& tweak = {});
    void stop();

    coordinator::ClientResponse send(const QByteArray& method, const QByteArray& target,
                                     const QByteArray& token = {}, const QByteArray& body = {},
                                     const QList<coordinator::HttpHeader>& headers = {});
    // With the session's cookie, the browser's same-origin headers and (for state changes) its CSRF header.
    coordinator::ClientResponse browser(const QByteArray& method, const QByteArray& target,
                                        const AdminLogin& login, const QByteArray& body = {},
                                        const QList<coordinator::HttpHeader>& extra = {});
    AdminLogin login();
    QByteArray origin() const; // "https://127.0.0.1:PORT"

    QByteArray enrollAgent(QString* agentId = nullptr, const QString& name = QStringLiteral("box"));
    qint64 submitTinyJob(int shards = 2, int maxEpochs = 3,
                         const QString& extra = QStringLiteral(R"(, "overlap_epochs": false)"));
    // Leases one task; its lease id, or empty.
    QByteArray leaseOne(const QByteArray& agentToken, qint64* baseVersion = nullptr);
    // Uploads the current weights as the lease's result (filled with `fill`), with loss `loss`.
    coordinator::ClientResponse upload(const QByteArray& agentToken, const QByteArray& leaseId,
                                       qint64 baseVersion, float fill = 0.5f, double loss = 0.25);
    TensorBundle weights(qint64 job);

    static QJsonObject json(const coordinator::ClientResponse& response);

    CoordinatorFixture f;
    std::unique_ptr<coordinator::ApiHandler> handler;
    std::unique_ptr<coordinator::HttpServer> server;
    std::unique_ptr<coordinator::HttpsClient> client;
    QString dataset;
};

} // namespace gleaner::test
