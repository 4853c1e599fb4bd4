#pragma once
// One subtask the agent holds, in the main window: the job, epoch and shard, its state, a progress bar of
// mini-batches (step of total), the loss, the speed and the time left.

#include <QFrame>
#include <QJsonObject>

class QLabel;
class QProgressBar;

namespace gleaner::gui {

class SubtaskView : public QFrame
{
    Q_OBJECT
public:
    explicit SubtaskView(QWidget* parent = nullptr);

    // A subtask of the status object's `subtasks`.
    void setSubtask(const QJsonObject& subtask);

    QString title() const;
    QString details() const;
    QProgressBar* progressBar() const { return m_progress; }

private:
    QLabel* m_title;
    QProgressBar* m_progress;
    QLabel* m_details;
};

// The subtask state in words ("training", "downloading its data", ...).
QString subtaskStateText(const QString& state);

} // namespace gleaner::gui
