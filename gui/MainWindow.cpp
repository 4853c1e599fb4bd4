#include "MainWindow.h"

#include "AgentActions.h"
#include "AgentLink.h"
#include "Formatting.h"
#include "StateIcons.h"
#include "SubtaskView.h"

#include <QCloseEvent>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QLabel>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QStatusBar>
#include <QToolButton>
#include <QVBoxLayout>

namespace gleaner::gui {
namespace {

QLabel* wrappingLabel(const QString& objectName, QWidget* parent)
{
    auto* label = new QLabel(parent);
    label->setObjectName(objectName);
    label->setTextFormat(Qt::PlainText);
    label->setWordWrap(true);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    return label;
}

QToolButton* actionButton(QAction* action, QWidget* parent)
{
    auto* button = new QToolButton(parent);
    button->setDefaultAction(action);
    button->setToolButtonStyle(Qt::ToolButtonTextOnly);
    button->setMinimumHeight(30);
    return button;
}

} // namespace

MainWindow::MainWindow(AgentLink& link, AgentActions& actions, QWidget* parent)
    : QMainWindow(parent), m_link(link)
{
    setWindowTitle(QStringLiteral("Gleaner"));
    setWindowIcon(appIcon());
    setObjectName(QStringLiteral("gleanerMainWindow"));

    QMenu* menu = menuBar()->addMenu(QStringLiteral("&Gleaner"));
    menu->addAction(actions.pauseResume());
    menu->addAction(actions.snooze());
    menu->addAction(actions.finish());
    menu->addSeparator();
    menu->addAction(actions.preferences());
    menu->addSeparator();
    menu->addAction(actions.quit());

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(14, 12, 14, 8);
    layout->setSpacing(10);
    layout->addWidget(makeHeader());

    m_notice = wrappingLabel(QStringLiteral("notice"), central);
    m_notice->setStyleSheet(QStringLiteral("QLabel { background: #fff4d6; color: #5c3d00; border: 1px solid "
                                           "#e0b252; border-radius: 4px; padding: 6px; }"));
    m_notice->hide();
    layout->addWidget(m_notice);
    // A desk user on a shared workstation watches the organisation's system agent.
    m_managed = wrappingLabel(QStringLiteral("managed"), central);
    m_managed->setText(QStringLiteral("This computer's Gleaner service is run by your organisation: you can see what "
                                      "it does and why, and your IT administrator decides when it trains."));
    m_managed->setVisible(link.isReadOnly());
    layout->addWidget(m_managed);
    layout->addWidget(makeButtons(actions));

    auto* work = new QGroupBox(QStringLiteral("Work in progress"), central);
    m_subtaskBox = work;
    m_subtaskLayout = new QVBoxLayout(work);
    m_noSubtasks = wrappingLabel(QStringLiteral("noSubtasks"), work);
    m_noSubtasks->setText(QStringLiteral("No subtask in hand."));
    m_subtaskLayout->addWidget(m_noSubtasks);
    layout->addWidget(work);

    auto* contribution = new QGroupBox(QStringLiteral("This computer's contribution"), central);
    m_contribution = wrappingLabel(QStringLiteral("contribution"), contribution);
    (new QVBoxLayout(contribution))->addWidget(m_contribution);
    layout->addWidget(contribution);

    auto* coordinator = new QGroupBox(QStringLiteral("Coordinator"), central);
    m_coordinator = wrappingLabel(QStringLiteral("coordinator"), coordinator);
    (new QVBoxLayout(coordinator))->addWidget(m_coordinator);
    layout->addWidget(coordinator);

    auto* recent = new QGroupBox(QStringLiteral("Recent activity"), central);
    m_log = new QPlainTextEdit(recent);
    m_log->setObjectName(QStringLiteral("log"));
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(AgentLink::kMaxLogLines);
    m_log->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_log->setMinimumHeight(110);
    (new QVBoxLayout(recent))->addWidget(m_log);
    layout->addWidget(recent, 1);

    setCentralWidget(central);
    statusBar()->setSizeGripEnabled(true);
    resize(560, 660);

    connect(&m_link, &AgentLink::changed, this, &MainWindow::update);
    update();
}

QWidget* MainWindow::makeHeader()
{
    auto* header = new QWidget(this);
    auto* row = new QHBoxLayout(header);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(12);
    m_icon = new QLabel(header);
    m_icon->setObjectName(QStringLiteral("stateIcon"));
    m_icon->setFixedSize(48, 48);
    row->addWidget(m_icon, 0, Qt::AlignTop);

    auto* texts = new QVBoxLayout;
    texts->setSpacing(2);
    m_state = wrappingLabel(QStringLiteral("state"), header);
    QFont big = m_state->font();
    big.setPointSizeF(big.pointSizeF() * 1.4);
    big.setBold(true);
    m_state->setFont(big);
    m_reason = wrappingLabel(QStringLiteral("reason"), header);
    texts->addWidget(m_state);
    texts->addWidget(m_reason);
    m_enroll = new QPushButton(QStringLiteral("Enroll this computer…"), header);
    m_enroll->setObjectName(QStringLiteral("enroll"));
    connect(m_enroll, &QPushButton::clicked, this, &MainWindow::enrollRequested);
    texts->addWidget(m_enroll, 0, Qt::AlignLeft);
    row->addLayout(texts, 1);
    return header;
}

QWidget* MainWindow::makeButtons(AgentActions& actions)
{
    auto* buttons = new QWidget(this);
    auto* row = new QHBoxLayout(buttons);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(actionButton(actions.pauseResume(), buttons));
    row->addWidget(actionButton(actions.snooze(), buttons));
    row->addStretch(1);
    row->addWidget(actionButton(actions.preferences(), buttons));
    return buttons;
}

void MainWindow::showNotice(const QString& text)
{
    m_notice->setText(text);
    m_notice->setVisible(!text.isEmpty());
    statusBar()->showMessage(text, 30000);
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (m_hideOnClose) {
        hide();
        event->ignore();
        return;
    }
    QMainWindow::closeEvent(event);
}

void MainWindow::update()
{
    const QJsonObject& status = m_link.status();
    const QString state = m_link.state();
    m_icon->setPixmap(stateIcon(trayStateFor(state)).pixmap(48, 48));
    m_state->setText(m_link.isConnected() ? stateTitle(state) : QStringLiteral("Not connected"));
    m_reason->setText(m_link.reason());
    m_enroll->setVisible(!m_link.isConnected() && !m_link.isEnrolled());

    updateSubtasks();

    const QJsonObject totals = status.value(u"totals").toObject();
    if (totals.isEmpty()) {
        m_contribution->setText(QStringLiteral("Nothing recorded yet."));
    } else {
        QStringList parts;
        parts
            << QStringLiteral("%1 of training").arg(formatHours(totals.value(u"train_seconds").toInteger()));
        QString done =
            QStringLiteral("%1 subtasks done").arg(formatCount(totals.value(u"subtasks_done").toInteger()));
        if (const qint64 failed = totals.value(u"subtasks_failed").toInteger(); failed > 0)
            done += QStringLiteral(" (%1 failed)").arg(formatCount(failed));
        parts << done;
        parts << QStringLiteral("%1 samples trained").arg(formatCount(totals.value(u"samples").toInteger()));
        m_contribution->setText(parts.join(QStringLiteral(" · ")));
    }

    const QJsonObject coordinator = status.value(u"coordinator").toObject();
    QStringList lines;
    const QString url = coordinator.value(u"url").toString();
    const QString name = status.value(u"name").toString();
    if (!url.isEmpty())
        lines << (name.isEmpty() ? url : QStringLiteral("%1, as %2").arg(url, name));
    if (!m_link.isConnected()) {
        lines << QStringLiteral("Unknown while the agent is not running.");
    } else if (coordinator.value(u"reachable").isBool()) {
        if (coordinator.value(u"reachable").toBool()) {
            lines << QStringLiteral("Reachable.");
        } else {
            QString line = QStringLiteral("Not reachable");
            const QJsonValue next = coordinator.value(u"next_try_ms");
            if (next.isDouble())
                line +=
                    QStringLiteral("; next try in %1").arg(formatDuration((next.toInteger() + 999) / 1000));
            lines << line + u'.';
        }
        const QString error = coordinator.value(u"last_error").toString();
        if (!error.isEmpty())
            lines << QStringLiteral("Last error: %1").arg(error);
        const QString quarantined = coordinator.value(u"quarantined").toString();
        if (!quarantined.isEmpty())
            lines << QStringLiteral("No work for this computer: %1").arg(quarantined);
    } else {
        lines << QStringLiteral("Not contacted yet.");
    }
    // The workers' sandbox, one line, once a worker reported it: what a job's code could reach here.
    if (const QString sandbox = status.value(u"sandbox").toObject().value(u"summary").toString();
        m_link.isConnected() && !sandbox.isEmpty())
        lines << QStringLiteral("Workers' sandbox: %1").arg(sandbox.left(300));
    m_coordinator->setText(lines.join(u'\n'));

    updateLog();
}

void MainWindow::updateSubtasks()
{
    const QJsonArray subtasks = m_link.status().value(u"subtasks").toArray();
    QSet<QString> present;
    int index = 0;
    for (const QJsonValue& value : subtasks) {
        const QJsonObject subtask = value.toObject();
        const QString lease = subtask.value(u"lease_id").toString();
        if (lease.isEmpty() || present.contains(lease))
            continue;
        present.insert(lease);
        SubtaskView*& view = m_subtasks[lease];
        if (!view) {
            view = new SubtaskView(m_subtaskBox);
            view->setObjectName(QStringLiteral("subtask-") + lease);
        }
        // The list's order follows the agent's, after the "none" line (hidden).
        m_subtaskLayout->insertWidget(1 + index++, view);
        view->setSubtask(subtask);
    }
    for (auto it = m_subtasks.begin(); it != m_subtasks.end();) {
        if (present.contains(it.key())) {
            ++it;
            continue;
        }
        it.value()->deleteLater();
        m_subtaskLayout->removeWidget(it.value());
        it = m_subtasks.erase(it);
    }
    m_noSubtasks->setVisible(m_subtasks.isEmpty());
}

void MainWindow::updateLog()
{
    const QList<LogLine>& log = m_link.log();
    const qint64 total = m_link.logTotal();
    const qint64 fresh = qMin<qint64>(total - m_logShown, log.size());
    for (qsizetype i = log.size() - fresh; i < log.size(); ++i) {
        const LogLine& line = log.at(i);
        QString text = line.time.toString(QStringLiteral("HH:mm:ss")) + QStringLiteral("  ");
        if (line.level == u"error")
            text += QStringLiteral("Error: ");
        else if (line.level == u"warning")
            text += QStringLiteral("Warning: ");
        m_log->appendPlainText(text + line.message);
    }
    m_logShown = total;
}

QString MainWindow::stateText() const
{
    return m_state->text();
}

QString MainWindow::reasonText() const
{
    return m_reason->text();
}

QString MainWindow::noticeText() const
{
    return m_notice->isHidden() ? QString() : m_notice->text();
}

QList<SubtaskView*> MainWindow::subtaskViews() const
{
    QList<SubtaskView*> views;
    for (int i = 0; i < m_subtaskLayout->count(); ++i)
        if (auto* view = qobject_cast<SubtaskView*>(m_subtaskLayout->itemAt(i)->widget()))
            views << view;
    return views;
}

QString MainWindow::contributionText() const
{
    return m_contribution->text();
}

QString MainWindow::coordinatorText() const
{
    return m_coordinator->text();
}

QString MainWindow::logText() const
{
    return m_log->toPlainText();
}

} // namespace gleaner::gui
