#pragma once
// A real X server for a test: Xvfb on a display it picks itself (-displayfd), no TCP, ended by its pid when
// the test is done. Also runs xdotool against it, to make "user input" happen.

#include <QProcess>
#include <QString>

namespace gleaner::test {

class XvfbServer
{
public:
    XvfbServer() = default;
    ~XvfbServer() { kill(); }
    XvfbServer(const XvfbServer&) = delete;
    XvfbServer& operator=(const XvfbServer&) = delete;

    // Empty when the server runs; else why not, naming the package to install when Xvfb is missing.
    QString start();
    QString display() const { return m_display; } // ":N"
    qint64 pid() const { return m_process.processId(); }
    bool running() const { return m_process.state() == QProcess::Running; }
    // SIGKILL to its pid, then waits for it: the X server vanishes as a crashing one does.
    void kill();

    // Empty when xdotool is installed; else the message to skip with.
    static QString xdotoolMissing();
    // `xdotool ARGS` against this server; true when it exited with 0.
    bool xdotool(const QStringList& args) const;

private:
    QProcess m_process;
    QString m_display;
};

} // namespace gleaner::test
