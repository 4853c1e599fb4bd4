// The first-run dialog: it refuses addresses it cannot use with a message that says the expected form, reads
// a real TLS server's certificate and shows TlsCertificate's fingerprint of it, waits for the volunteer to
// confirm the comparison, and runs `gleaner-agent enroll` (here a script that records its arguments) with the
// pinned certificate, showing its error text as it is.
#include "FirstRunDialog.h"
#include "TestSupport.h"
#include "crypto/TlsCertificate.h"

#include <QCheckBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSslKey>
#include <QSslSocket>
#include <QTcpServer>
#include <QTest>

using namespace gleaner;
using namespace gleaner::gui;
using gleaner::test::readFile;
using gleaner::test::scratchDir;
using gleaner::test::writeFile;

namespace {

// A TLS server on an ephemeral loopback port that presents `identity` and says nothing.
class TlsServer : public QTcpServer
{
public:
    explicit TlsServer(const TlsIdentity& identity) : m_identity(identity) {}

protected:
    void incomingConnection(qintptr descriptor) override
    {
        auto* socket = new QSslSocket(this);
        if (!socket->setSocketDescriptor(descriptor)) {
            delete socket;
            return;
        }
        socket->setLocalCertificate(QSslCertificate(m_identity.certificatePem));
        socket->setPrivateKey(QSslKey(m_identity.privateKeyPem, QSsl::Ec));
        socket->startServerEncryption();
    }

private:
    TlsIdentity m_identity;
};

// A stand-in for gleaner-agent: records its arguments and the pinned certificate, then answers as told.
QString fakeAgent(const QString& dir, int exitCode, const QByteArray& out, const QByteArray& err)
{
    const QString path = dir + QStringLiteral("/gleaner-agent");
    QByteArray script = "#!/bin/sh\n"
                        "printf '%s\\n' \"$@\" > \"" +
                        dir.toUtf8() +
                        "/args\"\n"
                        "while [ $# -gt 0 ]; do [ \"$1\" = --ca ] && cp \"$2\" \"" +
                        dir.toUtf8() + "/ca.pem\"; [ \"$1\" = --token-file ] && cat > \"" + dir.toUtf8() +
                        "/token\"; shift; done\n";
    if (!out.isEmpty())
        script += "printf '%s\\n' '" + out + "'\n";
    if (!err.isEmpty())
        script += "printf '%s\\n' '" + err + "' >&2\n";
    script += "exit " + QByteArray::number(exitCode) + "\n";
    writeFile(path, script);
    QFile::setPermissions(path, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    return path;
}

} // namespace

class TestFirstRunDialog : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void aBadAddressSaysTheExpectedForm();
    void fetchesTheCertificateAndShowsItsFingerprint();
    void aServerThatIsNotThereOrNotTls();
    void enrollmentErrorsAreShownAsTheAgentWordsThem();
    void enrollmentSucceeds();
    void noAgentProgram();

private:
    // A dialog whose certificate was fetched from a fresh TLS server; false when that failed.
    bool fetch(FirstRunDialog& dialog, TlsIdentity& identity);
    std::unique_ptr<TlsServer> m_server;
};

bool TestFirstRunDialog::fetch(FirstRunDialog& dialog, TlsIdentity& identity)
{
    auto made =
        TlsCertificate::generateSelfSigned({QStringLiteral("localhost"), QStringLiteral("127.0.0.1")});
    if (!made)
        return false;
    identity = *made;
    m_server = std::make_unique<TlsServer>(identity);
    if (!m_server->listen(QHostAddress::LocalHost))
        return false;
    dialog.urlEdit()->setText(QStringLiteral("https://127.0.0.1:%1").arg(m_server->serverPort()));
    QTest::mouseClick(dialog.fetchButton(), Qt::LeftButton);
    return QTest::qWaitFor([&] { return !dialog.isBusy(); }, 10000) && !dialog.fingerprintText().isEmpty();
}

void TestFirstRunDialog::aBadAddressSaysTheExpectedForm()
{
    const auto dir = scratchDir();
    FirstRunDialog dialog(dir->path(), QStringLiteral("/bin/false"));
    dialog.show();
    QVERIFY(!dialog.enrollButton()->isEnabled());
    QTest::keyClicks(dialog.urlEdit(), QStringLiteral("coord.example:8443"));
    QTest::mouseClick(dialog.fetchButton(), Qt::LeftButton);
    QCOMPARE(dialog.errorText(),
             QStringLiteral("\"coord.example:8443\" does not start with https://; enter it as "
                            "https://HOST:PORT, as your coordinator's admin gave it."));
    QVERIFY(!dialog.isBusy());
    QVERIFY(!dialog.enrollButton()->isEnabled());

    dialog.urlEdit()->setText(QStringLiteral("https://coord.example:8443/admin"));
    QTest::mouseClick(dialog.fetchButton(), Qt::LeftButton);
    QVERIFY2(dialog.errorText().contains(QStringLiteral("has more than a host and a port")),
             qPrintable(dialog.errorText()));
}

void TestFirstRunDialog::fetchesTheCertificateAndShowsItsFingerprint()
{
    const auto dir = scratchDir();
    FirstRunDialog dialog(dir->path(), QStringLiteral("/bin/false"));
    dialog.show();
    TlsIdentity identity;
    QVERIFY2(fetch(dialog, identity), qPrintable(dialog.errorText()));
    QCOMPARE(dialog.fingerprintText(), *TlsCertificate::fingerprint(identity.certificatePem));
    QCOMPARE(dialog.fingerprintText().size(), 95);
    // Shown in two lines of 16 bytes.
    const QString fingerprint = dialog.findChild<QLabel*>(QStringLiteral("fingerprint"))->text();
    QCOMPARE(fingerprint.size(), 95);
    QCOMPARE(QString(fingerprint).replace(u'\n', u':'), dialog.fingerprintText());
    const QString shown = dialog.findChild<QLabel*>(QStringLiteral("certificateDetails"))->text();
    QVERIFY2(shown.contains(QStringLiteral("Issued to: CN=localhost")), qPrintable(shown));
    QVERIFY2(shown.contains(QStringLiteral("Names: DNS:localhost, IP:127.0.0.1")), qPrintable(shown));

    // Self-signed: nothing vouches for it, so the volunteer must say they compared it.
    QVERIFY(dialog.comparedCheckBox()->isVisible());
    QVERIFY(!dialog.enrollButton()->isEnabled());
    dialog.comparedCheckBox()->setChecked(true);
    QVERIFY(dialog.enrollButton()->isEnabled());

    // Another address: that certificate no longer counts.
    dialog.urlEdit()->setText(QString());
    QTest::keyClicks(dialog.urlEdit(), QStringLiteral("https://other.example:8443"));
    QVERIFY(!dialog.enrollButton()->isEnabled());
    QVERIFY(dialog.fingerprintText().isEmpty());
}

void TestFirstRunDialog::aServerThatIsNotThereOrNotTls()
{
    const auto dir = scratchDir();
    FirstRunDialog dialog(dir->path(), QStringLiteral("/bin/false"));
    dialog.show();

    // A port nobody listens on (taken, then freed).
    quint16 port = 0;
    {
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        port = probe.serverPort();
    }
    dialog.urlEdit()->setText(QStringLiteral("https://127.0.0.1:%1").arg(port));
    QTest::mouseClick(dialog.fetchButton(), Qt::LeftButton);
    QTRY_VERIFY(!dialog.isBusy());
    QVERIFY2(
        dialog.errorText().startsWith(QStringLiteral("Could not fetch the certificate: could not connect to "
                                                     "127.0.0.1:%1")
                                          .arg(port)),
        qPrintable(dialog.errorText()));

    // A server that answers in plain HTTP.
    QTcpServer plain;
    QVERIFY(plain.listen(QHostAddress::LocalHost));
    connect(&plain, &QTcpServer::newConnection, &plain, [&plain] {
        QTcpSocket* socket = plain.nextPendingConnection();
        connect(socket, &QTcpSocket::readyRead, socket, [socket] {
            socket->readAll();
            socket->write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            socket->disconnectFromHost();
        });
    });
    dialog.urlEdit()->setText(QStringLiteral("https://127.0.0.1:%1").arg(plain.serverPort()));
    QTest::mouseClick(dialog.fetchButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.isBusy(), 10000);
    QVERIFY2(
        dialog.errorText().startsWith(QStringLiteral("Could not fetch the certificate: 127.0.0.1:%1 did not "
                                                     "answer with TLS")
                                          .arg(plain.serverPort())),
        qPrintable(dialog.errorText()));
    QVERIFY(dialog.fingerprintText().isEmpty());
    QVERIFY(!dialog.enrollButton()->isEnabled());
}

void TestFirstRunDialog::enrollmentErrorsAreShownAsTheAgentWordsThem()
{
    const auto dir = scratchDir();
    const QString program =
        fakeAgent(dir->path(), 1, {},
                  "gleaner-agent enroll: the coordinator refused the enrollment token; ask "
                  "its admin for a new one");
    FirstRunDialog dialog(dir->filePath(QStringLiteral("data")), program);
    dialog.show();
    TlsIdentity identity;
    QVERIFY2(fetch(dialog, identity), qPrintable(dialog.errorText()));
    dialog.tokenEdit()->setText(QStringLiteral(" tok-123 "));
    dialog.comparedCheckBox()->setChecked(true);
    QSignalSpy enrolled(&dialog, &FirstRunDialog::enrolled);
    QTest::mouseClick(dialog.enrollButton(), Qt::LeftButton);
    QVERIFY(dialog.isBusy());
    QVERIFY(!dialog.enrollButton()->isEnabled());
    QTRY_VERIFY(!dialog.isBusy());
    QCOMPARE(dialog.errorText(),
             QStringLiteral("Enrollment failed: the coordinator refused the enrollment token; "
                            "ask its admin for a new one"));
    QCOMPARE(enrolled.size(), 0);
    QVERIFY(dialog.isVisible());

    const QString url = QStringLiteral("https://127.0.0.1:%1").arg(m_server->serverPort());
    const QStringList args =
        QString::fromUtf8(readFile(dir->filePath(QStringLiteral("args")))).trimmed().split(u'\n');
    QCOMPARE(args.size(), 9);
    // The token comes through standard input, never the command line (other users can read it there).
    QCOMPARE(args.mid(0, 4), (QStringList{QStringLiteral("enroll"), url, QStringLiteral("--token-file"),
                                          QStringLiteral("-")}));
    QCOMPARE(readFile(dir->filePath(QStringLiteral("token"))), QByteArray("tok-123\n"));
    QCOMPARE(args.at(4), QStringLiteral("--ca"));
    QCOMPARE(args.mid(6), (QStringList{QStringLiteral("--data-dir"), dir->filePath(QStringLiteral("data")),
                                       QStringLiteral("--json")}));
    // The pinned certificate is the one whose fingerprint was shown, and its temporary file is gone.
    QCOMPARE(*TlsCertificate::fingerprint(readFile(dir->filePath(QStringLiteral("ca.pem")))),
             dialog.fingerprintText());
    QVERIFY(!QFile::exists(args.at(5)));
}

void TestFirstRunDialog::enrollmentSucceeds()
{
    const auto dir = scratchDir();
    const QString program = fakeAgent(
        dir->path(), 0, R"({"agent_id": "a-1", "coordinator_url": "https://x", "data_dir": "d"})", {});
    FirstRunDialog dialog(dir->filePath(QStringLiteral("data")), program);
    dialog.show();
    TlsIdentity identity;
    QVERIFY2(fetch(dialog, identity), qPrintable(dialog.errorText()));
    dialog.comparedCheckBox()->setChecked(true);
    QSignalSpy enrolled(&dialog, &FirstRunDialog::enrolled);
    QTest::mouseClick(dialog.enrollButton(), Qt::LeftButton);
    QTRY_COMPARE(enrolled.size(), 1);
    QCOMPARE(enrolled.at(0).at(0).toString(), QStringLiteral("a-1"));
    QCOMPARE(dialog.result(), int(QDialog::Accepted));
    // An open coordinator: no token given, none passed.
    QVERIFY(!readFile(dir->filePath(QStringLiteral("args"))).contains("--token"));
}

void TestFirstRunDialog::noAgentProgram()
{
    const auto dir = scratchDir();
    FirstRunDialog dialog(dir->path(), QString());
    dialog.show();
    TlsIdentity identity;
    QVERIFY2(fetch(dialog, identity), qPrintable(dialog.errorText()));
    dialog.comparedCheckBox()->setChecked(true);
    QTest::mouseClick(dialog.enrollButton(), Qt::LeftButton);
    QVERIFY2(dialog.errorText().contains(QStringLiteral("neither next to gleaner nor in PATH")),
             qPrintable(dialog.errorText()));
}

QTEST_MAIN(TestFirstRunDialog)
#include "TestFirstRunDialog.moc"
