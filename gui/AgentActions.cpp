#include "AgentActions.h"

#include "AgentLink.h"

#include <QAction>
#include <QApplication>
#include <QLocale>
#include <QMessageBox>

namespace gleaner::gui {
namespace {

// A menu shows one line; a long reason is cut at a word with an ellipsis (the tooltip has it all).
QString menuLine(const QString& reason)
{
    constexpr qsizetype kMax = 70;
    if (reason.size() <= kMax)
        return reason;
    qsizetype cut = reason.lastIndexOf(u' ', kMax);
    if (cut < kMax / 2)
        cut = kMax;
    return reason.left(cut) + QChar(0x2026);
}

} // namespace

AgentActions::AgentActions(AgentLink& link, QObject* parent)
    : QObject(parent), m_link(link), m_status(new QAction(this)), m_pauseResume(new QAction(this)),
      m_snooze(new QAction(QStringLiteral("Snooze 1 hour"), this)),
      m_finish(new QAction(QStringLiteral("Finish and stop…"), this)),
      m_open(new QAction(QStringLiteral("Open Gleaner"), this)),
      m_preferences(new QAction(QStringLiteral("Preferences…"), this)),
      m_quit(new QAction(QStringLiteral("Quit"), this))
{
    m_status->setEnabled(false);
    m_snooze->setToolTip(QStringLiteral("Pause for an hour, then carry on by itself"));
    m_finish->setToolTip(
        QStringLiteral("Finish the subtasks in hand, take no new ones, then stop the agent"));
    m_quit->setToolTip(QStringLiteral("Close this window and the tray icon; the agent keeps working"));
    m_preferences->setMenuRole(QAction::PreferencesRole);
    m_quit->setMenuRole(QAction::QuitRole);
    m_confirm = [](const QString& title, const QString& question) {
        return QMessageBox::question(QApplication::activeWindow(), title, question) == QMessageBox::Yes;
    };

    connect(m_pauseResume, &QAction::triggered, this, &AgentActions::onToggle);
    connect(m_snooze, &QAction::triggered, this, [this] { m_link.snooze(kSnoozeSeconds); });
    connect(m_finish, &QAction::triggered, this, &AgentActions::onFinish);
    connect(m_open, &QAction::triggered, this, &AgentActions::openWindowRequested);
    connect(m_preferences, &QAction::triggered, this, &AgentActions::preferencesRequested);
    connect(m_quit, &QAction::triggered, this, &AgentActions::quitRequested);
    connect(&m_link, &AgentLink::changed, this, &AgentActions::update);
    update();
}

void AgentActions::update()
{
    const QString state = m_link.state();
    const bool connected = m_link.isConnected();
    m_status->setText(menuLine(m_link.reason()));
    m_status->setToolTip(m_link.reason());

    const bool winding = state == u"finishing" || state == u"stopped";
    if (!connected) {
        m_mode = Toggle::StartAgent;
        m_pauseResume->setText(QStringLiteral("Start the agent"));
        m_pauseResume->setEnabled(m_link.isEnrolled() && !m_link.isStarting());
    } else if (isPausedByUser(m_link.status())) {
        m_mode = Toggle::Resume;
        m_pauseResume->setText(QStringLiteral("Resume"));
        m_pauseResume->setEnabled(true);
    } else {
        m_mode = Toggle::Pause;
        m_pauseResume->setText(QStringLiteral("Pause"));
        m_pauseResume->setEnabled(!winding);
    }
    m_snooze->setEnabled(connected && !winding);
    const QDateTime until = snoozedUntil(m_link.status());
    m_snooze->setText(m_link.reasonCode() == u"snoozed" && until.isValid()
                          ? QStringLiteral("Snooze 1 hour (snoozed until %1)")
                                .arg(QLocale().toString(until.time(), QLocale::ShortFormat))
                          : QStringLiteral("Snooze 1 hour"));
    m_finish->setEnabled(connected && !winding);
    m_preferences->setEnabled(connected);
    if (m_link.isReadOnly()) {
        // The machine's system agent belongs to the organisation: its state is shown, nothing changed here.
        m_pauseResume->setEnabled(false);
        m_snooze->setEnabled(false);
        m_finish->setEnabled(false);
    }
}

void AgentActions::onToggle()
{
    switch (m_mode) {
    case Toggle::Pause:
        m_link.pause();
        break;
    case Toggle::Resume:
        m_link.resume();
        break;
    case Toggle::StartAgent:
        m_link.startAgent();
        break;
    }
}

void AgentActions::onFinish()
{
    if (!m_confirm(
            QStringLiteral("Finish and stop Gleaner?"),
            QStringLiteral("The agent finishes the subtasks it holds, takes no new ones, and then stops. It "
                           "does not start again until you start it (from this menu, or at your next "
                           "login).\n\nFinish and stop now?")))
        return;
    m_link.finish();
}

} // namespace gleaner::gui
