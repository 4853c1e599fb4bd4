#pragma once
// A stand-in for gleaner-agent in the tray app's tests: a real ControlServer on a data directory's control
// socket, answered by a small scripted ControlHandler. It serves `status` (whatever setStatus() gave), acts
// out pause / resume / finish / snooze on that status and pushes the `state` event the real agent pushes, and
// keeps the preferences of docs/desktop.md: `preferences` and `set_preferences` (all or nothing, validated
// against the catalogue in preferences-catalogue.json, locked keys refused), with a `preferences` event after
// a change. Every request is recorded so a test can check what the tray app sent. It runs on the test's
// thread: wait with waitForRequest() or QTRY_*, which keep the event loop turning.
//
//     FakeAgent agent;
//     QVERIFY2(agent.start(dir->path()).ok(), ...);
//     ... the GUI sends set_preferences ...
//     QVERIFY(agent.waitForRequest(u"set_preferences"_s));
//     QCOMPARE(agent.lastArgs(u"set_preferences"_s), ...);

#include "Result.h"
#include "control/ControlHandler.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QList>
#include <QObject>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QTimer>

#include <memory>

namespace gleaner::agent {
class ControlServer;
}

namespace gleaner::gui::test {

class FakeAgent : public QObject, public agent::ControlHandler
{
    Q_OBJECT
public:
    explicit FakeAgent(QObject* parent = nullptr);
    ~FakeAgent() override;

    // Listens on controlSocketPath(dataDir), as an agent run with --data-dir dataDir would.
    Status start(const QString& dataDir);
    // Disconnects every client and removes the socket (a stopped or restarting agent).
    void stop();
    bool isRunning() const;
    agent::ControlServer* server() const { return m_server.get(); }

    // Every request handled so far, oldest first: (cmd, args). `subscribe` / `unsubscribe` are answered by
    // the ControlServer itself and do not appear.
    QList<QPair<QString, QJsonObject>> requests() const { return m_requests; }
    void clearRequests() { m_requests.clear(); }
    // The commands of requests(), in order.
    QStringList receivedCommands() const;
    // The args of the latest `cmd` request; empty when there was none.
    QJsonObject lastArgs(const QString& cmd) const;
    // Waits, with the event loop running, until requests() holds a `cmd` request (true at once when it
    // already does: clearRequests() first to wait for a new one); false after `timeoutMs`.
    bool waitForRequest(const QString& cmd, int timeoutMs = 5000);

    // The status object `status` serves. Defaults to {"state": "waiting", "reason": ..., "reason_code":
    // "idle_wait"}.
    void setStatus(const QJsonObject& status) { m_status = status; }
    QJsonObject status() const { return m_status; }
    // Publishes `event` ({"event": NAME, ...}) to the subscribed clients.
    void pushEvent(const QJsonObject& event);

    // The preference catalogue (docs/desktop.md's table): preferences-catalogue.json unless replaced.
    static QJsonArray defaultCatalogue();
    QJsonArray catalogue() const { return m_catalogue; }
    // Replaces the catalogue (to add a key a newer agent would have); values of new keys start at their
    // default.
    void setCatalogue(const QJsonArray& catalogue);
    // The current values, every catalogue key present.
    QJsonObject values() const { return m_values; }
    // Sets values as an organisation's policy or an earlier session would, without validation or event.
    void setValues(const QJsonObject& values);
    // Keys the user may not change (an organisation's policy), without event.
    void setLocked(const QStringList& keys) { m_locked = keys; }
    QStringList locked() const { return m_locked; }
    void setPolicyFile(const QString& path) { m_policyFile = path; }
    // The preferences object of docs/desktop.md: {values, locked, policy_file, catalogue}.
    QJsonObject preferencesObject() const;
    // Pushes {"event": "preferences", values, locked}, as the agent does after a change.
    void publishPreferences();

    // ControlHandler: status, pause, resume, finish, snooze, preferences, set_preferences.
    QStringList commands() const override;
    Result<QJsonObject> handle(const QString& cmd, const QJsonObject& args) override;

Q_SIGNALS:
    void requestReceived(const QString& cmd, const QJsonObject& args);

private:
    Result<QJsonObject> setPreferences(const QJsonObject& args);
    Result<QJsonObject> snooze(const QJsonObject& args);
    QJsonObject enterState(const QString& state, const QString& reason, const QString& reasonCode);
    QJsonObject resume();

    std::unique_ptr<agent::ControlServer> m_server;
    QList<QPair<QString, QJsonObject>> m_requests;
    QJsonObject m_status;
    QJsonObject m_beforePause; // state, reason, reason_code to return to on resume
    QTimer m_snoozeTimer;
    QJsonArray m_catalogue;
    QJsonObject m_values;
    QStringList m_locked;
    QString m_policyFile;
};

} // namespace gleaner::gui::test
