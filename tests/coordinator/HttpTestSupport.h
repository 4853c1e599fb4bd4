#pragma once
// Helpers of test_httpserver: test certificates made with the `openssl` command-line tool, a TLS client that
// writes raw bytes (what HttpsClient would never send: partial heads, trickled bodies, old TLS versions), and
// a RequestHandler whose decisions each test sets.

#include "http/HttpServer.h"
#include "http/HttpTypes.h"

#include <QByteArray>
#include <QList>
#include <QString>
#include <QTemporaryDir>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <variant>

struct ssl_ctx_st;
struct ssl_st;

namespace gleaner::test {

struct TestCertificate
{
    QString certificatePath;
    QString keyPath;
};

// A self-signed P-256 certificate for `subjectAltName` (e.g. "DNS:localhost,IP:127.0.0.1"), valid 2 days.
// Empty paths (and a failed QVERIFY in the caller's test) when openssl fails.
TestCertificate makeCertificate(const QString& dir, const QString& name, const QString& subjectAltName);

// The certificates of a test run, and servers on ephemeral loopback ports.
class HttpFixture
{
public:
    // Makes the certificates; false when the openssl tool failed.
    bool init();
    QString dir() const { return m_dir->path(); }

    TestCertificate server;    // CN=localhost, DNS:localhost and IP:127.0.0.1: what clients pin
    TestCertificate stranger;  // the same names under another key: a server clients must not trust
    TestCertificate otherName; // DNS:other.example only: a trusted certificate for the wrong host

    // A started server with small defaults (2 threads, uploads into `uploadDir`); null when start() failed.
    std::unique_ptr<coordinator::HttpServer>
    start(coordinator::RequestHandler& handler, const QString& uploadDir,
          const std::function<void(coordinator::HttpServerOptions&)>& tweak = {},
          const TestCertificate* certificate = nullptr) const;

private:
    std::unique_ptr<QTemporaryDir> m_dir;
};

struct RawResponse
{
    int status = 0;
    QByteArray head; // status line and headers
    QByteArray body;
    QByteArray header(QByteArrayView name) const;
};

// One TLS connection over a non-blocking socket; every wait is bounded by a timeout.
class RawTlsClient
{
public:
    RawTlsClient() = default;
    ~RawTlsClient();
    RawTlsClient(const RawTlsClient&) = delete;
    RawTlsClient& operator=(const RawTlsClient&) = delete;

    // Connects to 127.0.0.1:port and verifies the server against `caPath`. `maxVersion` (TLS1_1_VERSION ...)
    // caps the protocol; 0 leaves it open. `from` is the local address to connect from (another loopback
    // address such as "127.0.0.2" is another client to the server); empty lets the system choose. Returns an
    // error text, empty on success.
    QString connect(quint16 port, const QString& caPath, int maxVersion = 0, const QString& from = {});
    bool send(QByteArrayView data);
    // Reads one response (head, and a body of Content-Length bytes); status 0 when none arrived in time.
    RawResponse readResponse(int timeoutMs = 5000);
    // Reads until `marker` arrived (a streamed answer: server-sent events); returns everything up to and including
    // it, and keeps the rest. Empty when it did not arrive within timeoutMs.
    QByteArray readUntil(QByteArrayView marker, int timeoutMs);
    // True when the server closes the connection within timeoutMs; what it sent meanwhile is kept.
    bool waitClosed(int timeoutMs);
    int closedAfterMs() const { return m_closedAfterMs; }

private:
    // Appends what arrives within timeoutMs; false on timeout or when the peer closed.
    bool readMore(int timeoutMs);
    void close();

    int m_fd = -1;
    ssl_ctx_st* m_context = nullptr;
    ssl_st* m_ssl = nullptr;
    bool m_peerClosed = false;
    int m_closedAfterMs = -1;
    QByteArray m_buffer;
};

// A handler whose admit and handle each test replaces; by default it admits 64 KiB in memory and echoes
// {"method", "path", "body", "bytes", "token"} as JSON.
class FakeHandler : public coordinator::RequestHandler
{
public:
    FakeHandler();
    std::variant<coordinator::BodyPolicy, coordinator::HttpResponse>
    admit(const coordinator::RequestHead& head) override;
    void handle(coordinator::HttpRequest request, coordinator::Responder respond) override;
    void observe(const coordinator::RequestHead& head, const coordinator::RequestOutcome& outcome) override;
    // What observe() was told, in order.
    QList<coordinator::RequestOutcome> outcomes() const;

    std::function<std::variant<coordinator::BodyPolicy, coordinator::HttpResponse>(
        const coordinator::RequestHead&)>
        onAdmit;
    std::function<void(coordinator::HttpRequest, coordinator::Responder)> onHandle;
    std::atomic<int> admitted{0};
    std::atomic<int> handled{0};

private:
    mutable std::mutex m_mutex;
    QList<coordinator::RequestOutcome> m_outcomes;
};

} // namespace gleaner::test
