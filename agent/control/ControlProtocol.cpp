#include "control/ControlProtocol.h"

#include <QJsonDocument>
#include <QJsonParseError>
#include <QJsonValue>

#include <cmath>

namespace gleaner::agent {
namespace {

const QString kId = QStringLiteral("id");
const QString kCmd = QStringLiteral("cmd");
const QString kArgs = QStringLiteral("args");
const QString kOk = QStringLiteral("ok");
const QString kResult = QStringLiteral("result");
const QString kError = QStringLiteral("error");
const QString kEvent = QStringLiteral("event");

// JSON numbers are doubles: an id must be an integer a double holds exactly.
std::optional<qint64> integerId(const QJsonValue& value)
{
    if (!value.isDouble())
        return std::nullopt;
    const double d = value.toDouble();
    constexpr double kLimit = 9007199254740992.0; // 2^53
    if (!std::isfinite(d) || d != std::trunc(d) || std::fabs(d) > kLimit)
        return std::nullopt;
    return static_cast<qint64>(d);
}

QString preview(const QByteArray& line)
{
    constexpr qsizetype kShown = 60;
    QString text = QString::fromUtf8(line.left(kShown));
    if (line.size() > kShown)
        text += QStringLiteral("...");
    return text;
}

} // namespace

void ControlLineBuffer::append(const QByteArray& bytes)
{
    if (!m_overflowed)
        m_buffer.append(bytes);
}

std::optional<QByteArray> ControlLineBuffer::takeLine()
{
    while (!m_overflowed) {
        const qsizetype newline = m_buffer.indexOf('\n', m_scanned);
        if (newline < 0) {
            m_scanned = m_buffer.size();
            // A partial line already past the limit can never become acceptable: refuse it before it grows.
            // A last CR may be the first half of a CRLF whose LF is still on its way, and a complete line's
            // CR does not count: counting it here would refuse a line of exactly the limit or not depending
            // on where the reads cut the stream.
            const qsizetype pending = m_buffer.size() - (m_buffer.endsWith('\r') ? 1 : 0);
            if (pending > m_maxLineBytes)
                setOverflowed();
            return std::nullopt;
        }
        QByteArray line = m_buffer.left(newline);
        m_buffer.remove(0, newline + 1);
        m_scanned = 0;
        if (line.endsWith('\r'))
            line.chop(1);
        if (line.size() > m_maxLineBytes) {
            setOverflowed();
            return std::nullopt;
        }
        if (!line.trimmed().isEmpty())
            return line;
    }
    return std::nullopt;
}

void ControlLineBuffer::setOverflowed()
{
    m_overflowed = true;
    m_buffer.clear();
    m_scanned = 0;
}

QByteArray encodeControlMessage(const QJsonObject& message)
{
    QByteArray bytes = QJsonDocument(message).toJson(QJsonDocument::Compact);
    bytes.append('\n');
    return bytes;
}

QJsonObject controlRequest(qint64 id, const QString& cmd, const QJsonObject& args)
{
    QJsonObject request{{kId, id}, {kCmd, cmd}};
    if (!args.isEmpty())
        request.insert(kArgs, args);
    return request;
}

QJsonObject controlReply(qint64 id, const QJsonObject& result)
{
    return QJsonObject{{kId, id}, {kOk, true}, {kResult, result}};
}

QJsonObject controlError(std::optional<qint64> id, const QString& error)
{
    return QJsonObject{
        {kId, id ? QJsonValue(*id) : QJsonValue(QJsonValue::Null)}, {kOk, false}, {kError, error}};
}

QJsonObject controlEvent(const QString& name, QJsonObject fields)
{
    fields.insert(kEvent, name);
    return fields;
}

QJsonObject controlHello(const QString& agentVersion, qint64 pid)
{
    return controlEvent(QStringLiteral("hello"),
                        QJsonObject{{QStringLiteral("protocol"), kControlProtocolVersion},
                                    {QStringLiteral("agent_version"), agentVersion},
                                    {QStringLiteral("pid"), pid}});
}

Result<QJsonObject> parseControlLine(const QByteArray& line)
{
    QJsonParseError error;
    const QJsonDocument document = QJsonDocument::fromJson(line, &error);
    if (error.error != QJsonParseError::NoError)
        return fail(
            QStringLiteral("the line \"%1\" is not JSON (%2 at byte %3); send one JSON object per line")
                .arg(preview(line), error.errorString())
                .arg(error.offset));
    if (!document.isObject())
        return fail(QStringLiteral("the line \"%1\" is not a JSON object; send one JSON object per line")
                        .arg(preview(line)));
    return document.object();
}

std::variant<ControlRequest, ControlRequestError> parseControlRequest(const QByteArray& line)
{
    auto object = parseControlLine(line);
    if (!object)
        return ControlRequestError{std::nullopt, object.error()};
    const QJsonValue idValue = object->value(kId);
    const std::optional<qint64> id = integerId(idValue);
    if (!id)
        return ControlRequestError{std::nullopt,
                                   idValue.isUndefined()
                                       ? QStringLiteral("the request has no \"id\"; every request needs "
                                                        "an integer id that its reply will carry")
                                       : QStringLiteral("the request's \"id\" is not an integer")};
    ControlRequest request;
    request.id = *id;
    const QJsonValue cmd = object->value(kCmd);
    if (!cmd.isString() || cmd.toString().isEmpty())
        return ControlRequestError{
            id, QStringLiteral("request %1 has no \"cmd\" string naming the command").arg(*id)};
    request.cmd = cmd.toString();
    const QJsonValue args = object->value(kArgs);
    if (!args.isUndefined() && !args.isNull()) {
        if (!args.isObject())
            return ControlRequestError{
                id,
                QStringLiteral("request %1 (%2): \"args\" must be a JSON object").arg(*id).arg(request.cmd)};
        request.args = args.toObject();
    }
    return request;
}

bool isControlEvent(const QJsonObject& message)
{
    return message.contains(kEvent);
}

Result<ControlReply> parseControlReply(const QJsonObject& message)
{
    ControlReply reply;
    const QJsonValue id = message.value(kId);
    if (!id.isNull()) {
        reply.id = integerId(id);
        if (!reply.id)
            return fail(QStringLiteral("a reply from gleaner-agent has no integer \"id\""));
    }
    const QJsonValue ok = message.value(kOk);
    if (!ok.isBool())
        return fail(QStringLiteral("a reply from gleaner-agent has no boolean \"ok\""));
    reply.ok = ok.toBool();
    if (reply.ok) {
        const QJsonValue result = message.value(kResult);
        if (!result.isUndefined() && !result.isNull() && !result.isObject())
            return fail(QStringLiteral("a reply from gleaner-agent has a \"result\" that is not an object"));
        reply.result = result.toObject();
    } else {
        reply.error = message.value(kError).toString();
        if (reply.error.isEmpty())
            reply.error = QStringLiteral("gleaner-agent refused the request without saying why");
    }
    return reply;
}

QString unknownControlCommandMessage(const QString& cmd, const QStringList& known)
{
    return QStringLiteral("unknown command \"%1\"; known commands: %2")
        .arg(cmd, known.join(QStringLiteral(", ")));
}

} // namespace gleaner::agent
