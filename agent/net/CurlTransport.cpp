#include "CurlTransport.h"

#include "DownloadSink.h"
#include "NetLogging.h"
#include "RateLimiter.h"

#include <QFile>

#include <curl/curl.h>

#include <optional>

namespace gleaner::agent {

namespace {

using Failure = TransportResponse::Failure;

// An answer kept in memory (JSON, errors) larger than this is not one the coordinator sends: refuse it rather
// than let a broken or hostile server fill the agent's memory.
constexpr qint64 kMaxMemoryBody = 64LL << 20;

// libcurl's global state is set up once per process, before the first handle, from whichever thread comes
// first (a function-local static is initialised exactly once, thread-safely).
void ensureCurlGlobalInit()
{
    static const CURLcode initialised = curl_global_init(CURL_GLOBAL_DEFAULT);
    Q_UNUSED(initialised);
}

Failure classify(CURLcode code)
{
    switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        return Failure::Connect;
    case CURLE_OPERATION_TIMEDOUT:
        return Failure::Timeout;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return Failure::Tls;
    case CURLE_ABORTED_BY_CALLBACK:
        return Failure::Cancelled;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
        return Failure::Protocol;
    default:
        // Broken connections, truncated bodies (CURLE_PARTIAL_FILE), an empty reply, a handshake the server cut:
        // all worth another try.
        return Failure::Network;
    }
}

} // namespace

struct CurlTransport::Impl
{
    CURL* handle = nullptr;
    QByteArray caCertificatePath;
    QByteArray userAgent;
    int connectionsOpened = 0;
    char errorBuffer[CURL_ERROR_SIZE] = {};

    // State of the exchange in flight, read by the callbacks.
    const TransportRequest* request = nullptr;
    const ProgressCallback* progress = nullptr;
    TransportResponse* response = nullptr;
    std::optional<DownloadSink> sink;
    bool bodyDecided = false;
    bool bodyToFile = false;
    QString callbackError; // set when a callback stopped the transfer: it says why better than libcurl can
    Failure callbackFailure = Failure::None;
    QFile uploadFile;
    qint64 uploadOffset = 0; // position in request->body when uploading from memory
    RateLimiter sendLimiter;
    RateLimiter receiveLimiter;

    static size_t onHeader(char* data, size_t size, size_t count, void* self);
    static size_t onWrite(char* data, size_t size, size_t count, void* self);
    static size_t onRead(char* data, size_t size, size_t count, void* self);
    static int onProgress(void* self, curl_off_t dlTotal, curl_off_t dlNow, curl_off_t ulTotal, curl_off_t ulNow);

    size_t stop(Failure failure, QString message, size_t returnValue)
    {
        callbackFailure = failure;
        callbackError = std::move(message);
        return returnValue;
    }
};

size_t CurlTransport::Impl::onHeader(char* data, size_t size, size_t count, void* self)
{
    auto* impl = static_cast<Impl*>(self);
    const QByteArray line = QByteArray(data, qsizetype(size * count)).trimmed();
    // A status line starts the head of a new answer (after "100 Continue" the final answer follows): only the
    // final answer's headers count.
    if (line.startsWith("HTTP/")) {
        impl->response->headers.clear();
    } else if (const qsizetype colon = line.indexOf(':'); colon > 0) {
        impl->response->headers.append({line.left(colon).trimmed(), line.mid(colon + 1).trimmed()});
    }
    return size * count;
}

size_t CurlTransport::Impl::onWrite(char* data, size_t size, size_t count, void* self)
{
    auto* impl = static_cast<Impl*>(self);
    const qint64 bytes = qint64(size * count);
    if (!impl->bodyDecided) {
        impl->bodyDecided = true;
        if (impl->sink) {
            long status = 0;
            curl_easy_getinfo(impl->handle, CURLINFO_RESPONSE_CODE, &status);
            const Result<bool> toFile = impl->sink->begin(int(status), impl->response->headers);
            if (!toFile)
                return impl->stop(impl->sink->oversized() ? Failure::Oversized
                                  : status == 206         ? Failure::Protocol
                                                          : Failure::LocalFile,
                                  toFile.error(), 0);
            impl->bodyToFile = *toFile;
        }
    }
    impl->response->bytesReceived += bytes;
    if (impl->bodyToFile) {
        const Status written = impl->sink->write(data, bytes);
        if (!written)
            return impl->stop(impl->sink->oversized() ? Failure::Oversized : Failure::LocalFile, written.error(), 0);
    } else {
        if (impl->response->body.size() + bytes > kMaxMemoryBody)
            return impl->stop(Failure::Protocol,
                              QStringLiteral("the answer is larger than %1 bytes, far more than any the coordinator sends")
                                  .arg(kMaxMemoryBody),
                              0);
        impl->response->body.append(data, qsizetype(bytes));
    }
    impl->receiveLimiter.account(bytes);
    // libcurl reports progress once per pass of up to 100 reads; asking here too makes a cancel land mid-body.
    if (impl->progress && *impl->progress) {
        curl_off_t total = -1;
        curl_off_t uploaded = 0;
        curl_off_t uploadTotal = -1;
        curl_easy_getinfo(impl->handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &total);
        curl_easy_getinfo(impl->handle, CURLINFO_SIZE_UPLOAD_T, &uploaded);
        curl_easy_getinfo(impl->handle, CURLINFO_CONTENT_LENGTH_UPLOAD_T, &uploadTotal);
        const TransferProgress p{impl->response->bytesReceived, qMax<qint64>(0, total), qint64(uploaded),
                                 qMax<qint64>(0, uploadTotal)};
        if (!(*impl->progress)(p))
            return impl->stop(Failure::Cancelled, QStringLiteral("the transfer was cancelled"), 0);
    }
    return size * count;
}

size_t CurlTransport::Impl::onRead(char* data, size_t size, size_t count, void* self)
{
    auto* impl = static_cast<Impl*>(self);
    const qint64 room = impl->sendLimiter.stepBytes(qint64(size * count));
    if (impl->uploadFile.isOpen()) {
        const qint64 got = impl->uploadFile.read(data, room);
        if (got < 0)
            return impl->stop(Failure::LocalFile,
                              QStringLiteral("cannot read %1: %2")
                                  .arg(impl->uploadFile.fileName(), impl->uploadFile.errorString()),
                              CURL_READFUNC_ABORT);
        impl->sendLimiter.account(got);
        return size_t(got);
    }
    const QByteArray& body = impl->request->body;
    const qint64 n = qMin(room, body.size() - impl->uploadOffset);
    memcpy(data, body.constData() + impl->uploadOffset, size_t(n));
    impl->uploadOffset += n;
    impl->sendLimiter.account(n);
    return size_t(n);
}

int CurlTransport::Impl::onProgress(void* self, curl_off_t dlTotal, curl_off_t dlNow, curl_off_t ulTotal,
                                    curl_off_t ulNow)
{
    auto* impl = static_cast<Impl*>(self);
    if (!impl->progress || !*impl->progress)
        return 0;
    const TransferProgress p{qint64(dlNow), qint64(dlTotal), qint64(ulNow), qint64(ulTotal)};
    if ((*impl->progress)(p))
        return 0;
    impl->callbackFailure = Failure::Cancelled;
    impl->callbackError = QStringLiteral("the transfer was cancelled");
    return 1;
}

CurlTransport::CurlTransport(QString caCertificatePath, QByteArray userAgent) : m_impl(std::make_unique<Impl>())
{
    ensureCurlGlobalInit();
    m_impl->handle = curl_easy_init();
    m_impl->caCertificatePath = QFile::encodeName(caCertificatePath);
    m_impl->userAgent = std::move(userAgent);
}

CurlTransport::~CurlTransport()
{
    if (m_impl->handle)
        curl_easy_cleanup(m_impl->handle);
}

int CurlTransport::connectionsOpened() const
{
    return m_impl->connectionsOpened;
}

TransportResponse CurlTransport::perform(const TransportRequest& request, const ProgressCallback& progress)
{
    TransportResponse response;
    auto refuse = [&](Failure failure, QString message) {
        response.failure = failure;
        response.error = std::move(message);
        return response;
    };
    Impl& d = *m_impl;
    if (!d.handle)
        return refuse(Failure::Protocol, QStringLiteral("libcurl could not be initialised"));
    // Tokens and results travel over these requests: plain HTTP is never spoken, whatever the URL says.
    if (!request.url.startsWith(u"https://", Qt::CaseInsensitive))
        return refuse(Failure::Protocol, QStringLiteral("refusing %1: only https:// URLs are used").arg(request.url));

    CURL* h = d.handle;
    // Reset clears the options of the previous request but keeps the connection cache: keep-alive survives.
    curl_easy_reset(h);
    d.request = &request;
    d.progress = &progress;
    d.response = &response;
    d.sink.reset();
    d.bodyDecided = false;
    d.bodyToFile = false;
    d.callbackError.clear();
    d.callbackFailure = Failure::None;
    d.uploadOffset = 0;
    d.errorBuffer[0] = '\0';

    const QByteArray url = request.url.toUtf8();
    curl_easy_setopt(h, CURLOPT_URL, url.constData());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, d.errorBuffer);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); // timeouts must not raise SIGALRM in a threaded agent
    curl_easy_setopt(h, CURLOPT_USERAGENT, d.userAgent.constData());
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);

    // Verification is never switched off. A pinned certificate is the only trust anchor: clearing CAPATH keeps
    // the system's directory of CAs (compiled into Debian's libcurl) out of it.
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_SSLVERSION, long(CURL_SSLVERSION_TLSv1_2));
    if (!d.caCertificatePath.isEmpty()) {
        curl_easy_setopt(h, CURLOPT_CAINFO, d.caCertificatePath.constData());
        curl_easy_setopt(h, CURLOPT_CAPATH, static_cast<const char*>(nullptr));
    }

    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, long(qMax(1, request.connectTimeoutMs)));
    // A stall is less than one byte per second for the stall time; libcurl counts it in whole seconds.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, long(qMax(1, (request.stallTimeoutMs + 999) / 1000)));
    if (request.totalTimeoutMs > 0)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, long(request.totalTimeoutMs));
    if (request.maxSendBytesPerSecond > 0)
        curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, curl_off_t(request.maxSendBytesPerSecond));
    if (request.maxReceiveBytesPerSecond > 0) {
        curl_easy_setopt(h, CURLOPT_MAX_RECV_SPEED_LARGE, curl_off_t(request.maxReceiveBytesPerSecond));
        // Small reads keep each wait of the receive limiter short.
        const RateLimiter probe(request.maxReceiveBytesPerSecond);
        curl_easy_setopt(h, CURLOPT_BUFFERSIZE, long(probe.stepBytes(CURL_MAX_WRITE_SIZE)));
    }
    d.sendLimiter = RateLimiter(request.maxSendBytesPerSecond);
    d.receiveLimiter = RateLimiter(request.maxReceiveBytesPerSecond);

    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &Impl::onHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &d);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Impl::onWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &d);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, &Impl::onProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &d);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);

    struct curl_slist* headers = nullptr;
    for (const auto& [name, value] : request.headers)
        headers = curl_slist_append(headers, QByteArray(name + ": " + value).constData());

    // The body: streamed from a file (results), or from memory (JSON).
    qint64 bodySize = request.body.size();
    d.uploadFile.setFileName(request.uploadFile);
    if (!request.uploadFile.isEmpty()) {
        if (!d.uploadFile.open(QIODevice::ReadOnly)) {
            curl_slist_free_all(headers);
            return refuse(Failure::LocalFile,
                          QStringLiteral("cannot read %1: %2").arg(request.uploadFile, d.uploadFile.errorString()));
        }
        bodySize = d.uploadFile.size();
        // The coordinator answers 409/413 before reading a body it would refuse: announcing it saves sending it.
        headers = curl_slist_append(headers, "Expect: 100-continue");
    } else {
        // A small JSON body goes with the head; waiting for "100 Continue" would only add a round trip.
        headers = curl_slist_append(headers, "Expect:");
    }
    const bool hasBody = !request.uploadFile.isEmpty() || !request.body.isEmpty();
    if (request.method == "GET") {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (request.method == "HEAD") {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (request.method == "PUT" || (request.method == "POST" && !request.uploadFile.isEmpty())) {
        // UPLOAD is PUT; a POST keeps its method and reads the same callback.
        curl_easy_setopt(h, request.method == "PUT" ? CURLOPT_UPLOAD : CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, &Impl::onRead);
        curl_easy_setopt(h, CURLOPT_READDATA, &d);
        if (request.method == "PUT")
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(bodySize));
        else
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bodySize));
    } else if (request.method == "POST") {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.size()));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.constData());
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.constData());
        if (hasBody) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.size()));
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.constData());
        }
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);

    QByteArray range;
    if (!request.downloadFile.isEmpty()) {
        d.sink.emplace(request.downloadFile, request.resumeFrom, request.maxDownloadBytes);
        if (request.resumeFrom > 0) {
            range = QByteArray::number(request.resumeFrom) + '-';
            curl_easy_setopt(h, CURLOPT_RANGE, range.constData());
        }
    }

    const CURLcode code = curl_easy_perform(h);

    long connects = 0;
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects);
    response.connectionsOpened = int(connects);
    d.connectionsOpened += int(connects);
    curl_off_t sent = 0;
    curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &sent);
    response.bytesSent = qint64(sent);
    curl_slist_free_all(headers);
    d.uploadFile.close();
    // What arrived stays in the partial file even when the transfer broke: the next attempt resumes after it.
    const Status finished = d.sink ? d.sink->finish() : Status();
    d.sink.reset();
    d.request = nullptr;
    d.progress = nullptr;
    d.response = nullptr;

    if (code != CURLE_OK) {
        if (d.callbackFailure != Failure::None)
            return refuse(d.callbackFailure, d.callbackError);
        QString message = QString::fromUtf8(curl_easy_strerror(code));
        if (d.errorBuffer[0] != '\0')
            message += QStringLiteral(" (") + QString::fromUtf8(d.errorBuffer) + u')';
        qCDebug(lcNet) << request.method << request.url << "failed:" << message;
        return refuse(classify(code), message);
    }
    if (!finished)
        return refuse(Failure::LocalFile, finished.error());
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    response.status = int(status);
    // A 2xx download with an empty body never reached the write callback: the file must still be (re)made.
    if (!request.downloadFile.isEmpty() && !d.bodyDecided && (status == 200 || status == 206)) {
        DownloadSink empty(request.downloadFile, request.resumeFrom, request.maxDownloadBytes);
        const Result<bool> begun = empty.begin(int(status), response.headers);
        const Status done = begun ? empty.finish() : Status(fail(begun.error()));
        if (!done)
            return refuse(Failure::LocalFile, done.error());
    }
    qCDebug(lcNet) << request.method << request.url << "->" << response.status << response.bytesReceived << "bytes,"
                   << connects << "new connections";
    return response;
}

} // namespace gleaner::agent
