#pragma once
// A small synchronous HTTPS client for the coordinator's command line, the tests and the benchmarks (agents
// use libcurl). It keeps one connection alive across requests and reconnects once when the server closed it
// in between. It verifies the server's certificate chain against a pinned CA certificate (or the system
// store), and the host name or IP address it was given against the certificate; verification is never
// switched off.
//
// Not thread-safe: one client per thread. Boost.Beast stays behind this header (pimpl).

#include "Result.h"
#include "http/HttpTypes.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <memory>

namespace gleaner::coordinator {

struct ClientResponse
{
    int status = 0;
    QList<HttpHeader> headers;
    QByteArray body; // empty when download() wrote the body to its file

    QByteArray header(QByteArrayView name) const; // first match, case-insensitive; empty when absent
};

class HttpsClient
{
public:
    // `caCertificatePath`: a PEM file holding the coordinator's certificate or the CA that signed it; empty
    // trusts the system's certificate authorities. Problems with it are reported by the first request.
    HttpsClient(QString host, quint16 port, QString caCertificatePath = {});
    ~HttpsClient();
    HttpsClient(const HttpsClient&) = delete;
    HttpsClient& operator=(const HttpsClient&) = delete;

    // Connecting (TCP and TLS) must finish within connectMs; each read or write of a request within
    // operationMs, counted afresh whenever bytes move, so a long download is not cut off while it progresses.
    void setTimeouts(int connectMs, int operationMs); // defaults: 10 000 and 60 000
    // The largest answer body request() keeps in memory; larger ones fail. Default 256 MiB.
    void setMaxBodyBytes(qint64 bytes);

    // Sends one request and reads its answer. Any HTTP status is a successful result; errors are transport
    // failures (cannot connect, untrusted certificate, timeout, malformed answer).
    Result<ClientResponse> request(const QByteArray& method, const QByteArray& target,
                                   const QByteArray& body = {}, const QByteArray& contentType = {},
                                   const QList<HttpHeader>& headers = {}, const QByteArray& bearerToken = {});
    // GET into a file: a 200 or 206 body is written to `filePath` (created or truncated); any other answer is
    // returned in `body` and leaves the file alone. Pass "Range" in `headers` to resume.
    Result<ClientResponse> download(const QByteArray& target, const QString& filePath,
                                    const QList<HttpHeader>& headers = {},
                                    const QByteArray& bearerToken = {});

    // "host:port", as error messages name the server.
    QString origin() const;
    // How many connections this client has opened: a benchmark's and a test's view of keep-alive.
    int connectionsOpened() const;
    // Closes the kept-alive connection; the next request opens a new one.
    void disconnect();

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace gleaner::coordinator
