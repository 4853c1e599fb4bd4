#pragma once
// The first run on a computer that is not enrolled yet: the volunteer enters the coordinator's address and
// the enrollment token their coordinator's admin gave them, fetches the coordinator's certificate and
// compares its SHA-256 fingerprint with the admin's, then enrolls. Enrollment is `gleaner-agent enroll URL
// --token T
// --ca PEM --data-dir DIR --json`, run asynchronously; its error text is shown as it is. A certificate that
// chains to an authority the system trusts needs no pinning (and no comparison); any other is pinned.

#include "CertificateFetcher.h"
#include "Result.h"

#include <QDialog>
#include <QProcess>
#include <QUrl>

#include <memory>
#include <optional>

class QCheckBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTemporaryFile;

namespace gleaner::gui {

class FirstRunDialog : public QDialog
{
    Q_OBJECT
public:
    // `agentProgram`: the gleaner-agent to run; empty: it cannot be found (Enroll says so).
    FirstRunDialog(const QString& dataDir, const QString& agentProgram, QWidget* parent = nullptr);
    ~FirstRunDialog() override;

    // "https://HOST[:PORT]" with nothing after the port (a trailing "/" is fine); a message naming the text
    // and the expected form otherwise.
    static Result<QUrl> parseCoordinatorUrl(const QString& text);

    // For tests and screenshots.
    QLineEdit* urlEdit() const { return m_url; }
    QLineEdit* tokenEdit() const { return m_token; }
    QPushButton* fetchButton() const { return m_fetch; }
    QPushButton* enrollButton() const { return m_enroll; }
    QCheckBox* comparedCheckBox() const { return m_compared; }
    QString errorText() const;
    QString fingerprintText() const;
    bool isBusy() const;
    // The arguments of the last enrollment started.
    QStringList lastArguments() const { return m_lastArguments; }

public Q_SLOTS:
    // Cancels a fetch or an enrollment in progress.
    void reject() override;

Q_SIGNALS:
    // Enrollment succeeded: the folder holds an enrolled agent's configuration now.
    void enrolled(const QString& agentId);

private:
    void onFetch();
    void onFetched(const FetchedCertificate& certificate);
    void onEnroll();
    void onEnrollFinished(int exitCode, QProcess::ExitStatus status);
    void onInputEdited();
    void showError(const QString& message);
    void setBusy(bool busy, const QString& what = {});
    void updateButtons();

    QString m_dataDir;
    QString m_agentProgram;
    QLineEdit* m_url;
    QLineEdit* m_token;
    QPushButton* m_fetch;
    QLabel* m_fingerprint;
    QLabel* m_certificate;
    QLabel* m_details;
    QCheckBox* m_compared;
    QLabel* m_error;
    QProgressBar* m_busy;
    QLabel* m_busyText;
    QPushButton* m_enroll;
    QDialogButtonBox* m_buttons;
    CertificateFetcher m_fetcher;
    std::optional<FetchedCertificate> m_fetched;
    QUrl m_fetchedUrl;
    QProcess* m_process = nullptr;
    std::unique_ptr<QTemporaryFile> m_pem;
    QStringList m_lastArguments;
};

} // namespace gleaner::gui
