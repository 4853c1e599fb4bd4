#include "CoordinatorMessages.h"

#include <QJsonArray>
#include <QJsonDocument>

#include <cmath>

namespace gleaner::agent {

namespace {

QString key(const char* name)
{
    return QString::fromLatin1(name);
}

Result<QJsonObject> object(const QByteArray& body)
{
    QJsonParseError error;
    const QJsonDocument document = QJsonDocument::fromJson(body, &error);
    if (error.error != QJsonParseError::NoError)
        return fail(QStringLiteral("the answer is not JSON (%1 at offset %2)").arg(error.errorString()).arg(error.offset));
    if (!document.isObject())
        return fail(QStringLiteral("the answer is not a JSON object"));
    return document.object();
}

// A reason the coordinator gives, for the agent's log and status: one line of at most `max` characters, its
// control characters (a forged log line, a terminal escape) gone.
QString shownReason(const QJsonObject& o, const char* name, qsizetype max)
{
    QString text = o.value(QLatin1String(name)).toString().left(max);
    for (QChar& c : text)
        if (c.category() == QChar::Other_Control)
            c = u' ';
    return text.simplified();
}

Result<QString> string(const QJsonObject& o, const char* name)
{
    const QJsonValue v = o.value(key(name));
    if (!v.isString())
        return fail(QStringLiteral("the answer has no string field \"%1\"").arg(key(name)));
    return v.toString();
}

// A JSON number that is a whole number within 2^53: the protocol's "int".
Result<qint64> integer(const QJsonObject& o, const char* name)
{
    const QJsonValue v = o.value(key(name));
    const double d = v.toDouble(std::nan(""));
    if (!v.isDouble() || !std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9007199254740992.0)
        return fail(QStringLiteral("the answer has no integer field \"%1\"").arg(key(name)));
    return qint64(d);
}

} // namespace

QByteArray CoordinatorMessages::enrollBody(const EnrollRequest& request)
{
    QJsonObject o{{key("name"), request.name}};
    if (!request.platform.isEmpty())
        o.insert(key("platform"), request.platform);
    if (!request.hardware.isEmpty())
        o.insert(key("hardware"), request.hardware);
    if (!request.enrollmentToken.isEmpty())
        o.insert(key("enrollment_token"), request.enrollmentToken);
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

QByteArray CoordinatorMessages::leaseBody(const QStringList& cachedHashes, int maxTasks, const QJsonObject& capabilities)
{
    QJsonObject o{{key("max_tasks"), maxTasks}, {key("cached"), QJsonArray::fromStringList(cachedHashes)}};
    if (!capabilities.isEmpty())
        o.insert(key("capabilities"), capabilities);
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

QByteArray CoordinatorMessages::progressBody(const ProgressReport& report)
{
    QJsonObject o{{key("step"), report.step}, {key("of"), report.of}};
    // JSON has no NaN: a diverged loss is left out rather than sent as an invalid document.
    if (std::isfinite(report.loss))
        o.insert(key("loss"), report.loss);
    if (std::isfinite(report.samplesPerSecond))
        o.insert(key("samples_per_s"), report.samplesPerSecond);
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

const QStringList& CoordinatorMessages::failureStages()
{
    static const QStringList stages{QStringLiteral("verify"), QStringLiteral("download"),
                                    QStringLiteral("worker"), QStringLiteral("upload"),
                                    QStringLiteral("other")};
    return stages;
}

Result<QByteArray> CoordinatorMessages::failureBody(const QString& stage, const QString& reason)
{
    if (!failureStages().contains(stage))
        return fail(QStringLiteral("the failure stage \"%1\" is not one of %2")
                        .arg(stage, failureStages().join(QStringLiteral(", "))));
    QString text = reason.trimmed();
    if (text.isEmpty())
        return fail(QStringLiteral("a failure report needs a reason saying what went wrong"));
    if (text.size() > kMaxFailureReasonLength) {
        text.truncate(kMaxFailureReasonLength);
        if (text.back().isHighSurrogate()) // not half a character
            text.chop(1);
    }
    const QJsonObject o{{key("reason"), text}, {key("stage"), stage}};
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

Result<CoordinatorInfo> CoordinatorMessages::parseInfo(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    CoordinatorInfo info;
    const auto name = string(*o, "name");
    const auto pem = string(*o, "signing_public_key");
    const auto protocol = integer(*o, "protocol");
    if (!name || !pem || !protocol)
        return fail(!name ? name.error() : !pem ? pem.error() : protocol.error());
    info.name = *name;
    info.signingPublicKeyPem = pem->toLatin1();
    info.protocol = int(*protocol);
    info.version = o->value(QStringLiteral("version")).toString();
    info.openEnrollment = o->value(QStringLiteral("open_enrollment")).toBool();
    return info;
}

Result<Enrollment> CoordinatorMessages::parseEnrollment(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    const auto id = string(*o, "agent_id");
    const auto token = string(*o, "agent_token");
    const auto pem = string(*o, "signing_public_key");
    if (!id || !token || !pem)
        return fail(!id ? id.error() : !token ? token.error() : pem.error());
    if (token->isEmpty() || token->contains(u' '))
        return fail(QStringLiteral("the answer's agent_token is not a usable bearer token"));
    return Enrollment{*id, token->toLatin1(), pem->toLatin1()};
}

Result<LeaseReply> CoordinatorMessages::parseLease(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    const QJsonValue tasks = o->value(QStringLiteral("tasks"));
    if (!tasks.isArray())
        return fail(QStringLiteral("the answer has no array field \"tasks\""));
    LeaseReply reply;
    for (const QJsonValue& value : tasks.toArray()) {
        const QJsonObject task = value.toObject();
        const auto leaseText = string(task, "lease_id");
        const auto manifest = string(task, "manifest");
        const auto signature = string(task, "signature");
        const auto deadline = integer(task, "deadline_ms");
        // A malformed task is dropped, not the reply: its lease simply expires on the coordinator, while the
        // well-formed ones can still be worked on. Its lease id is never used, not even to report it: an id
        // that is not one could name a path or another URL.
        if (!leaseText || !manifest || !signature || !deadline) {
            reply.refused.append(QStringLiteral("a task of the lease reply was refused: %1")
                                     .arg(!leaseText ? leaseText.error()
                                          : !manifest ? manifest.error()
                                          : !signature ? signature.error()
                                                       : deadline.error()));
            continue;
        }
        auto leaseId = LeaseId::parse(*leaseText, u"the lease reply's lease_id");
        if (!leaseId) {
            reply.refused.append(leaseId.error());
            continue;
        }
        // The signed bytes are the UTF-8 encoding of the string's value (protocol 7.3), exactly.
        reply.tasks.append(LeasedTask{*leaseId, *deadline, manifest->toUtf8(), *signature});
    }
    if (reply.tasks.isEmpty()) {
        const auto retryAfter = integer(*o, "retry_after");
        reply.retryAfterSeconds = retryAfter ? qBound<qint64>(0, *retryAfter, qint64(24 * 3600)) : 30;
    }
    // Both are only shown or compared, never used as a name; bounded so a hostile answer cannot flood the log.
    reply.signingKey = o->value(QStringLiteral("signing_key")).toString().left(64);
    reply.quarantined = shownReason(*o, "quarantined", 1024);
    reply.heldBack = shownReason(*o, "held_back", 1024);
    reply.atWidth = shownReason(*o, "at_width", 1024);
    return reply;
}

Result<SigningKeysReply> CoordinatorMessages::parseSigningKeys(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    const auto fingerprint = string(*o, "fingerprint");
    if (!fingerprint)
        return fail(fingerprint.error());
    auto rotations = KeyRotation::listFromJson(o->value(QStringLiteral("rotations")));
    if (!rotations)
        return fail(rotations.error());
    return SigningKeysReply{*fingerprint, *rotations};
}

Result<ProgressReply> CoordinatorMessages::parseProgress(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    const QJsonValue abort = o->value(QStringLiteral("abort"));
    if (!abort.isBool())
        return fail(QStringLiteral("the answer has no boolean field \"abort\""));
    ProgressReply reply;
    reply.abort = abort.toBool();
    if (reply.abort) {
        reply.reason = o->value(QStringLiteral("reason")).toString();
        return reply;
    }
    const auto deadline = integer(*o, "deadline_ms");
    if (!deadline)
        return fail(deadline.error());
    reply.deadlineMs = *deadline;
    return reply;
}

Result<UploadReply> CoordinatorMessages::parseAccepted(const QByteArray& body)
{
    UploadReply reply;
    reply.outcome = UploadOutcome::Accepted;
    // 202 is the answer that matters; its fields are informative, so a body without them still counts.
    if (const auto o = object(body)) {
        if (const auto seq = integer(*o, "seq"))
            reply.seq = *seq;
        if (const auto staleness = integer(*o, "staleness"))
            reply.staleness = *staleness;
    }
    return reply;
}

Result<bool> CoordinatorMessages::parseReleased(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    const QJsonValue released = o->value(QStringLiteral("released"));
    if (!released.isBool())
        return fail(QStringLiteral("the answer has no boolean field \"released\""));
    return released.toBool();
}

Result<HandBackReply> CoordinatorMessages::parseHandBack(const QByteArray& body)
{
    const auto o = object(body);
    if (!o)
        return fail(o.error());
    HandBackReply reply;
    const QJsonValue released = o->value(QStringLiteral("released"));
    if (!released.isBool())
        return fail(QStringLiteral("the answer has no boolean field \"released\""));
    reply.released = released.toBool();
    reply.checkpoint = o->value(QStringLiteral("checkpoint")).toString(QStringLiteral("none")).left(16);
    reply.step = std::max<qint64>(0, o->value(QStringLiteral("step")).toInteger(0));
    reply.reason = o->value(QStringLiteral("reason")).toString().left(2000);
    return reply;
}

QString CoordinatorMessages::errorText(const QByteArray& body)
{
    const QJsonValue error = QJsonDocument::fromJson(body).object().value(QStringLiteral("error"));
    if (error.isString())
        return error.toString();
    return QString::fromUtf8(body.left(200)).simplified();
}

bool CoordinatorMessages::isSha256Hex(const QString& text)
{
    if (text.size() != 64)
        return false;
    for (const QChar c : text)
        if (!((c >= u'0' && c <= u'9') || (c >= u'a' && c <= u'f')))
            return false;
    return true;
}

} // namespace gleaner::agent
