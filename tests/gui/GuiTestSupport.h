#pragma once
// What the tray app's tests and the screenshot program share: a realistic status object, a notifier and an
// agent launcher that record what they were asked, and a folder that looks enrolled.

#include "AgentLauncher.h"
#include "Notifier.h"

#include <QJsonObject>
#include <QList>
#include <QStringList>

#include <functional>

namespace gleaner::gui::test {

// An agent training two subtasks of fashion-cnn, with totals, a reachable coordinator and its policy.
QJsonObject realisticStatus(const QString& dataDir);

// Writes an agent.json into `dir`, so AgentConfig::isEnrolled(dir) holds; false when it cannot.
bool markEnrolled(const QString& dir);

class FakeNotifier : public Notifier
{
    Q_OBJECT
public:
    struct Shown
    {
        QString summary;
        QString body;
        Urgency urgency;
    };
    void notify(const QString& summary, const QString& body, Urgency urgency) override;

    // When set, every notification fails (as without a notification service), later, like D-Bus.
    bool failing = false;
    QList<Shown> shown;
};

class FakeLauncher : public AgentLauncher
{
public:
    Status start(const QString& dataDir) override;

    QStringList started;
    // Runs on each start (e.g. starts a FakeAgent on the folder); its result is start()'s.
    std::function<Status(const QString&)> onStart;
};

} // namespace gleaner::gui::test
