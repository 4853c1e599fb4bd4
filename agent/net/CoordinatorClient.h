#pragma once
// The agent's calls to its coordinator (protocol v1, docs/protocol.md section 6) over a Transport. Each call
// that is safe to repeat is retried per the RetryPolicy on network errors, timeouts, 5xx, 408 and 429: lease,
// progress, failure reports, downloads (resumed with Range from what the partial file already holds) and
// result uploads (the protocol makes a repeated upload safe: 409 "duplicate" means the first one counted; a
// repeated failure report after a lost answer meets 409 the same way). Enrollment is retried only when the
// coordinator could not be reached at all, because a lost answer would leave a second agent behind.
//
// Errors are Result values whose message names the coordinator and says what to do. Synchronous: call it from
// the agent's network thread, not from an event loop that must stay responsive. Not thread-safe.

#include "CoordinatorMessages.h"
#include "RetryPolicy.h"
#include "Transport.h"

#include "Result.h"
#include "util/Clock.h"

#include <QString>
#include <QStringList>

namespace gleaner::agent {

class CoordinatorClient
{
public:
    // `baseUrl`: "https://host:port", without a trailing path. The transport, clock and sleeper must outlive
    // the client.
    CoordinatorClient(Transport& transport, QString baseUrl, const Clock& clock, RetryPolicy retry = RetryPolicy(),
                      Sleeper sleeper = RetryPolicy::threadSleeper());

    const QString& baseUrl() const { return m_baseUrl; }
    void setAgentToken(QByteArray token) { m_agentToken = std::move(token); }
    // The owner's caps, bytes per second; 0 = none. They apply to downloads and to result uploads.
    void setRateLimits(qint64 uploadBytesPerSecond, qint64 downloadBytesPerSecond);
    void setTimeouts(int connectMs, int stallMs);

    Result<CoordinatorInfo> info();
    Result<SigningKeysReply> signingKeys();
    Result<Enrollment> enroll(const EnrollRequest& request);
    Result<LeaseReply> lease(const QStringList& cachedHashes, int maxTasks, const QJsonObject& capabilities = {});
    // Fetches file `sha256` into `targetPath`, resuming from what the file already holds. Succeeds when the file
    // ends with exactly `expectedSize` bytes; checking its hash is the cache's job. A file of the wrong size is
    // deleted so that the next try starts clean; an answer longer than `expectedSize` is cut off as soon as it
    // passes it (isOversizedDownload() recognises that error, which a retry would not mend).
    Status download(const QString& sha256, const QString& targetPath, qint64 expectedSize,
                    const ProgressCallback& progress = {});
    Result<ProgressReply> progress(const LeaseId& leaseId, const ProgressReport& report);
    // PUTs the result file. Every answer the protocol defines (202, 404, 409, 413, 422) is an outcome; errors are
    // failures to get one (after retries), and 401/403 (the agent's token is no longer accepted).
    Result<UploadReply> uploadResult(const LeaseId& leaseId, const QString& filePath,
                                     const ProgressCallback& progress = {});
    // Gives the lease back because the subtask cannot be run (protocol 6.7), so that its workunit goes to
    // another agent now instead of at the deadline. `stage`: verify, download, worker, upload or other;
    // `reason` is cut to 2000 characters. True: released. False: the coordinator answered 404 or 409, there
    // was nothing (left) to release: the lease is unknown, closed already (also by an earlier try whose
    // answer was lost), or another agent's. Errors: a bad stage or blank reason (nothing is sent), no answer
    // after retries, 401/403, a 400.
    Result<bool> reportFailure(const LeaseId& leaseId, const QString& stage, const QString& reason);
    // Hands the lease back because the agent is leaving (protocol 6.8), with the subtask's checkpoint when
    // `checkpointPath` is not empty, so that the next agent resumes where this one stopped. A 404 or 409 is an
    // answer (released false: nothing left to hand back); errors are failures to get one.
    Result<HandBackReply> handBack(const LeaseId& leaseId, const QString& checkpointPath,
                                   const ProgressCallback& progress = {});

    // Whether an error of this client says the coordinator no longer accepts the agent (401 / 403): retrying will
    // not help, an operator must act.
    static bool isCredentialRefusal(const QString& message);
    // Whether an error of download() says the coordinator sent more than the file's signed size: its copy is
    // not the file, so the subtask cannot be run from it.
    static bool isOversizedDownload(const QString& message);
    // Whether an error of download() is the coordinator's 404 for the file: it will not serve it for this lease, so
    // trying again will not help (the subtask is given back).
    static bool isMissingFile(const QString& message);

private:
    enum class RetryWhen { Retryable, Unreachable };
    struct Exchange
    {
        TransportResponse response;
        int attempts = 0;
        QString stopped; // why retrying stopped early: the sleeper was interrupted, or preparing a try failed
    };
    using Prepare = std::function<Status(TransportRequest&)>;

    TransportRequest request(const QByteArray& method, const QString& path, bool authenticated) const;
    Exchange exchange(const QString& what, TransportRequest request, RetryWhen when,
                      const ProgressCallback& progress = {}, const Prepare& prepare = {});
    // A message for an exchange that ended without the answer the caller wanted.
    Error describe(const QString& what, const Exchange& exchange) const;
    Status downloadOnce(const QString& sha256, const QString& targetPath, qint64 expectedSize,
                        const ProgressCallback& progress, bool* restartFromZero);

    Transport& m_transport;
    QString m_baseUrl;
    const Clock& m_clock;
    RetryPolicy m_retry;
    Sleeper m_sleeper;
    QByteArray m_agentToken;
    qint64 m_uploadCap = 0;
    qint64 m_downloadCap = 0;
    int m_connectTimeoutMs = 15'000;
    int m_stallTimeoutMs = 60'000;
};

} // namespace gleaner::agent
