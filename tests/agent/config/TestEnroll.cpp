// gleaner-agent enroll against a real coordinator over HTTPS on loopback: what it keeps, what it pins, and how
// it refuses.
#include "CoordinatorFixture.h"
#include "TestSupport.h"

#include "api/ApiHandler.h"
#include "config/Enroller.h"
#include "crypto/TlsCertificate.h"
#include "http/HttpServer.h"

#include <QFile>
#include <QJsonDocument>
#include <QProcess>
#include <QTest>

#include <sys/stat.h>

using namespace gleaner;

class TestEnroll : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void enrollsAndPinsTheCoordinator();
    void refusals_data();
    void refusals();
    void commandLine();
    void enrollsFromThePolicyFile();

private:
    QByteArray enrollmentToken();
    agent::EnrollOptions options(const QString& dataDir);

    test::CoordinatorFixture f;
    std::unique_ptr<coordinator::ApiHandler> m_handler;
    std::unique_ptr<coordinator::HttpServer> m_server;
};

void TestEnroll::init()
{
    QVERIFY(f.setUp(/*openEnrollment=*/false));
    m_handler = std::make_unique<coordinator::ApiHandler>(*f.core);
    coordinator::HttpServerOptions server;
    server.certificatePath = f.dir.certificatePath();
    server.privateKeyPath = f.dir.tlsKeyPath();
    server.uploadDir = f.dir.uploadsDir();
    m_server = std::make_unique<coordinator::HttpServer>(server, *m_handler);
    QVERIFY(m_server->start().ok());
}

void TestEnroll::cleanup()
{
    m_server.reset();
    m_handler.reset();
    f.core.reset();
}

QByteArray TestEnroll::enrollmentToken()
{
    const coordinator::HttpResponse r =
        f.core->state().call([&] { return f.core->enrollment().createToken({}); });
    return QJsonDocument::fromJson(r.body).object().value(QStringLiteral("token")).toString().toLatin1();
}

agent::EnrollOptions TestEnroll::options(const QString& dataDir)
{
    agent::EnrollOptions o;
    o.url = QStringLiteral("https://127.0.0.1:%1").arg(m_server->port());
    o.token = QString::fromLatin1(enrollmentToken());
    o.caFile = f.dir.certificatePath();
    o.name = QStringLiteral("lab-42");
    o.dataDir = dataDir;
    return o;
}

void TestEnroll::enrollsAndPinsTheCoordinator()
{
    const auto scratch = test::scratchDir();
    const QString dir = scratch->filePath(QStringLiteral("agent"));
    auto enrolled = agent::enrollAgent(options(dir));
    QVERIFY2(enrolled.ok(), qPrintable(enrolled.error()));
    QCOMPARE(enrolled->name, QStringLiteral("lab-42"));

    auto loaded = agent::AgentConfig::load(dir);
    QVERIFY(loaded.ok());
    QCOMPARE(loaded->agentId, enrolled->agentId);
    QFile token(agent::AgentConfig::tokenPath(dir));
    QVERIFY(token.open(QIODevice::ReadOnly));
    QVERIFY(token.readAll().startsWith("gag_"));
    struct stat info{};
    QCOMPARE(::stat(QFile::encodeName(token.fileName()).constData(), &info), 0);
    QCOMPARE(info.st_mode & 0777, 0600u); // only the agent's user reads its token
    QFile key(agent::AgentConfig::signingKeyPath(dir));
    QVERIFY(key.open(QIODevice::ReadOnly));
    QCOMPARE(key.readAll(), f.init.signingPublicKeyPem); // the manifests' key, pinned
    QFile ca(agent::AgentConfig::caPath(dir));
    QFile original(f.dir.certificatePath());
    QVERIFY(ca.open(QIODevice::ReadOnly) && original.open(QIODevice::ReadOnly));
    QCOMPARE(ca.readAll(), original.readAll());

    // The coordinator knows it by the name it gave.
    const coordinator::HttpResponse agents =
        f.core->state().call([&] { return f.core->enrollment().listAgents(); });
    QVERIFY(agents.body.contains("lab-42"));
}

void TestEnroll::refusals_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("message");
    QTest::newRow("not https") << "http" << "expected https://HOST:PORT";
    QTest::newRow("path in URL") << "path" << "expected https://HOST:PORT";
    QTest::newRow("unknown token") << "token" << "not known to this coordinator";
    QTest::newRow("certificate of another server") << "ca" << "not trusted";
    QTest::newRow("not a certificate") << "garbage-ca" << "is not a PEM certificate";
    QTest::newRow("already enrolled") << "twice" << "already holds an enrolled agent";
}

void TestEnroll::refusals()
{
    QFETCH(QString, kind);
    QFETCH(QString, message);
    const auto scratch = test::scratchDir();
    agent::EnrollOptions o = options(scratch->filePath(QStringLiteral("agent")));
    if (kind == u"http")
        o.url.replace(u"https"_qs, u"http"_qs);
    else if (kind == u"path")
        o.url += QStringLiteral("/api/v1");
    else if (kind == u"token")
        o.token = QStringLiteral("gle_unknown");
    else if (kind == u"ca" || kind == u"garbage-ca") {
        const QString other = scratch->filePath(QStringLiteral("other.pem"));
        auto identity = TlsCertificate::generateSelfSigned({QStringLiteral("127.0.0.1")});
        QFile file(other);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(kind == u"ca" ? identity->certificatePem : QByteArray("not a certificate"));
        file.close();
        o.caFile = other;
    } else if (kind == u"twice") {
        QVERIFY(agent::enrollAgent(o).ok());
        o.token = QString::fromLatin1(enrollmentToken());
    }
    auto result = agent::enrollAgent(o);
    QVERIFY(!result.ok());
    QVERIFY2(result.error().contains(message), qPrintable(result.error()));
    if (kind != u"twice")
        QVERIFY(!agent::AgentConfig::isEnrolled(o.dataDir)); // nothing half-enrolled is left
}

void TestEnroll::commandLine()
{
    const auto scratch = test::scratchDir();
    QProcess help;
    help.start(QStringLiteral(GLEANER_AGENT_BIN), {QStringLiteral("enroll"), QStringLiteral("--help")});
    QVERIFY(help.waitForFinished());
    QCOMPARE(help.exitCode(), 0);
    QVERIFY(help.readAllStandardOutput().contains("--ca"));

    const agent::EnrollOptions o = options(scratch->filePath(QStringLiteral("agent")));
    QProcess enroll;
    enroll.start(QStringLiteral(GLEANER_AGENT_BIN),
                 {QStringLiteral("enroll"), o.url, QStringLiteral("--token"), o.token, QStringLiteral("--ca"), o.caFile,
                  QStringLiteral("--data-dir"), o.dataDir, QStringLiteral("--json")});
    QVERIFY(enroll.waitForFinished(60'000));
    QCOMPARE(enroll.exitCode(), 0);
    QCOMPARE(QJsonDocument::fromJson(enroll.readAllStandardOutput()).object().value(QStringLiteral("data_dir")).toString(),
             o.dataDir);

    // The token through standard input (--token-file -): it never shows in the process list.
    const agent::EnrollOptions piped = options(scratch->filePath(QStringLiteral("piped")));
    QProcess fromStdin;
    fromStdin.start(QStringLiteral(GLEANER_AGENT_BIN),
                    {QStringLiteral("enroll"), piped.url, QStringLiteral("--token-file"), QStringLiteral("-"),
                     QStringLiteral("--ca"), piped.caFile, QStringLiteral("--data-dir"), piped.dataDir});
    fromStdin.write(piped.token.toUtf8() + "\n");
    fromStdin.closeWriteChannel();
    QVERIFY(fromStdin.waitForFinished(60'000));
    QVERIFY2(fromStdin.exitCode() == 0, fromStdin.readAllStandardError().constData());
    QVERIFY(agent::AgentConfig::isEnrolled(piped.dataDir));
    QProcess both;
    both.start(QStringLiteral(GLEANER_AGENT_BIN),
               {QStringLiteral("enroll"), piped.url, QStringLiteral("--token"), piped.token,
                QStringLiteral("--token-file"), QStringLiteral("-")});
    QVERIFY(both.waitForFinished());
    QCOMPARE(both.exitCode(), 2);

    QProcess unknown;
    unknown.start(QStringLiteral(GLEANER_AGENT_BIN), {QStringLiteral("fly")});
    QVERIFY(unknown.waitForFinished());
    QCOMPARE(unknown.exitCode(), 2);
}

// A managed machine's first start: the policy file names the coordinator, the token and the certificate's
// fingerprint; `run` enrolls with them and pins that certificate, or refuses a server that presents another.
void TestEnroll::enrollsFromThePolicyFile()
{
    const auto scratch = test::scratchDir();
    QFile cert(f.dir.certificatePath());
    QVERIFY(cert.open(QIODevice::ReadOnly));
    const QByteArray pem = cert.readAll();
    const QString fingerprint = *TlsCertificate::fingerprint(pem);
    const QString tokenFile = scratch->filePath(QStringLiteral("token"));
    QVERIFY(test::writeFile(tokenFile, QByteArray(enrollmentToken() + "\n")));
    const QString url = QStringLiteral("https://127.0.0.1:%1").arg(m_server->port());
    const auto policyWith = [&](const QString& sha) {
        const QString path = scratch->filePath(QStringLiteral("policy-%1.json").arg(sha.left(2)));
        const QJsonObject enrollment{{QStringLiteral("url"), url},
                                     {QStringLiteral("token_file"), tokenFile},
                                     {QStringLiteral("certificate_sha256"), sha},
                                     {QStringLiteral("name_prefix"), QStringLiteral("fleet-")}};
        test::writeFile(path, QJsonDocument(QJsonObject{{QStringLiteral("enrollment"), enrollment}}).toJson());
        return path;
    };
    const auto run = [&](const QString& dataDir, const QString& policy, QByteArray* err) {
        QProcess agent;
        agent.start(QStringLiteral(GLEANER_AGENT_BIN),
                    {QStringLiteral("run"), QStringLiteral("--data-dir"), dataDir, QStringLiteral("--policy-file"),
                     policy, QStringLiteral("--dedicated"), QStringLiteral("--until-empty"), QStringLiteral("--idle-exit"),
                     QStringLiteral("1")});
        if (!agent.waitForFinished(60'000))
            agent.kill();
        *err = agent.readAllStandardError();
        return agent.exitCode();
    };

    // Another certificate's fingerprint: refused, naming what the server presented; nothing enrolled.
    QString wrong = fingerprint;
    wrong[0] = wrong[0] == u'0' ? u'1' : u'0';
    QByteArray err;
    const QString refusedDir = scratch->filePath(QStringLiteral("refused"));
    QCOMPARE(run(refusedDir, policyWith(wrong), &err), 1);
    QVERIFY2(err.contains("presented no certificate with the SHA-256 fingerprint the policy pins"), err.constData());
    QVERIFY2(err.contains(fingerprint.toLatin1()), err.constData());
    QVERIFY(!agent::AgentConfig::isEnrolled(refusedDir));

    // The right one, written without colons and in lower case: enrolled, that certificate pinned, then it runs.
    const QString dir = scratch->filePath(QStringLiteral("fleet"));
    QCOMPARE(run(dir, policyWith(QString(fingerprint).remove(u':').toLower()), &err), 0);
    QVERIFY2(err.contains("enrolled as \"fleet-"), err.constData());
    QVERIFY(agent::AgentConfig::isEnrolled(dir));
    QFile pinned(agent::AgentConfig::caPath(dir));
    QVERIFY(pinned.open(QIODevice::ReadOnly));
    QCOMPARE(*TlsCertificate::fingerprint(pinned.readAll()), fingerprint);
    // A second start does not enroll again.
    QCOMPARE(run(dir, policyWith(QString(fingerprint).remove(u':').toLower()), &err), 0);
    QVERIFY2(!err.contains("enrolled as"), err.constData());
}

QTEST_GUILESS_MAIN(TestEnroll)
#include "TestEnroll.moc"
