#pragma once
// The seam between the agent's coordinator client and the network: one HTTP exchange, synchronous. The real
// implementation is CurlTransport; tests put a fake here that answers with errors, hangs, truncated and slow
// bodies, so the retry and resume logic above it is tested without sockets and without sleeping.
//
// A transport answers every request with a TransportResponse: either an HTTP answer (any status) or a
// classified transport failure. The class of the failure matters to the caller (a refused connection is worth
// retrying, an untrusted certificate is not), which is why it is an enum and not only a message.

#include <QByteArray>
#include <QList>
#include <QPair>
#include <QString>

#include <functional>

namespace gleaner::agent {

using HttpHeaderList = QList<QPair<QByteArray, QByteArray>>;

struct TransportRequest
{
    QByteArray method = "GET"; // GET, HEAD, POST, PUT
    QString url;               // https://host:port/path; other schemes are refused
    HttpHeaderList headers;
    QByteArray body;    // sent as is (with Content-Length) unless uploadFile is set
    QString uploadFile; // the body is streamed from this file (result uploads): never held in memory whole

    // When set, the body of a 200 or 206 answer goes to this file, any other answer's body to `body` of the
    // response (it is a JSON error). A 206 answer is appended at `resumeFrom` and must start there; a 200 answer
    // replaces the file from its first byte (the server ignored or refused the range).
    QString downloadFile;
    qint64 resumeFrom = 0; // > 0 with downloadFile: sends "Range: bytes=<resumeFrom>-"
    // >= 0 with downloadFile: the most bytes the file may hold once the body is in (the size its signed manifest
    // gives). A body that would take it further ends the exchange at once as Failure::Oversized and the file is
    // deleted: a broken or hostile server cannot fill the disk by sending more than it promised.
    qint64 maxDownloadBytes = -1;

    // Rate caps from the owner's policy, bytes per second; 0 = no cap.
    qint64 maxSendBytesPerSecond = 0;
    qint64 maxReceiveBytesPerSecond = 0;

    int connectTimeoutMs = 15'000; // TCP connect and TLS handshake
    // A transfer that moves no byte for this long is a hang: the server or the path died without closing.
    // Counted afresh while bytes move, so a long download at a low rate cap is not cut off.
    int stallTimeoutMs = 60'000;
    qint64 totalTimeoutMs = 0; // 0 = none (downloads of big shards may take hours at a low cap)
};

struct TransportResponse
{
    enum class Failure {
        None,       // an HTTP answer arrived: see status
        Connect,    // could not resolve or connect (refused, unreachable)
        Timeout,    // connect timeout, stall or total timeout
        Network,    // the connection broke mid-exchange, or the answer was cut short (truncated body)
        Tls,        // the certificate was not trusted or did not match the host: never retried
        Cancelled,  // the progress callback asked to stop
        LocalFile,  // the upload or download file could not be read or written
        Protocol,   // a malformed answer, a 206 for another range, or a request the transport refuses
        Oversized,  // a download's body went past maxDownloadBytes: the server sent another file; never retried
    };

    Failure failure = Failure::None;
    QString error; // the transport's message when failure != None

    int status = 0;
    HttpHeaderList headers;
    QByteArray body; // empty when it went to downloadFile
    qint64 bytesReceived = 0; // body bytes of this exchange (not counting what a resumed file held before)
    qint64 bytesSent = 0;
    int connectionsOpened = 0; // new connections this exchange needed: 0 when a kept-alive one was reused

    bool ok() const { return failure == Failure::None; }
    // First header of that name, case-insensitive; empty when absent.
    QByteArray header(QByteArrayView name) const;
};

struct TransferProgress
{
    qint64 downloaded = 0;
    qint64 downloadTotal = 0; // 0 while unknown
    qint64 uploaded = 0;
    qint64 uploadTotal = 0;
};

// Called as bytes move (and at least about once a second); returning false cancels the exchange.
using ProgressCallback = std::function<bool(const TransferProgress&)>;

class Transport
{
public:
    virtual ~Transport() = default;
    virtual TransportResponse perform(const TransportRequest& request, const ProgressCallback& progress) = 0;
};

} // namespace gleaner::agent
