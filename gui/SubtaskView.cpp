#include "SubtaskView.h"

#include "Formatting.h"

#include <QLabel>
#include <QLocale>
#include <QProgressBar>
#include <QVBoxLayout>

#include <climits>

namespace gleaner::gui {

QString subtaskStateText(const QString& state)
{
    if (state == u"leased")
        return QStringLiteral("starting");
    if (state == u"downloading")
        return QStringLiteral("downloading its data");
    if (state == u"verified")
        return QStringLiteral("ready to train");
    if (state == u"uploading")
        return QStringLiteral("uploading the result");
    return state; // training, paused, done, failed, dropped
}

SubtaskView::SubtaskView(QWidget* parent)
    : QFrame(parent), m_title(new QLabel(this)), m_progress(new QProgressBar(this)),
      m_details(new QLabel(this))
{
    setFrameShape(QFrame::StyledPanel);
    m_title->setObjectName(QStringLiteral("subtaskTitle"));
    m_title->setTextFormat(Qt::PlainText);
    QFont bold = m_title->font();
    bold.setBold(true);
    m_title->setFont(bold);
    m_progress->setObjectName(QStringLiteral("subtaskProgress"));
    m_progress->setTextVisible(true);
    m_details->setObjectName(QStringLiteral("subtaskDetails"));
    m_details->setTextFormat(Qt::PlainText);
    m_details->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(8, 6, 8, 6);
    layout->setSpacing(4);
    layout->addWidget(m_title);
    layout->addWidget(m_progress);
    layout->addWidget(m_details);
}

void SubtaskView::setSubtask(const QJsonObject& subtask)
{
    const QJsonObject job = subtask.value(u"job").toObject();
    QString name = job.value(u"name").toString();
    if (name.isEmpty())
        name = job.value(u"id").toString(QStringLiteral("a subtask"));
    QStringList where;
    if (subtask.value(u"epoch").isDouble())
        where << QStringLiteral("epoch %1").arg(subtask.value(u"epoch").toInteger());
    if (subtask.value(u"shard").isDouble())
        where << QStringLiteral("shard %1").arg(subtask.value(u"shard").toInteger());
    QString title = name;
    if (!where.isEmpty())
        title += QStringLiteral(", ") + where.join(QStringLiteral(", "));
    const QString state = subtask.value(u"state").toString();
    if (!state.isEmpty())
        title += QStringLiteral(": ") + subtaskStateText(state);
    m_title->setText(title);

    const qint64 step = subtask.value(u"step").toInteger();
    const qint64 of = subtask.value(u"of").toInteger();
    if (of > 0) {
        // QProgressBar counts in int; a step count never comes near that.
        m_progress->setRange(0, int(qMin<qint64>(of, INT_MAX)));
        m_progress->setValue(int(qBound<qint64>(0, step, of)));
        m_progress->setFormat(QStringLiteral("%1 of %2 steps (%p%)").arg(formatCount(step), formatCount(of)));
    } else {
        m_progress->setRange(0, 1);
        m_progress->setValue(0);
        m_progress->setFormat(QStringLiteral("not started"));
    }

    QStringList details;
    const QJsonValue loss = subtask.value(u"loss");
    if (loss.isDouble())
        details << QStringLiteral("loss %1").arg(QLocale().toString(loss.toDouble(), 'f', 4));
    const QJsonValue speed = subtask.value(u"samples_per_s");
    if (speed.isDouble() && speed.toDouble() > 0)
        details << QStringLiteral("%1 samples/s").arg(QLocale().toString(speed.toDouble(), 'f', 0));
    const QJsonValue eta = subtask.value(u"eta_seconds");
    if (eta.isDouble() && eta.toDouble() >= 0 && state != u"paused")
        details << QStringLiteral("%1 left").arg(formatDuration(qint64(eta.toDouble())));
    const QString error = subtask.value(u"error").toString();
    if (!error.isEmpty())
        details << error;
    m_details->setText(details.join(QStringLiteral(" · ")));
    m_details->setVisible(!details.isEmpty());
}

QString SubtaskView::title() const
{
    return m_title->text();
}

QString SubtaskView::details() const
{
    return m_details->text();
}

} // namespace gleaner::gui
