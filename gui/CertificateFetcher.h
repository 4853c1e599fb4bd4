#pragma once
// Reads a coordinator's TLS certificate for the first-run dialog, so the volunteer can compare its
// fingerprint with the one the coordinator's admin gave them before the agent pins it. The connection
// verifies nothing (VerifyNone) because its only purpose is to read the certificate the server presents:
// nothing is sent over it, and the enrollment that follows runs over a connection verified against the pinned
// certificate.

#include <QByteArray>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QUrl>

class QSslSocket;

namespace gleaner::gui {

struct FetchedCertificate
{
    QByteArray pem;      // the server's own (leaf) certificate
    QString fingerprint; // SHA-256, as TlsCertificate::fingerprint writes it ("3A:F0:...")
    QString subject;     // "CN=coord.example, O=..."
    QString issuer;
    QStringList names;  // subjectAltNames ("DNS:coord.example", "IP:10.0.0.2")
    QString validUntil; // in the locale's date format
    // The certificate chains to an authority this system trusts, for the URL's host name: no pinning needed.
    bool trustedBySystem = false;
};

class CertificateFetcher : public QObject
{
    Q_OBJECT
public:
    explicit CertificateFetcher(QObject* parent = nullptr);
    ~CertificateFetcher() override;

    // Connects to the URL's host and port (443 when none), reads the certificate, disconnects. Ends with
    // fetched() or failed(), never both, never synchronously.
    void fetch(const QUrl& url, int timeoutMs = 10000);
    void cancel();
    bool isBusy() const { return m_socket != nullptr; }

Q_SIGNALS:
    void fetched(const FetchedCertificate& certificate);
    void failed(const QString& message);

private:
    void onEncrypted();
    void finishWithError(const QString& message);
    void dropSocket();

    QSslSocket* m_socket = nullptr;
    QTimer m_timeout;
    QString m_host;
    int m_port = 0;
};

} // namespace gleaner::gui
