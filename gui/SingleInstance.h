#pragma once
// One tray app per user and data folder: the first instance listens on a local socket in the user's runtime
// folder; a second one finds it there, asks it to show its window, and ends.

#include <QLocalServer>
#include <QObject>
#include <QString>

namespace gleaner::gui {

class SingleInstance : public QObject
{
    Q_OBJECT
public:
    explicit SingleInstance(const QString& dataDir, QObject* parent = nullptr);

    // true: this is the first instance, now listening; false: another runs for the folder and was asked to
    // show itself. A socket that cannot be made does not stop the app (a warning in the log).
    bool claim();
    QString socketPath() const { return m_path; }

Q_SIGNALS:
    // A second instance was started: show the window.
    void activated();

private:
    QString m_path;
    QLocalServer m_server;
};

} // namespace gleaner::gui
