#include "DashboardFixture.h"

#include "format/SafeTensors.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

namespace gleaner::test {

using namespace coordinator;

bool DashboardFixture::start(const std::function<void(CoordinatorConfig&)>& tweak)
{
    f.config = CoordinatorConfig();
    if (tweak)
        tweak(f.config);
    if (!f.setUp(/*openEnrollment=*/false))
        return false;
    dataset = f.scratch->filePath(QStringLiteral("dataset"));
    writeSyntheticDataset(dataset);
    handler = std::make_unique<ApiHandler>(*f.core);
    HttpServerOptions options;
    options.certificatePath = f.dir.certificatePath();
    options.privateKeyPath = f.dir.tlsKeyPath();
    options.uploadDir = f.dir.uploadsDir();
    options.trustedProxies = f.config.trustedProxies; // as serve passes them
    server = std::make_unique<HttpServer>(options, *handler);
    if (const Status started = server->start(); !started) {
        qWarning() << started.error();
        return false;
    }
    client =
        std::make_unique<HttpsClient>(QStringLiteral("127.0.0.1"), server->port(), f.dir.certificatePath());
    return true;
}

void DashboardFixture::stop()
{
    client.reset();
    if (server)
        server->stop();
    server.reset();
    handler.reset();
    f.core.reset();
}

QJsonObject DashboardFixture::json(const ClientResponse& response)
{
    return QJsonDocument::fromJson(response.body).object();
}

ClientResponse DashboardFixture::send(const QByteArray& method, const QByteArray& target,
                                      const QByteArray& token, const QByteArray& body,
                                      const QList<HttpHeader>& headers)
{
    auto response = client->request(method, target, body, body.isEmpty() ? QByteArray() : "application/json",
                                    headers, token);
    if (!response) {
        qWarning() << response.error();
        return {};
    }
    return *response;
}

QByteArray DashboardFixture::origin() const
{
    return "https://127.0.0.1:" + QByteArray::number(server->port());
}

ClientResponse DashboardFixture::browser(const QByteArray& method, const QByteArray& target,
                                         const AdminLogin& login, const QByteArray& body,
                                         const QList<HttpHeader>& extra)
{
    QList<HttpHeader> headers{{"Cookie", login.cookie}, {"Sec-Fetch-Site", "same-origin"}};
    if (method != "GET" && method != "HEAD") {
        headers.append({"Origin", origin()});
        headers.append({"X-Gleaner-CSRF", login.csrf});
    }
    headers.append(extra);
    return send(method, target, {}, body, headers);
}

AdminLogin DashboardFixture::login()
{
    const QByteArray body =
        QJsonDocument(QJsonObject{{QStringLiteral("token"), QString::fromLatin1(f.init.adminToken)}})
            .toJson(QJsonDocument::Compact);
    const ClientResponse r = send("POST", "/api/v1/admin/session", {}, body,
                                  {{"Origin", origin()}, {"Sec-Fetch-Site", "same-origin"}});
    AdminLogin login;
    login.setCookie = r.header("Set-Cookie");
    login.cookie = login.setCookie.left(login.setCookie.indexOf(';'));
    login.csrf = json(r).value(QStringLiteral("csrf_token")).toString().toLatin1();
    if (r.status != 201)
        qWarning() << "login refused:" << r.status << r.body;
    return login;
}

QByteArray DashboardFixture::enrollAgent(QString* agentId, const QString& name)
{
    const ClientResponse created = send("POST", "/api/v1/admin/tokens", f.init.adminToken, "{}");
    const QByteArray token = json(created).value(QStringLiteral("token")).toString().toLatin1();
    const QJsonObject request{
        {QStringLiteral("name"), name},
        {QStringLiteral("platform"), QStringLiteral("linux-x86_64")},
        {QStringLiteral("hardware"),
         QJsonObject{{QStringLiteral("cores"), 8}, {QStringLiteral("gpu"), QStringLiteral("none")}}},
        {QStringLiteral("enrollment_token"), QString::fromLatin1(token)}};
    const ClientResponse enrolled =
        send("POST", "/api/v1/agents/enroll", {}, QJsonDocument(request).toJson(QJsonDocument::Compact));
    if (agentId)
        *agentId = json(enrolled).value(QStringLiteral("agent_id")).toString();
    return json(enrolled).value(QStringLiteral("agent_token")).toString().toLatin1();
}

qint64 DashboardFixture::submitTinyJob(int shards, int maxEpochs, const QString& extra)
{
    const ClientResponse submitted = send("POST", "/api/v1/admin/jobs", f.init.adminToken,
                                          tinyJobSpec(dataset, shards, maxEpochs, 0.99, 60, extra));
    if (submitted.status != 201) {
        qWarning() << submitted.body;
        return -1;
    }
    const qint64 id = json(submitted).value(QStringLiteral("id")).toInteger();
    for (int i = 0; i < 200; ++i) {
        f.core->drain();
        const ClientResponse status =
            send("GET", "/api/v1/admin/jobs/" + QByteArray::number(id), f.init.adminToken);
        if (json(status).value(QStringLiteral("state")).toString() == u"running")
            return id;
        QTest::qWait(20);
    }
    return -1;
}

QByteArray DashboardFixture::leaseOne(const QByteArray& agentToken, qint64* baseVersion)
{
    const ClientResponse leased = send("POST", "/api/v1/work/lease", agentToken, R"({"max_tasks": 1})");
    const QJsonArray tasks = json(leased).value(QStringLiteral("tasks")).toArray();
    if (tasks.isEmpty())
        return {};
    const QJsonObject task = tasks.first().toObject();
    if (baseVersion) {
        const QJsonObject manifest =
            QJsonDocument::fromJson(task.value(QStringLiteral("manifest")).toString().toUtf8()).object();
        *baseVersion = manifest.value(QStringLiteral("base_version")).toInteger();
    }
    return task.value(QStringLiteral("lease_id")).toString().toLatin1();
}

TensorBundle DashboardFixture::weights(qint64 job)
{
    f.core->drain();
    const ClientResponse r =
        send("GET", "/api/v1/admin/jobs/" + QByteArray::number(job) + "/weights", f.init.adminToken);
    auto bundle = SafeTensors::parse(r.body);
    return bundle ? *bundle : TensorBundle();
}

ClientResponse DashboardFixture::upload(const QByteArray& agentToken, const QByteArray& leaseId,
                                        qint64 baseVersion, float fill, double loss)
{
    // The weights the lease handed out, moved a little (as a local epoch would): far moves are refused.
    TensorBundle result = f.leaseBase(QString::fromLatin1(leaseId));
    result.metadata().clear();
    result.setMetadata(QStringLiteral("gleaner.nonce"), f.leaseNonce(QString::fromLatin1(leaseId)));
    for (const auto& entry : result.entries())
        if (entry.dtype == DType::F32)
            for (float& v : result.mutableValues<float>(entry))
                v += 0.01f * fill;
    result.setMetadata(QStringLiteral("gleaner.base_version"), QString::number(baseVersion));
    result.setMetadata(QStringLiteral("gleaner.samples"), QStringLiteral("64"));
    result.setMetadata(QStringLiteral("gleaner.loss"), QString::number(loss));
    result.setMetadata(QStringLiteral("gleaner.train_seconds"), QStringLiteral("0.5"));
    auto response =
        client->request("PUT", "/api/v1/work/" + leaseId + "/result", SafeTensors::serialize(result),
                        "application/octet-stream", {}, agentToken);
    return response ? *response : ClientResponse();
}

} // namespace gleaner::test
