#include "config/PresentedCertificate.h"

#include "crypto/TlsCertificate.h"
#include "policy/PolicyEnrollment.h"

#include <QSslConfiguration>
#include <QSslSocket>
#include <QStringList>

namespace gleaner::agent {

Result<QByteArray> presentedCertificate(const QUrl& url, const QString& sha256, int timeoutMs)
{
    if (!QSslSocket::supportsSsl())
        return fail(QStringLiteral("cannot read %1's certificate: Qt has no TLS backend here (is libqt6network6 "
                                   "complete?)")
                        .arg(url.toString()));
    QSslSocket socket;
    socket.setPeerVerifyMode(QSslSocket::VerifyNone); // read what is presented; the fingerprint decides
    socket.connectToHostEncrypted(url.host(), quint16(url.port(443)));
    if (!socket.waitForEncrypted(timeoutMs))
        return fail(QStringLiteral("cannot reach %1 to read its certificate: %2").arg(url.toString(), socket.errorString()));
    const QList<QSslCertificate> chain = socket.peerCertificateChain();
    socket.abort();
    QStringList seen;
    for (const QSslCertificate& certificate : chain) {
        const QByteArray pem = certificate.toPem();
        const auto fingerprint = TlsCertificate::fingerprint(pem);
        if (!fingerprint)
            continue;
        if (PolicyEnrollment::normalizeFingerprint(*fingerprint) == sha256)
            return pem;
        seen << *fingerprint;
    }
    return fail(QStringLiteral("%1 presented no certificate with the SHA-256 fingerprint the policy pins; it presented "
                               "%2. Either the policy's \"enrollment.certificate_sha256\" is out of date (compare it "
                               "with `gleaner-coordinator init`'s output) or this is not your coordinator")
                    .arg(url.toString(), seen.isEmpty() ? QStringLiteral("none") : seen.join(QStringLiteral(", "))));
}

} // namespace gleaner::agent
