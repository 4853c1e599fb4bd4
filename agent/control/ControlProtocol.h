#pragma once
// The local control protocol between gleaner-agent and its clients (the CLI, the tray app), framed as JSON
// lines: one compact JSON object per line, UTF-8, at most 1 MiB per line. docs/control-protocol.md is the
// reference; this file holds the framing (ControlLineBuffer) and the message builders and parsers, which both
// sides share so they cannot drift apart.
//
//   request  {"id": N, "cmd": "status", "args": {...}}
//   reply    {"id": N, "ok": true, "result": {...}}  |  {"id": N, "ok": false, "error": "..."}
//   event    {"event": "NAME", ...}                     (pushed by the agent, no id)

#include "Result.h"

#include <QByteArray>
#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <optional>
#include <variant>

namespace gleaner::agent {

inline constexpr int kControlProtocolVersion = 1;
// The longest line either side accepts, without its newline.
inline constexpr qsizetype kMaxControlLineBytes = qsizetype(1) << 20;

struct ControlRequest
{
    qint64 id = 0;
    QString cmd;
    QJsonObject args;
};

struct ControlReply
{
    std::optional<qint64> id; // absent when the agent could not read the request's id (a malformed line)
    bool ok = false;
    QJsonObject result;
    QString error;
};

// Splits a byte stream into lines. Bytes are appended as they arrive; complete lines are taken one by one. A
// line longer than the limit (with or without its newline yet) puts the buffer into the overflowed state,
// after which it yields nothing: the connection is to be closed, as its framing can no longer be trusted.
class ControlLineBuffer
{
public:
    explicit ControlLineBuffer(qsizetype maxLineBytes = kMaxControlLineBytes) : m_maxLineBytes(maxLineBytes)
    {
    }

    void append(const QByteArray& bytes);
    // The next complete line without its newline (and without a trailing CR); nullopt when none is complete.
    // Empty lines are skipped.
    std::optional<QByteArray> takeLine();
    bool overflowed() const { return m_overflowed; }
    qsizetype maxLineBytes() const { return m_maxLineBytes; }

private:
    void setOverflowed();

    QByteArray m_buffer;
    qsizetype m_scanned = 0; // bytes of m_buffer already known to hold no newline
    qsizetype m_maxLineBytes;
    bool m_overflowed = false;
};

// One message as it goes on the wire: compact JSON and a newline.
QByteArray encodeControlMessage(const QJsonObject& message);

QJsonObject controlRequest(qint64 id, const QString& cmd, const QJsonObject& args = {});
QJsonObject controlReply(qint64 id, const QJsonObject& result);
// `id` is nullopt when the request's id could not be read; the reply then carries "id": null.
QJsonObject controlError(std::optional<qint64> id, const QString& error);
// {"event": name, ...fields}
QJsonObject controlEvent(const QString& name, QJsonObject fields = {});
// The first message of every connection.
QJsonObject controlHello(const QString& agentVersion, qint64 pid);

// A line as a JSON object, or why it is not one.
Result<QJsonObject> parseControlLine(const QByteArray& line);
// A request read from a line. A failure also says, in `id`, the request's id when that much was readable, so
// the error reply can name it.
struct ControlRequestError
{
    std::optional<qint64> id;
    QString message;
};
std::variant<ControlRequest, ControlRequestError> parseControlRequest(const QByteArray& line);
// A message from the agent is an event when it has an "event" member.
bool isControlEvent(const QJsonObject& message);
Result<ControlReply> parseControlReply(const QJsonObject& message);

// "unknown command "x"; known commands: status, pause, ..." — the reply to a command no one handles.
QString unknownControlCommandMessage(const QString& cmd, const QStringList& known);

} // namespace gleaner::agent
