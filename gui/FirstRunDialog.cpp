#include "FirstRunDialog.h"

#include "StateIcons.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFontDatabase>
#include <QFormLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTemporaryFile>
#include <QVBoxLayout>

namespace gleaner::gui {
namespace {

QLabel* textLabel(const QString& objectName, QWidget* parent)
{
    auto* label = new QLabel(parent);
    label->setObjectName(objectName);
    label->setWordWrap(true);
    label->setTextFormat(Qt::PlainText);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    return label;
}

} // namespace

Result<QUrl> FirstRunDialog::parseCoordinatorUrl(const QString& text)
{
    const QString trimmed = text.trimmed();
    const QString form = QStringLiteral("enter it as https://HOST:PORT, as your coordinator's admin gave it");
    if (trimmed.isEmpty())
        return fail(QStringLiteral("Enter the coordinator's address; %1.").arg(form));
    if (!trimmed.contains(QStringLiteral("://")))
        return fail(QStringLiteral("\"%1\" does not start with https://; %2.").arg(trimmed, form));
    const QUrl url(trimmed, QUrl::StrictMode);
    if (!url.isValid() || url.host().isEmpty())
        return fail(QStringLiteral("\"%1\" is not a coordinator address; %2.").arg(trimmed, form));
    if (url.scheme() != u"https")
        return fail(
            QStringLiteral("\"%1\" does not start with https://; the coordinator only speaks HTTPS, so %2.")
                .arg(trimmed, form));
    if (!url.userInfo().isEmpty() || url.hasQuery() || url.hasFragment() ||
        (!url.path().isEmpty() && url.path() != u"/"))
        return fail(QStringLiteral("\"%1\" has more than a host and a port; %2.").arg(trimmed, form));
    QUrl clean;
    clean.setScheme(QStringLiteral("https"));
    clean.setHost(url.host());
    clean.setPort(url.port());
    return clean;
}

FirstRunDialog::FirstRunDialog(const QString& dataDir, const QString& agentProgram, QWidget* parent)
    : QDialog(parent), m_dataDir(dataDir), m_agentProgram(agentProgram)
{
    setWindowTitle(QStringLiteral("Welcome to Gleaner"));
    setWindowIcon(appIcon());
    setObjectName(QStringLiteral("firstRunDialog"));

    auto* intro = textLabel(QStringLiteral("intro"), this);
    intro->setText(
        QStringLiteral("Gleaner lends this computer's idle time to train machine-learning models for a "
                       "coordinator you choose. "
                       "Enter the address and the enrollment token your coordinator's admin gave you."));

    m_url = new QLineEdit(this);
    m_url->setObjectName(QStringLiteral("url"));
    m_url->setPlaceholderText(QStringLiteral("https://coordinator.example:8443"));
    m_token = new QLineEdit(this);
    m_token->setObjectName(QStringLiteral("token"));
    m_token->setPlaceholderText(QStringLiteral("leave empty if the coordinator is open to all"));
    m_fetch = new QPushButton(QStringLiteral("Fetch certificate"), this);
    m_fetch->setObjectName(QStringLiteral("fetch"));

    auto* form = new QFormLayout;
    form->addRow(QStringLiteral("Coordinator:"), m_url);
    form->addRow(QStringLiteral("Enrollment token:"), m_token);

    m_fingerprint = textLabel(QStringLiteral("fingerprint"), this);
    m_fingerprint->setWordWrap(false);
    QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    mono.setBold(true);
    m_fingerprint->setFont(mono);
    m_fingerprint->setContentsMargins(12, 0, 0, 0);
    m_fingerprint->hide();
    m_certificate = textLabel(QStringLiteral("certificate"), this);
    m_certificate->setText(
        QStringLiteral("Fetch the coordinator's certificate to see its fingerprint before you trust it."));
    m_details = textLabel(QStringLiteral("certificateDetails"), this);
    m_details->hide();
    m_compared = new QCheckBox(
        QStringLiteral("I have compared this fingerprint with the one my coordinator's admin gave me"), this);
    m_compared->setObjectName(QStringLiteral("compared"));
    m_compared->hide();

    m_error = textLabel(QStringLiteral("error"), this);
    m_error->setStyleSheet(QStringLiteral("QLabel { color: #b3261e; }"));
    m_error->hide();
    m_busy = new QProgressBar(this);
    m_busy->setRange(0, 0); // an indicator that moves, with no percentage
    m_busy->setMaximumHeight(10);
    m_busy->setTextVisible(false);
    m_busy->hide();
    m_busyText = textLabel(QStringLiteral("busy"), this);
    m_busyText->hide();

    m_buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    m_enroll = m_buttons->addButton(QStringLiteral("Enroll"), QDialogButtonBox::AcceptRole);
    m_enroll->setObjectName(QStringLiteral("enrollButton"));

    auto* fetchRow = new QHBoxLayout;
    fetchRow->addWidget(m_fetch);
    fetchRow->addStretch(1);

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(intro);
    layout->addLayout(form);
    layout->addLayout(fetchRow);
    layout->addWidget(m_certificate);
    layout->addWidget(m_fingerprint);
    layout->addWidget(m_details);
    layout->addWidget(m_compared);
    layout->addWidget(m_error);
    layout->addWidget(m_busyText);
    layout->addWidget(m_busy);
    layout->addStretch(1);
    layout->addWidget(m_buttons);
    resize(580, 400);

    connect(m_fetch, &QPushButton::clicked, this, &FirstRunDialog::onFetch);
    connect(m_url, &QLineEdit::textEdited, this, &FirstRunDialog::onInputEdited);
    connect(m_compared, &QCheckBox::toggled, this, &FirstRunDialog::updateButtons);
    connect(&m_fetcher, &CertificateFetcher::fetched, this, &FirstRunDialog::onFetched);
    connect(&m_fetcher, &CertificateFetcher::failed, this, [this](const QString& message) {
        setBusy(false);
        showError(QStringLiteral("Could not fetch the certificate: %1.").arg(message));
    });
    // Enroll runs the enrollment; the dialog closes only when it succeeded.
    connect(m_buttons, &QDialogButtonBox::accepted, this, &FirstRunDialog::onEnroll);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &FirstRunDialog::reject);
    updateButtons();
}

FirstRunDialog::~FirstRunDialog()
{
    if (m_process) {
        m_process->disconnect(this);
        m_process->kill();
        m_process->waitForFinished(2000);
    }
}

void FirstRunDialog::reject()
{
    m_fetcher.cancel();
    if (m_process)
        m_process->kill(); // finished() follows and tidies up
    QDialog::reject();
}

QString FirstRunDialog::errorText() const
{
    return m_error->isHidden() ? QString() : m_error->text();
}

QString FirstRunDialog::fingerprintText() const
{
    return m_fetched ? m_fetched->fingerprint : QString();
}

bool FirstRunDialog::isBusy() const
{
    return m_fetcher.isBusy() || m_process;
}

void FirstRunDialog::showError(const QString& message)
{
    m_error->setText(message);
    m_error->setVisible(!message.isEmpty());
}

void FirstRunDialog::setBusy(bool busy, const QString& what)
{
    m_busy->setVisible(busy);
    m_busyText->setText(what);
    m_busyText->setVisible(busy && !what.isEmpty());
    m_url->setEnabled(!busy);
    m_token->setEnabled(!busy);
    updateButtons();
}

void FirstRunDialog::updateButtons()
{
    const bool busy = isBusy();
    m_fetch->setEnabled(!busy);
    const bool confirmed = m_fetched && (m_fetched->trustedBySystem || m_compared->isChecked());
    m_enroll->setEnabled(!busy && confirmed);
}

void FirstRunDialog::onInputEdited()
{
    // A certificate belongs to the address it came from.
    if (m_fetched && parseCoordinatorUrl(m_url->text()).ok() &&
        *parseCoordinatorUrl(m_url->text()) == m_fetchedUrl)
        return;
    if (m_fetched) {
        m_fetched.reset();
        m_compared->setChecked(false);
        m_compared->hide();
        m_fingerprint->hide();
        m_details->hide();
        m_certificate->setText(QStringLiteral("The address changed: fetch its certificate again."));
    }
    updateButtons();
}

void FirstRunDialog::onFetch()
{
    showError({});
    auto url = parseCoordinatorUrl(m_url->text());
    if (!url) {
        showError(url.error());
        m_url->setFocus();
        return;
    }
    m_fetched.reset();
    m_compared->setChecked(false);
    m_compared->hide();
    m_fingerprint->hide();
    m_details->hide();
    m_certificate->setText(QString());
    m_fetchedUrl = *url;
    m_fetcher.fetch(*url);
    setBusy(true, QStringLiteral("Connecting to %1…").arg(url->toString()));
}

void FirstRunDialog::onFetched(const FetchedCertificate& certificate)
{
    m_fetched = certificate;
    setBusy(false);
    // Two lines of 16 bytes: easier to compare, pair by pair, than one line of 95 characters.
    const QString& fingerprint = certificate.fingerprint;
    m_fingerprint->setText(fingerprint.size() == 95 ? fingerprint.left(47) + u'\n' + fingerprint.mid(48)
                                                    : fingerprint);
    m_fingerprint->show();
    QString text = QStringLiteral("Issued to: %1").arg(certificate.subject);
    if (!certificate.names.isEmpty())
        text += QStringLiteral("\nNames: %1").arg(certificate.names.join(QStringLiteral(", ")));
    if (certificate.issuer != certificate.subject)
        text += QStringLiteral("\nIssued by: %1").arg(certificate.issuer);
    text += QStringLiteral("\nValid until: %1").arg(certificate.validUntil);
    if (certificate.trustedBySystem)
        text += QStringLiteral(
            "\n\nAn authority this computer trusts vouches for this certificate; the agent will "
            "verify the coordinator against this computer's authorities.");
    else
        text += QStringLiteral(
            "\n\nNo authority this computer trusts vouches for this certificate. Compare the "
            "fingerprint above with your admin's, character by character: the agent will trust "
            "this certificate, and only it, for this coordinator.");
    m_certificate->setText(QStringLiteral("SHA-256 fingerprint of the coordinator's certificate:"));
    m_details->setText(text);
    m_details->show();
    m_compared->setVisible(!certificate.trustedBySystem);
    updateButtons();
}

void FirstRunDialog::onEnroll()
{
    showError({});
    auto url = parseCoordinatorUrl(m_url->text());
    if (!url) {
        showError(url.error());
        return;
    }
    if (!m_fetched || *url != m_fetchedUrl) {
        showError(QStringLiteral("Fetch the coordinator's certificate first, and compare its fingerprint."));
        return;
    }
    if (m_agentProgram.isEmpty()) {
        showError(
            QStringLiteral("Cannot enroll: the gleaner-agent program is neither next to gleaner nor in PATH; "
                           "install the Gleaner agent."));
        return;
    }
    QStringList arguments{QStringLiteral("enroll"), url->toString()};
    // The token goes through a pipe, never the command line: other users can read /proc/PID/cmdline.
    const QByteArray token = m_token->text().trimmed().toUtf8();
    if (!token.isEmpty())
        arguments << QStringLiteral("--token-file") << QStringLiteral("-");
    if (!m_fetched->trustedBySystem) {
        m_pem = std::make_unique<QTemporaryFile>(QDir::tempPath() + QStringLiteral("/gleaner-ca-XXXXXX.pem"));
        if (!m_pem->open() || m_pem->write(m_fetched->pem) != m_fetched->pem.size() || !m_pem->flush()) {
            showError(
                QStringLiteral("Could not write the certificate to a temporary file (%1): %2; check the "
                               "space and permissions of %3.")
                    .arg(m_pem->fileName(), m_pem->errorString(), QDir::tempPath()));
            m_pem.reset();
            return;
        }
        arguments << QStringLiteral("--ca") << m_pem->fileName();
    }
    arguments << QStringLiteral("--data-dir") << m_dataDir << QStringLiteral("--json");
    m_lastArguments = arguments;

    m_process = new QProcess(this);
    m_process->setProgram(m_agentProgram);
    m_process->setArguments(arguments);
    if (token.isEmpty())
        m_process->setStandardInputFile(QProcess::nullDevice());
    connect(m_process, &QProcess::finished, this, &FirstRunDialog::onEnrollFinished);
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
        if (error != QProcess::FailedToStart)
            return; // a crash also ends in finished()
        const QString message = m_process->errorString();
        m_process->deleteLater();
        m_process = nullptr;
        m_pem.reset();
        setBusy(false);
        showError(QStringLiteral("Could not run %1: %2.").arg(m_agentProgram, message));
    });
    setBusy(true, QStringLiteral("Enrolling with %1…").arg(url->toString()));
    m_process->start();
    if (!token.isEmpty()) {
        m_process->write(token + '\n');
        m_process->closeWriteChannel();
    }
}

void FirstRunDialog::onEnrollFinished(int exitCode, QProcess::ExitStatus status)
{
    const QByteArray out = m_process->readAllStandardOutput();
    QString err = QString::fromUtf8(m_process->readAllStandardError()).trimmed();
    m_process->deleteLater();
    m_process = nullptr;
    m_pem.reset();
    setBusy(false);
    if (status != QProcess::NormalExit || exitCode != 0) {
        const QString prefix = QStringLiteral("gleaner-agent enroll: ");
        if (err.startsWith(prefix))
            err = err.mid(prefix.size());
        if (err.isEmpty())
            err = status == QProcess::NormalExit
                      ? QStringLiteral("gleaner-agent enroll ended with exit code %1 and said nothing")
                            .arg(exitCode)
                      : QStringLiteral("gleaner-agent enroll was stopped before it finished");
        showError(QStringLiteral("Enrollment failed: %1").arg(err));
        return;
    }
    const QJsonObject result = QJsonDocument::fromJson(out).object();
    Q_EMIT enrolled(result.value(u"agent_id").toString());
    accept();
}

} // namespace gleaner::gui
