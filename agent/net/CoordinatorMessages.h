#pragma once
// The agent's side of the v1 wire messages (docs/protocol.md section 6): what each call sends and what it gets
// back, and the parsers that turn an answer's JSON into these values. Nothing from the network is trusted: a
// parser refuses a missing or mistyped field with a message naming it. The lease's manifest is kept as the exact
// bytes that were signed; verifying and parsing it is the caller's job (section 7.5), never done here.

#include "Result.h"
#include "crypto/KeyRotation.h"
#include "util/LeaseId.h"

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

namespace gleaner::agent {

struct CoordinatorInfo
{
    QString name;
    QString version;
    int protocol = 0;
    QByteArray signingPublicKeyPem;
    bool openEnrollment = false;
};

struct EnrollRequest
{
    QString name;
    QString platform;
    QJsonObject hardware;    // e.g. {"cores": 8, "ram_mb": 16384, "gpu": "none"}
    QString enrollmentToken; // empty on an open coordinator
};

struct Enrollment
{
    QString agentId;
    QByteArray agentToken;
    QByteArray signingPublicKeyPem;
};

struct LeasedTask
{
    LeaseId leaseId;        // checked to be 32 hex digits here; checkManifest() holds it to the signed value
    qint64 deadlineMs = 0;  // likewise
    QByteArray manifest;    // the exact signed bytes (UTF-8 of the JSON string's value)
    QString signature;      // base64, as sent: strict decoding is the verifier's job
};

struct LeaseReply
{
    QList<LeasedTask> tasks;
    // Why each task that was not well formed (a field missing or mistyped, a lease id that is not 32 hex
    // digits) was left out: nothing of such a task is recorded, created, reported or asked for.
    QStringList refused;
    qint64 retryAfterSeconds = 0; // when tasks is empty: when to ask again
    QString signingKey;  // fingerprint of the key that signs the coordinator's manifests now (empty: not said)
    QString quarantined; // why the coordinator gives this agent no work until its admin lifts it (empty: it does)
    QString heldBack;    // why the coordinator hands out no new work for a moment (empty: it does)
    QString atWidth;     // which running jobs have as many agents as they can use (empty reply only)
};

// GET /api/v1/signing-keys: the key in force and the rotations that lead to it (protocol 7.5). Only the
// signatures make any of it trusted, never the answer itself.
struct SigningKeysReply
{
    QString fingerprint;
    QList<KeyRotation> rotations;
};

struct ProgressReport
{
    qint64 step = 0;
    qint64 of = 0;
    double loss = 0;
    double samplesPerSecond = 0;
};

struct ProgressReply
{
    bool abort = false;
    QString reason;        // why to abort (the server's words)
    qint64 deadlineMs = 0; // the lease's new deadline when not aborted
    // The coordinator no longer knows the lease (404) or it is closed (409): abort, and do not upload.
    bool leaseGone = false;
};

enum class UploadOutcome {
    Accepted, // 202: recorded; delete the local result
    Closed,   // 409: already received (a repeated upload after a lost 202), refused earlier, job ended, foreign
    Unknown,  // 404: the coordinator does not know the lease
    Invalid,  // 422: refused by the checks; the lease is closed
    TooLarge, // 413: the agent built a wrong file
};

struct UploadReply
{
    UploadOutcome outcome = UploadOutcome::Accepted;
    QString message;     // the server's error text, empty on 202
    qint64 seq = -1;     // on 202
    qint64 staleness = -1;
};

// The answer to a hand-back (protocol 6.8).
struct HandBackReply
{
    bool released = false; // false: 404 / 409, nothing (left) to hand back
    QString checkpoint;    // "kept", "refused" or "none"
    qint64 step = 0;       // the step the next agent resumes at, when kept
    QString reason;        // why a checkpoint was not kept, or the 404 / 409's text
};

class CoordinatorMessages
{
public:
    // The longest failure reason the coordinator takes (protocol 6.7); longer ones are cut to it.
    static constexpr int kMaxFailureReasonLength = 2000;

    static QByteArray enrollBody(const EnrollRequest& request);
    static QByteArray leaseBody(const QStringList& cachedHashes, int maxTasks, const QJsonObject& capabilities);
    static QByteArray progressBody(const ProgressReport& report);
    // {"reason", "stage"} of POST /work/{lease}/fail. `stage` must be one of failureStages() and the reason
    // not blank: the message says which is wrong. The reason is trimmed and cut to kMaxFailureReasonLength
    // characters (a worker's error output may be longer; the coordinator would refuse it).
    static Result<QByteArray> failureBody(const QString& stage, const QString& reason);
    // The stages protocol 6.7 knows: verify, download, worker, upload, other.
    static const QStringList& failureStages();

    static Result<CoordinatorInfo> parseInfo(const QByteArray& body);
    static Result<Enrollment> parseEnrollment(const QByteArray& body);
    static Result<LeaseReply> parseLease(const QByteArray& body);
    static Result<SigningKeysReply> parseSigningKeys(const QByteArray& body);
    static Result<ProgressReply> parseProgress(const QByteArray& body);
    static Result<UploadReply> parseAccepted(const QByteArray& body);
    // The 200 answer of a failure report: {"released": true}.
    static Result<bool> parseReleased(const QByteArray& body);
    static Result<HandBackReply> parseHandBack(const QByteArray& body);

    // The "error" field of an error answer; the raw text (shortened) when the body is not the usual JSON.
    static QString errorText(const QByteArray& body);
    // A 64-character lowercase hex SHA-256: what may go into a file URL.
    static bool isSha256Hex(const QString& text);
};

} // namespace gleaner::agent
