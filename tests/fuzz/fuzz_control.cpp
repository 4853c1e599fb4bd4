// Fuzzes the agent's control protocol (agent/control/ControlProtocol): the line framing of ControlLineBuffer
// and the request and reply parsers that read what a local client or the agent sends.
//
// Input: the first byte sets how many bytes arrive per read (1..64), the rest is the byte stream. Promises
// checked: the lines taken, and whether the buffer overflows, do not depend on how the stream was cut into
// reads (a model that sees whole lines says what they must be); every request or reply a parser accepts is
// written back by the builders and read again to the same value.

#include "FuzzSupport.h"

#include "control/ControlProtocol.h"

#include <QJsonObject>
#include <QList>

using namespace gleaner;
using namespace gleaner::agent;

namespace {

struct Lines
{
    QList<QByteArray> lines;
    bool overflowed = false;
};

// The framing as docs/control-protocol.md states it, over the whole stream at once: newline-terminated lines,
// one trailing CR dropped, blank lines skipped; a line over the limit ends the stream, and so does an
// unterminated tail that can no longer become a line within the limit (one that is over it even if its last
// byte is the CR of a CRLF).
Lines modelLines(const QByteArray& stream, qsizetype maxLineBytes)
{
    Lines out;
    qsizetype begin = 0;
    for (;;) {
        const qsizetype newline = stream.indexOf('\n', begin);
        if (newline < 0) {
            const QByteArray tail = stream.mid(begin);
            if (tail.size() > maxLineBytes + (tail.endsWith('\r') ? 1 : 0))
                out.overflowed = true;
            return out;
        }
        QByteArray line = stream.mid(begin, newline - begin);
        begin = newline + 1;
        if (line.endsWith('\r'))
            line.chop(1);
        if (line.size() > maxLineBytes) {
            out.overflowed = true;
            return out;
        }
        if (!line.trimmed().isEmpty())
            out.lines.append(line);
    }
}

Lines bufferLines(const QByteArray& stream, qsizetype chunk, qsizetype maxLineBytes)
{
    ControlLineBuffer buffer(maxLineBytes);
    Lines out;
    for (qsizetype at = 0; at < stream.size(); at += chunk) {
        buffer.append(stream.mid(at, chunk));
        while (const std::optional<QByteArray> line = buffer.takeLine()) {
            fuzz::check(!line->contains('\n') && line->size() <= maxLineBytes,
                        "a line holds no newline and is within the limit");
            out.lines.append(*line);
        }
    }
    out.overflowed = buffer.overflowed();
    return out;
}

void checkFraming(const QByteArray& stream, qsizetype chunk, qsizetype maxLineBytes)
{
    const Lines expected = modelLines(stream, maxLineBytes);
    const Lines got = bufferLines(stream, chunk, maxLineBytes);
    // Once the buffer overflows the connection closes, so only the lines before it count.
    fuzz::check(got.overflowed == expected.overflowed,
                "a stream overflows the line limit however it is cut into reads",
                QStringLiteral("limit %1, %2 bytes per read: the buffer %3, the model %4")
                    .arg(maxLineBytes)
                    .arg(chunk)
                    .arg(got.overflowed ? u"overflowed" : u"did not overflow")
                    .arg(expected.overflowed ? u"overflows" : u"does not overflow"));
    fuzz::check(got.lines == expected.lines, "the lines do not depend on how the stream is cut into reads");
}

void checkRequest(const QByteArray& line)
{
    const auto parsed = parseControlRequest(line);
    if (const auto* error = std::get_if<ControlRequestError>(&parsed)) {
        fuzz::check(!error->message.isEmpty(), "a refused request has a message");
        return;
    }
    const ControlRequest& request = std::get<ControlRequest>(parsed);
    QByteArray wire = encodeControlMessage(controlRequest(request.id, request.cmd, request.args));
    fuzz::check(wire.endsWith('\n') && wire.count('\n') == 1, "a message is one line");
    wire.chop(1);
    const auto again = parseControlRequest(wire);
    const auto* back = std::get_if<ControlRequest>(&again);
    fuzz::check(back && back->id == request.id && back->cmd == request.cmd && back->args == request.args,
                "an accepted request reads back the same", QString::fromUtf8(wire));
}

void checkReply(const QByteArray& line)
{
    const Result<QJsonObject> object = parseControlLine(line);
    if (!object)
        return;
    if (isControlEvent(*object))
        return;
    const Result<ControlReply> reply = parseControlReply(*object);
    if (!reply)
        return;
    if (reply->ok && !reply->id)
        return; // no builder writes a successful reply without an id
    QByteArray wire = encodeControlMessage(reply->ok ? controlReply(*reply->id, reply->result)
                                                     : controlError(reply->id, reply->error));
    wire.chop(1);
    const Result<QJsonObject> againObject = parseControlLine(wire);
    fuzz::check(bool(againObject), "a built reply is a JSON object");
    const Result<ControlReply> again = parseControlReply(*againObject);
    fuzz::check(again && again->id == reply->id && again->ok == reply->ok && again->result == reply->result &&
                    again->error == reply->error,
                "an accepted reply reads back the same", QString::fromUtf8(wire));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    const qsizetype chunk = 1 + data[0] % 64;
    const QByteArray stream = fuzz::bytes(data + 1, size - 1);

    // A small limit, so that inputs libFuzzer can reach cross it; then the real one, whose lines are parsed.
    checkFraming(stream, chunk, 32);
    const Lines lines = bufferLines(stream, chunk, kMaxControlLineBytes);
    for (const QByteArray& line : lines.lines) {
        checkRequest(line);
        checkReply(line);
    }
    return 0;
}
