// The control protocol's framing and messages (docs/control-protocol.md), without sockets.
#include "TestSupport.h"
#include "control/ControlProtocol.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::agent;

class TestControlProtocol : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void lineBuffer_data();
    void lineBuffer();
    void aLineArrivingInPiecesIsWhole();
    void messagesAreCompactLines();
    void requestRoundTrip();
    void replies_data();
    void replies();
};

void TestControlProtocol::lineBuffer_data()
{
    QTest::addColumn<QList<QByteArray>>("chunks");
    QTest::addColumn<QList<QByteArray>>("lines");
    QTest::addColumn<bool>("overflowed");
    using L = QList<QByteArray>;
    QTest::newRow("one line") << L{"{\"a\":1}\n"} << L{"{\"a\":1}"} << false;
    QTest::newRow("two lines in one chunk") << L{"a\nb\n"} << L{"a", "b"} << false;
    QTest::newRow("a line split in three") << L{"ab", "c", "d\n"} << L{"abcd"} << false;
    QTest::newRow("no newline yet") << L{"abc"} << L{} << false;
    QTest::newRow("CRLF") << L{"a\r\nb\r\n"} << L{"a", "b"} << false;
    QTest::newRow("blank lines skipped") << L{"\n \n\r\na\n"} << L{"a"} << false;
    QTest::newRow("exactly the limit") << L{QByteArray(16, 'x') + '\n'} << L{QByteArray(16, 'x')} << false;
    QTest::newRow("one over, complete") << L{"ok\n", QByteArray(17, 'x') + "\nlater\n"} << L{"ok"} << true;
    QTest::newRow("one over, no newline yet") << L{QByteArray(10, 'x'), QByteArray(7, 'x')} << L{} << true;
    // Found by tests/fuzz/fuzz_control: the CR of a line of exactly the limit arrived in one read and its LF
    // in the next, and the line was refused although it is accepted when both arrive together.
    QTest::newRow("exactly the limit, CR and LF in two reads")
        << L{QByteArray(16, 'x') + '\r', "\nnext\n"} << L{QByteArray(16, 'x'), "next"} << false;
    QTest::newRow("one over with a CR, no newline yet") << L{QByteArray(17, 'x') + '\r'} << L{} << true;
    QTest::newRow("nothing after overflow") << L{QByteArray(17, 'x'), "\nb\n"} << L{} << true;
}

void TestControlProtocol::lineBuffer()
{
    QFETCH(QList<QByteArray>, chunks);
    QFETCH(QList<QByteArray>, lines);
    QFETCH(bool, overflowed);
    ControlLineBuffer buffer(16);
    QList<QByteArray> got;
    for (const QByteArray& chunk : chunks) {
        buffer.append(chunk);
        while (const auto line = buffer.takeLine())
            got << *line;
    }
    QCOMPARE(got, lines);
    QCOMPARE(buffer.overflowed(), overflowed);
}

void TestControlProtocol::aLineArrivingInPiecesIsWhole()
{
    // Byte by byte, as a slow writer might send it.
    const QByteArray message = encodeControlMessage(controlRequest(1, QStringLiteral("status")));
    ControlLineBuffer buffer;
    for (qsizetype i = 0; i + 1 < message.size(); ++i) {
        buffer.append(message.mid(i, 1));
        QVERIFY(!buffer.takeLine());
    }
    buffer.append(message.right(1));
    QCOMPARE(buffer.takeLine().value(), message.chopped(1));
}

void TestControlProtocol::messagesAreCompactLines()
{
    const QByteArray bytes = encodeControlMessage(controlEvent(
        QStringLiteral("log"), {{QStringLiteral("message"), QStringLiteral("line one\nline two")}}));
    QVERIFY(bytes.endsWith('\n'));
    QCOMPARE(bytes.count('\n'), 1); // a newline inside a string is escaped
    QCOMPARE(parseControlLine(bytes.chopped(1)).value().value(u"message").toString(),
             QStringLiteral("line one\nline two"));
    const QJsonObject hello = controlHello(QStringLiteral("1.2.3"), 42);
    QCOMPARE(encodeControlMessage(hello).chopped(1),
             QByteArray("{\"agent_version\":\"1.2.3\",\"event\":\"hello\",\"pid\":42,\"protocol\":1}"));
}

void TestControlProtocol::requestRoundTrip()
{
    const QJsonObject args{{QStringLiteral("x"), 1}};
    const QByteArray line =
        encodeControlMessage(controlRequest(9007199254740992LL, QStringLiteral("echo"), args));
    const auto parsed = parseControlRequest(line.chopped(1));
    QVERIFY(std::holds_alternative<ControlRequest>(parsed));
    const auto& request = std::get<ControlRequest>(parsed);
    QCOMPARE(request.id, 9007199254740992LL);
    QCOMPARE(request.cmd, QStringLiteral("echo"));
    QCOMPARE(request.args, args);
    // "args" may be left out.
    const auto bare = parseControlRequest("{\"id\":1,\"cmd\":\"status\"}");
    QVERIFY(std::holds_alternative<ControlRequest>(bare));
    QVERIFY(std::get<ControlRequest>(bare).args.isEmpty());
}

void TestControlProtocol::replies_data()
{
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<bool>("valid");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<qint64>("id"); // -1: null
    QTest::addColumn<QString>("error");
    QTest::newRow("ok") << QByteArray("{\"id\":3,\"ok\":true,\"result\":{\"state\":\"paused\"}}") << true
                        << true << qint64(3) << QString();
    QTest::newRow("ok without result")
        << QByteArray("{\"id\":3,\"ok\":true}") << true << true << qint64(3) << QString();
    QTest::newRow("error") << QByteArray("{\"id\":4,\"ok\":false,\"error\":\"no\"}") << true << false
                           << qint64(4) << QStringLiteral("no");
    QTest::newRow("error without text")
        << QByteArray("{\"id\":4,\"ok\":false}") << true << false << qint64(4)
        << QStringLiteral("gleaner-agent refused the request without saying why");
    QTest::newRow("error for an unreadable request")
        << QByteArray("{\"id\":null,\"ok\":false,\"error\":\"bad\"}") << true << false << qint64(-1)
        << QStringLiteral("bad");
    QTest::newRow("no ok") << QByteArray("{\"id\":4}") << false << false << qint64(0) << QString();
    QTest::newRow("id a string") << QByteArray("{\"id\":\"4\",\"ok\":true}") << false << false << qint64(0)
                                 << QString();
    QTest::newRow("result an array") << QByteArray("{\"id\":4,\"ok\":true,\"result\":[]}") << false << false
                                     << qint64(0) << QString();
}

void TestControlProtocol::replies()
{
    QFETCH(QByteArray, line);
    QFETCH(bool, valid);
    QFETCH(bool, ok);
    QFETCH(qint64, id);
    QFETCH(QString, error);
    const auto object = parseControlLine(line);
    QVERIFY(object.ok());
    QVERIFY(!isControlEvent(*object));
    const auto reply = parseControlReply(*object);
    QCOMPARE(reply.ok(), valid);
    if (!valid)
        return;
    QCOMPARE(reply->ok, ok);
    QCOMPARE(reply->id.value_or(-1), id);
    QCOMPARE(reply->error, error);
}

QTEST_GUILESS_MAIN(TestControlProtocol)
#include "TestControlProtocol.moc"
