#include "CoordinatorClient.h"

#include "NetLogging.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>

namespace gleaner::agent {

namespace {

using Failure = TransportResponse::Failure;

qint64 fileSize(const QString& path)
{
    const QFileInfo info(path);
    return info.exists() ? info.size() : 0;
}

// A retry hint in an error answer: the Retry-After header, else a "retry_after" field (seconds) of a JSON body.
qint64 retryAfterMs(const TransportResponse& response)
{
    const qint64 header = RetryPolicy::retryAfterHeaderMs(response);
    if (header >= 0 || response.failure != Failure::None)
        return header;
    const QJsonValue field = QJsonDocument::fromJson(response.body).object().value(QStringLiteral("retry_after"));
    return field.isDouble() && field.toDouble() >= 0 ? qint64(field.toDouble() * 1000) : -1;
}

} // namespace

CoordinatorClient::CoordinatorClient(Transport& transport, QString baseUrl, const Clock& clock, RetryPolicy retry,
                                     Sleeper sleeper)
    : m_transport(transport),
      m_baseUrl(std::move(baseUrl)),
      m_clock(clock),
      m_retry(std::move(retry)),
      m_sleeper(sleeper ? std::move(sleeper) : RetryPolicy::threadSleeper())
{
    while (m_baseUrl.endsWith(u'/'))
        m_baseUrl.chop(1);
}

void CoordinatorClient::setRateLimits(qint64 uploadBytesPerSecond, qint64 downloadBytesPerSecond)
{
    m_uploadCap = qMax<qint64>(0, uploadBytesPerSecond);
    m_downloadCap = qMax<qint64>(0, downloadBytesPerSecond);
}

void CoordinatorClient::setTimeouts(int connectMs, int stallMs)
{
    m_connectTimeoutMs = connectMs;
    m_stallTimeoutMs = stallMs;
}

TransportRequest CoordinatorClient::request(const QByteArray& method, const QString& path, bool authenticated) const
{
    TransportRequest r;
    r.method = method;
    r.url = m_baseUrl + path;
    r.connectTimeoutMs = m_connectTimeoutMs;
    r.stallTimeoutMs = m_stallTimeoutMs;
    if (authenticated)
        r.headers.emplaceBack("Authorization", "Bearer " + m_agentToken);
    return r;
}

CoordinatorClient::Exchange CoordinatorClient::exchange(const QString& what, TransportRequest request, RetryWhen when,
                                                        const ProgressCallback& progress, const Prepare& prepare)
{
    Exchange result;
    const qint64 started = m_clock.nowMs();
    for (;;) {
        if (prepare) {
            const Status prepared = prepare(request);
            if (!prepared) {
                result.response = TransportResponse{};
                result.response.failure = Failure::LocalFile;
                result.response.error = prepared.error();
                return result;
            }
        }
        ++result.attempts;
        result.response = m_transport.perform(request, progress);
        const bool retry = when == RetryWhen::Retryable ? RetryPolicy::isRetryable(result.response)
                                                        : result.response.failure == Failure::Connect;
        if (!retry)
            return result;
        const qint64 wait = m_retry.delayMs(result.attempts, retryAfterMs(result.response));
        if (!m_retry.mayRetry(result.attempts, started, m_clock.nowMs(), wait))
            return result;
        qCInfo(lcNet).noquote() << QStringLiteral("%1 at %2 failed (try %3): %4; retrying in %5 ms")
                                       .arg(what, m_baseUrl)
                                       .arg(result.attempts)
                                       .arg(result.response.ok() ? QStringLiteral("HTTP %1").arg(result.response.status)
                                                                 : result.response.error)
                                       .arg(wait);
        if (!m_sleeper(wait)) {
            result.stopped = QStringLiteral("the agent is stopping");
            return result;
        }
    }
}

namespace {
// The words of the 401 and 403 messages, which isCredentialRefusal() recognises.
const QString kCredentialsRefused = QStringLiteral("the coordinator refused the agent's credentials");
const QString kAgentRefused = QStringLiteral("the coordinator refused this agent");
// The words of an oversized download, which isOversizedDownload() recognises.
const QString kOversized = QStringLiteral("sent more bytes than the signed manifest gives the file");
// The words of a 404 for a file, which isMissingFile() recognises.
const QString kMissingFile = QStringLiteral("the coordinator has no such file");
} // namespace

bool CoordinatorClient::isCredentialRefusal(const QString& message)
{
    return message.contains(kCredentialsRefused) || message.contains(kAgentRefused);
}

bool CoordinatorClient::isMissingFile(const QString& message)
{
    return message.contains(kMissingFile);
}

bool CoordinatorClient::isOversizedDownload(const QString& message)
{
    return message.contains(kOversized);
}

Error CoordinatorClient::describe(const QString& what, const Exchange& exchange) const
{
    const TransportResponse& r = exchange.response;
    const QString tries = exchange.attempts > 1 ? QStringLiteral(" (after %1 tries)").arg(exchange.attempts) : QString();
    const QString where = what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ");
    QString message;
    switch (r.failure) {
    case Failure::None: {
        const QString text = CoordinatorMessages::errorText(r.body);
        if (r.status == 401)
            message = kCredentialsRefused + QStringLiteral(" (401: %1); enroll the agent again").arg(text);
        else if (r.status == 403)
            message = kAgentRefused + QStringLiteral(" (403: %1); an operator must enroll it again").arg(text);
        else if (r.status >= 500)
            message = QStringLiteral("the coordinator failed (%1: %2)%3; it will be asked again later")
                          .arg(r.status)
                          .arg(text, tries);
        else
            message = QStringLiteral("unexpected answer %1: %2").arg(r.status).arg(text);
        break;
    }
    case Failure::Connect:
        message = QStringLiteral("cannot reach the coordinator (%1)%2; check that it runs and that the URL and port "
                                 "are right")
                      .arg(r.error, tries);
        break;
    case Failure::Timeout:
        message = QStringLiteral("the coordinator did not answer in time (%1)%2; the network or the coordinator may "
                                 "be down")
                      .arg(r.error, tries);
        break;
    case Failure::Network:
        message = QStringLiteral("the connection broke (%1)%2").arg(r.error, tries);
        break;
    case Failure::Tls:
        message = QStringLiteral("the coordinator's certificate is not trusted (%1); check that the pinned "
                                 "certificate (--ca) is the coordinator's DATA_DIR/tls/cert.pem and that the URL's "
                                 "host is one of the names in it. Verification is never switched off")
                      .arg(r.error);
        break;
    case Failure::Cancelled:
        message = QStringLiteral("cancelled");
        break;
    case Failure::LocalFile:
        message = r.error;
        break;
    case Failure::Protocol:
        message = QStringLiteral("unusable answer or request (%1)").arg(r.error);
        break;
    case Failure::Oversized:
        message = QStringLiteral("the coordinator %1 (%2); its copy is not the file the manifest names")
                      .arg(kOversized, r.error);
        break;
    }
    if (!exchange.stopped.isEmpty())
        message += QStringLiteral("; not retried: ") + exchange.stopped;
    return fail(where + message);
}

Result<CoordinatorInfo> CoordinatorClient::info()
{
    const QString what = QStringLiteral("reading the coordinator's info");
    const Exchange e = exchange(what, request("GET", QStringLiteral("/api/v1/info"), false), RetryWhen::Retryable);
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto info = CoordinatorMessages::parseInfo(e.response.body);
    if (!info)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + info.error());
    if (info->name != u"gleaner-coordinator" || info->protocol != 1)
        return fail(QStringLiteral("%1 is not a Gleaner coordinator speaking protocol 1 (it says \"%2\", protocol %3); "
                                   "check the URL")
                        .arg(m_baseUrl, info->name)
                        .arg(info->protocol));
    return info;
}

Result<SigningKeysReply> CoordinatorClient::signingKeys()
{
    const QString what = QStringLiteral("reading the coordinator's signing key rotations");
    const Exchange e =
        exchange(what, request("GET", QStringLiteral("/api/v1/signing-keys"), false), RetryWhen::Retryable);
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto reply = CoordinatorMessages::parseSigningKeys(e.response.body);
    if (!reply)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + reply.error());
    return reply;
}

Result<Enrollment> CoordinatorClient::enroll(const EnrollRequest& enrollRequest)
{
    const QString what = QStringLiteral("enrolling");
    TransportRequest r = request("POST", QStringLiteral("/api/v1/agents/enroll"), false);
    r.headers.emplaceBack("Content-Type", "application/json");
    r.body = CoordinatorMessages::enrollBody(enrollRequest);
    const Exchange e = exchange(what, r, RetryWhen::Unreachable);
    if (e.response.ok() && e.response.status == 401)
        return fail(QStringLiteral("%1 at %2: the enrollment token was refused (%3); ask the coordinator's operator "
                                   "for a valid one (gleaner-coordinator token create)")
                        .arg(what, m_baseUrl, CoordinatorMessages::errorText(e.response.body)));
    if (e.response.ok() && e.response.status == 422)
        return fail(QStringLiteral("%1 at %2: the coordinator refused the agent's details (%3)")
                        .arg(what, m_baseUrl, CoordinatorMessages::errorText(e.response.body)));
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto enrollment = CoordinatorMessages::parseEnrollment(e.response.body);
    if (!enrollment)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + enrollment.error());
    return enrollment;
}

Result<LeaseReply> CoordinatorClient::lease(const QStringList& cachedHashes, int maxTasks, const QJsonObject& capabilities)
{
    const QString what = QStringLiteral("asking for work");
    TransportRequest r = request("POST", QStringLiteral("/api/v1/work/lease"), true);
    r.headers.emplaceBack("Content-Type", "application/json");
    r.body = CoordinatorMessages::leaseBody(cachedHashes, maxTasks, capabilities);
    const Exchange e = exchange(what, r, RetryWhen::Retryable);
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto reply = CoordinatorMessages::parseLease(e.response.body);
    if (!reply)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + reply.error());
    return reply;
}

Result<ProgressReply> CoordinatorClient::progress(const LeaseId& leaseId, const ProgressReport& report)
{
    const QString what = QStringLiteral("reporting progress of lease %1").arg(leaseId.toString());
    TransportRequest r = request("POST", QStringLiteral("/api/v1/work/%1/progress").arg(leaseId.toString()), true);
    r.headers.emplaceBack("Content-Type", "application/json");
    r.body = CoordinatorMessages::progressBody(report);
    const Exchange e = exchange(what, r, RetryWhen::Retryable);
    if (e.response.ok() && (e.response.status == 404 || e.response.status == 409)) {
        ProgressReply gone;
        gone.abort = true;
        gone.leaseGone = true;
        gone.reason = CoordinatorMessages::errorText(e.response.body);
        return gone;
    }
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto reply = CoordinatorMessages::parseProgress(e.response.body);
    if (!reply)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + reply.error());
    return reply;
}

Result<bool> CoordinatorClient::reportFailure(const LeaseId& leaseId, const QString& stage,
                                              const QString& reason)
{
    const QString what = QStringLiteral("reporting lease %1 as failed").arg(leaseId.toString());
    const auto body = CoordinatorMessages::failureBody(stage, reason);
    if (!body)
        return fail(what + QStringLiteral(": ") + body.error());
    TransportRequest r = request("POST", QStringLiteral("/api/v1/work/%1/fail").arg(leaseId.toString()), true);
    r.headers.emplaceBack("Content-Type", "application/json");
    r.body = *body;
    const Exchange e = exchange(what, r, RetryWhen::Retryable);
    if (e.response.ok() && (e.response.status == 404 || e.response.status == 409)) {
        qCInfo(lcNet).noquote() << QStringLiteral("%1 at %2: nothing to release (%3: %4)")
                                       .arg(what, m_baseUrl)
                                       .arg(e.response.status)
                                       .arg(CoordinatorMessages::errorText(e.response.body));
        return false;
    }
    if (!e.response.ok() || e.response.status != 200)
        return describe(what, e);
    auto released = CoordinatorMessages::parseReleased(e.response.body);
    if (!released)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + released.error());
    return released;
}

Result<HandBackReply> CoordinatorClient::handBack(const LeaseId& leaseId, const QString& checkpointPath,
                                                  const ProgressCallback& progress)
{
    const QString what = QStringLiteral("handing lease %1 back").arg(leaseId.toString());
    TransportRequest r = request("PUT", QStringLiteral("/api/v1/work/%1/handback").arg(leaseId.toString()), true);
    r.headers.emplaceBack("Content-Type", "application/octet-stream");
    if (!checkpointPath.isEmpty()) {
        if (!QFileInfo(checkpointPath).isFile())
            return fail(QStringLiteral("%1: the checkpoint %2 does not exist").arg(what, checkpointPath));
        r.uploadFile = checkpointPath;
        r.maxSendBytesPerSecond = m_uploadCap;
    }
    const Exchange e = exchange(what, r, RetryWhen::Retryable, progress);
    if (!e.response.ok())
        return describe(what, e);
    if (e.response.status == 404 || e.response.status == 409) {
        HandBackReply reply;
        reply.reason = CoordinatorMessages::errorText(e.response.body);
        return reply;
    }
    if (e.response.status != 200)
        return describe(what, e);
    auto reply = CoordinatorMessages::parseHandBack(e.response.body);
    if (!reply)
        return fail(what + QStringLiteral(" at ") + m_baseUrl + QStringLiteral(": ") + reply.error());
    return reply;
}

Result<UploadReply> CoordinatorClient::uploadResult(const LeaseId& leaseId, const QString& filePath,
                                                    const ProgressCallback& progress)
{
    const QString what = QStringLiteral("uploading the result of lease %1").arg(leaseId.toString());
    if (!QFileInfo(filePath).isFile())
        return fail(QStringLiteral("%1: the result file %2 does not exist").arg(what, filePath));
    TransportRequest r = request("PUT", QStringLiteral("/api/v1/work/%1/result").arg(leaseId.toString()), true);
    r.headers.emplaceBack("Content-Type", "application/octet-stream");
    r.uploadFile = filePath;
    r.maxSendBytesPerSecond = m_uploadCap;
    const Exchange e = exchange(what, r, RetryWhen::Retryable, progress);
    if (!e.response.ok())
        return describe(what, e);
    UploadReply reply;
    reply.message = CoordinatorMessages::errorText(e.response.body);
    switch (e.response.status) {
    case 202:
        return CoordinatorMessages::parseAccepted(e.response.body);
    case 404:
        reply.outcome = UploadOutcome::Unknown;
        return reply;
    case 409:
        reply.outcome = UploadOutcome::Closed;
        return reply;
    case 413:
        reply.outcome = UploadOutcome::TooLarge;
        return reply;
    case 422:
        reply.outcome = UploadOutcome::Invalid;
        return reply;
    default:
        return describe(what, e);
    }
}

Status CoordinatorClient::download(const QString& sha256, const QString& targetPath, qint64 expectedSize,
                                   const ProgressCallback& progress)
{
    if (!CoordinatorMessages::isSha256Hex(sha256))
        return fail(QStringLiteral("cannot download \"%1\": a file is named by 64 lowercase hex digits").arg(sha256));
    if (expectedSize < 0)
        return fail(QStringLiteral("cannot download %1: its size %2 is negative").arg(sha256).arg(expectedSize));
    const QFileInfo target(targetPath);
    if (!QDir().mkpath(target.absolutePath()))
        return fail(QStringLiteral("cannot download %1: cannot create the folder %2").arg(sha256, target.absolutePath()));
    // A partial file longer than the file it should become cannot be resumed.
    if (fileSize(targetPath) > expectedSize)
        QFile::remove(targetPath);
    bool restart = false;
    Status done = downloadOnce(sha256, targetPath, expectedSize, progress, &restart);
    if (restart) {
        // The server refused the range (416): what is held is not a prefix of this file. Once from zero.
        QFile::remove(targetPath);
        done = downloadOnce(sha256, targetPath, expectedSize, progress, &restart);
    }
    return done;
}

Status CoordinatorClient::downloadOnce(const QString& sha256, const QString& targetPath, qint64 expectedSize,
                                       const ProgressCallback& progress, bool* restartFromZero)
{
    *restartFromZero = false;
    const QString what = QStringLiteral("downloading file %1").arg(sha256);
    const qint64 held = fileSize(targetPath);
    if (held == expectedSize && (expectedSize > 0 || QFileInfo::exists(targetPath)))
        return {}; // complete already (a crash after the last byte); the cache checks its hash

    TransportRequest r = request("GET", QStringLiteral("/api/v1/files/%1").arg(sha256), true);
    r.downloadFile = targetPath;
    r.maxDownloadBytes = expectedSize; // the signed size: no more is written, however much is sent
    r.maxReceiveBytesPerSecond = m_downloadCap;
    const qsizetype fixedHeaders = r.headers.size();
    // Every try resumes from what the file holds by then: a broken transfer keeps the bytes it got.
    qint64 offset = 0;
    const Prepare prepare = [&](TransportRequest& req) -> Status {
        offset = fileSize(targetPath);
        if (offset > expectedSize) {
            if (!QFile::remove(targetPath))
                return fail(QStringLiteral("cannot remove the oversized partial file %1").arg(targetPath));
            offset = 0;
        }
        req.resumeFrom = offset;
        req.headers.resize(fixedHeaders);
        // The range applies only to this very file; the coordinator's ETag is the hash.
        if (offset > 0)
            req.headers.emplaceBack("If-Range", '"' + sha256.toLatin1() + '"');
        return {};
    };
    // Progress counts the whole file, so a resumed download does not appear to start again from zero.
    const ProgressCallback wrapped = !progress ? ProgressCallback() : ProgressCallback([&](const TransferProgress& p) {
        TransferProgress whole = p;
        whole.downloaded = offset + p.downloaded;
        whole.downloadTotal = expectedSize;
        return progress(whole);
    });
    const Exchange e = exchange(what, r, RetryWhen::Retryable, wrapped, prepare);
    if (e.response.ok() && e.response.status == 416) {
        if (fileSize(targetPath) == expectedSize)
            return {};
        *restartFromZero = true;
        return fail(what + QStringLiteral(": the coordinator refused to resume it (416)"));
    }
    if (e.response.ok() && e.response.status == 404)
        return fail(QStringLiteral("%1 at %2: %3 (404: %4); the task that names it cannot be run")
                        .arg(what, m_baseUrl, kMissingFile, CoordinatorMessages::errorText(e.response.body)));
    if (!e.response.ok() || (e.response.status != 200 && e.response.status != 206))
        return describe(what, e);
    const qint64 got = fileSize(targetPath);
    if (got != expectedSize) {
        QFile::remove(targetPath);
        return fail(QStringLiteral("%1 at %2: the coordinator sent %3 bytes but the manifest says %4; the file was "
                                   "deleted")
                        .arg(what, m_baseUrl)
                        .arg(got)
                        .arg(expectedSize));
    }
    return {};
}

} // namespace gleaner::agent
