// The coordinator's Redis client against a server that requires a password, as local-redis.sh sets one up: the
// server refuses a client that does not authenticate; the client reads the password from the file its URL
// names, authenticates on every connection and reconnection, and says what to do when the password is missing,
// wrong, or kept in a file others may read.

#include "RedisServer.h"
#include "TestSupport.h"
#include "store/RedisConnection.h"

#include <QFile>
#include <QTcpSocket>
#include <QTest>
#include <QUrl>

using namespace gleaner;
using namespace gleaner::coordinator;

class TestRedisConnection : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void urlIsChecked_data();
    void urlIsChecked();
    void unauthenticatedClientIsRefused();
    void connectsWithThePasswordFileAndAgainAfterALoss();
    void missingPasswordSaysWhatToDo();
    void wrongPasswordNamesTheFile();
    void passwordFileOthersMayReadIsRefused();

private:
    // The server's URL with password_file= naming `file`.
    QString urlWithFile(const QString& file) const;
    // A file holding `bytes`, with `mode`.
    QString writeFile(const QString& name, const QByteArray& bytes, QFileDevice::Permissions mode);

    test::RedisServer m_redis;
    std::unique_ptr<QTemporaryDir> m_dir;
};

void TestRedisConnection::initTestCase()
{
    if (const QString why = test::RedisServer::missing(); !why.isEmpty())
        QSKIP(qPrintable(why));
    const QString why = m_redis.start(/*appendOnly=*/false, /*password=*/true);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    m_dir = test::scratchDir();
}

QString TestRedisConnection::urlWithFile(const QString& file) const
{
    return m_redis.urlWithoutPassword() + QStringLiteral("?password_file=") +
           QString::fromLatin1(QUrl::toPercentEncoding(file, "/"));
}

QString TestRedisConnection::writeFile(const QString& name, const QByteArray& bytes, QFileDevice::Permissions mode)
{
    const QString path = m_dir->filePath(name);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(bytes) != bytes.size() ||
        !file.setPermissions(mode))
        QTest::qFail(qPrintable(path), __FILE__, __LINE__);
    return path;
}

void TestRedisConnection::urlIsChecked_data()
{
    QTest::addColumn<QString>("url");
    QTest::addColumn<QString>("expected");
    QTest::newRow("relative file") << "redis://h:6379/0?password_file=secret" << "must be an absolute path";
    QTest::newRow("password and file") << "redis://:pw@h/0?password_file=/run/secret" << "both a password";
    QTest::newRow("other option") << "redis://h/0?tls=1" << "no option \"tls\"";
    QTest::newRow("fragment") << "redis://h/0#x" << "no fragment";
}

void TestRedisConnection::urlIsChecked()
{
    QFETCH(QString, url);
    QFETCH(QString, expected);
    const Status checked = RedisConnection::checkUrl(url);
    QVERIFY(!checked.ok());
    QVERIFY2(checked.error().contains(expected), qPrintable(checked.error()));
    QVERIFY2(!checked.error().contains(u"pw"), qPrintable(checked.error()));
    QVERIFY(RedisConnection::checkUrl(QStringLiteral("redis://h:6379/2?password_file=/run/gleaner/redis")).ok());
}

void TestRedisConnection::unauthenticatedClientIsRefused()
{
    QTcpSocket socket;
    socket.connectToHost(QStringLiteral("127.0.0.1"), quint16(m_redis.port()));
    QVERIFY(socket.waitForConnected(5'000));
    socket.write("SET gleaner:intruder 1\r\n");
    QByteArray answer;
    while (!answer.contains('\n') && socket.waitForReadyRead(5'000))
        answer += socket.readAll();
    QVERIFY2(answer.startsWith("-NOAUTH"), answer.constData());
}

void TestRedisConnection::connectsWithThePasswordFileAndAgainAfterALoss()
{
    auto connection = RedisConnection::open(m_redis.url(3));
    QVERIFY2(connection, qPrintable(connection.error()));
    QVERIFY((*connection)->command({"SET", "gleaner:test", "before"}));
    QVERIFY(!(*connection)->describe().contains(u"password"));

    // The server goes and comes back: the next command opens a new connection, which must authenticate (and
    // select database 3) again.
    m_redis.halt();
    QVERIFY(!(*connection)->command({"PING"}));
    const QString resumed = m_redis.resume();
    QVERIFY2(resumed.isEmpty(), qPrintable(resumed));
    auto written = (*connection)->command({"SET", "gleaner:test", "after"});
    QVERIFY2(written, qPrintable(written.error()));
    auto read = (*connection)->command({"GET", "gleaner:test"});
    QVERIFY2(read, qPrintable(read.error()));
    QCOMPARE(read->text, QByteArray("after"));
}

void TestRedisConnection::missingPasswordSaysWhatToDo()
{
    auto connection = RedisConnection::open(m_redis.urlWithoutPassword());
    QVERIFY(!connection);
    QVERIFY2(connection.error().contains(u"asks for a password") &&
                 connection.error().contains(u"password_file=") &&
                 connection.error().contains(m_redis.urlWithoutPassword()),
             qPrintable(connection.error()));

    auto gone = RedisConnection::open(urlWithFile(m_dir->filePath(QStringLiteral("nowhere"))));
    QVERIFY(!gone);
    QVERIFY2(gone.error().contains(m_dir->filePath(QStringLiteral("nowhere"))) &&
                 gone.error().contains(u"password_file"),
             qPrintable(gone.error()));

    const QString empty = writeFile(QStringLiteral("empty"), "\n", QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    auto none = RedisConnection::open(urlWithFile(empty));
    QVERIFY(!none);
    QVERIFY2(none.error().contains(empty) && none.error().contains(u"empty"), qPrintable(none.error()));
}

void TestRedisConnection::wrongPasswordNamesTheFile()
{
    const QString wrong =
        writeFile(QStringLiteral("wrong"), "not-the-password\n", QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    auto connection = RedisConnection::open(urlWithFile(wrong));
    QVERIFY(!connection);
    QVERIFY2(connection.error().contains(u"refused the password") && connection.error().contains(wrong) &&
                 !connection.error().contains(u"not-the-password"),
             qPrintable(connection.error()));
}

void TestRedisConnection::passwordFileOthersMayReadIsRefused()
{
    const QString open = writeFile(QStringLiteral("open"), m_redis.password() + '\n',
                                   QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ReadGroup |
                                       QFileDevice::ReadOther);
    auto connection = RedisConnection::open(urlWithFile(open));
    QVERIFY(!connection);
    QVERIFY2(connection.error().contains(QStringLiteral("chmod 600 %1").arg(open)), qPrintable(connection.error()));
    // Made private, the same file works.
    QVERIFY(QFile::setPermissions(open, QFileDevice::ReadOwner | QFileDevice::WriteOwner));
    auto fixed = RedisConnection::open(urlWithFile(open));
    QVERIFY2(fixed, qPrintable(fixed.error()));
}

QTEST_GUILESS_MAIN(TestRedisConnection)
#include "TestRedisConnection.moc"
