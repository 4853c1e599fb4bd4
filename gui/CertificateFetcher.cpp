#include "CertificateFetcher.h"

#include "crypto/TlsCertificate.h"

#include <QLocale>
#include <QSslSocket>

namespace gleaner::gui {
namespace {

QString distinguishedName(const QSslCertificate& certificate, bool subject)
{
    const auto info = [&](QSslCertificate::SubjectInfo what) {
        return subject ? certificate.subjectInfo(what) : certificate.issuerInfo(what);
    };
    QStringList parts;
    const std::pair<QSslCertificate::SubjectInfo, const char*> fields[] = {
        {QSslCertificate::CommonName, "CN"},
        {QSslCertificate::Organization, "O"},
        {QSslCertificate::OrganizationalUnitName, "OU"},
        {QSslCertificate::CountryName, "C"}};
    for (const auto& [field, label] : fields)
        for (const QString& value : info(field))
            parts << QString::fromLatin1(label) + u'=' + value;
    return parts.isEmpty() ? QStringLiteral("(empty)") : parts.join(QStringLiteral(", "));
}

} // namespace

CertificateFetcher::CertificateFetcher(QObject* parent) : QObject(parent)
{
    m_timeout.setSingleShot(true);
    connect(&m_timeout, &QTimer::timeout, this, [this] {
        finishWithError(
            QStringLiteral("%1:%2 did not complete a TLS handshake within %3 s; check the address and "
                           "that the coordinator is running and reachable from this computer")
                .arg(m_host)
                .arg(m_port)
                .arg(m_timeout.interval() / 1000));
    });
}

CertificateFetcher::~CertificateFetcher()
{
    dropSocket();
}

void CertificateFetcher::fetch(const QUrl& url, int timeoutMs)
{
    cancel();
    m_host = url.host();
    m_port = url.port(443);
    if (!QSslSocket::supportsSsl()) {
        QMetaObject::invokeMethod(
            this,
            [this] {
                Q_EMIT failed(
                    QStringLiteral("this computer's Qt has no TLS support (the OpenSSL backend plugin is "
                                   "missing); install the libqt6network6 package's TLS plugins"));
            },
            Qt::QueuedConnection);
        return;
    }
    m_socket = new QSslSocket(this);
    // Only to read the peer's certificate: see the header.
    m_socket->setPeerVerifyMode(QSslSocket::VerifyNone);
    connect(m_socket, &QSslSocket::encrypted, this, &CertificateFetcher::onEncrypted);
    connect(m_socket, &QSslSocket::sslErrors, this,
            [this](const QList<QSslError>&) { m_socket->ignoreSslErrors(); });
    connect(m_socket, &QSslSocket::errorOccurred, this, [this](QAbstractSocket::SocketError error) {
        const QString what = m_socket->errorString();
        if (error == QAbstractSocket::SslHandshakeFailedError)
            finishWithError(
                QStringLiteral("%1:%2 did not answer with TLS (%3); the coordinator's address starts "
                               "with https:// and names its HTTPS port")
                    .arg(m_host)
                    .arg(m_port)
                    .arg(what));
        else
            finishWithError(QStringLiteral("could not connect to %1:%2: %3; check the address and that the "
                                           "coordinator is running")
                                .arg(m_host)
                                .arg(m_port)
                                .arg(what));
    });
    m_timeout.start(timeoutMs);
    m_socket->connectToHostEncrypted(m_host, quint16(m_port));
}

void CertificateFetcher::cancel()
{
    m_timeout.stop();
    dropSocket();
}

void CertificateFetcher::onEncrypted()
{
    m_timeout.stop();
    const QList<QSslCertificate> chain = m_socket->peerCertificateChain();
    const QSslCertificate leaf = m_socket->peerCertificate();
    dropSocket();
    if (leaf.isNull()) {
        Q_EMIT failed(QStringLiteral("%1:%2 presented no certificate").arg(m_host).arg(m_port));
        return;
    }
    FetchedCertificate result;
    result.pem = leaf.toPem();
    const auto fingerprint = TlsCertificate::fingerprint(result.pem);
    if (!fingerprint) {
        Q_EMIT failed(QStringLiteral("the certificate of %1:%2 cannot be read: %3")
                          .arg(m_host)
                          .arg(m_port)
                          .arg(fingerprint.error()));
        return;
    }
    result.fingerprint = *fingerprint;
    result.subject = distinguishedName(leaf, true);
    result.issuer = distinguishedName(leaf, false);
    if (auto names = TlsCertificate::subjectAltNames(result.pem))
        result.names = *names;
    result.validUntil = QLocale().toString(leaf.expiryDate().date(), QLocale::LongFormat);
    result.trustedBySystem =
        QSslCertificate::verify(chain.isEmpty() ? QList<QSslCertificate>{leaf} : chain, m_host).isEmpty();
    Q_EMIT fetched(result);
}

void CertificateFetcher::finishWithError(const QString& message)
{
    if (!m_socket)
        return;
    m_timeout.stop();
    dropSocket();
    Q_EMIT failed(message);
}

void CertificateFetcher::dropSocket()
{
    if (!m_socket)
        return;
    QSslSocket* socket = std::exchange(m_socket, nullptr);
    socket->disconnect(this);
    socket->abort();
    socket->deleteLater();
}

} // namespace gleaner::gui
