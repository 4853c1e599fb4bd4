#pragma once
// One project's leasing: asks its coordinator for work when there are free slots and the computer may be
// used, follows the coordinator's signing key when a reply names another (its signed rotations from the
// pinned key), and takes each leased task on: recorded in the store before anything of it is fetched, its
// manifest checked with the key in force. Also what the coordinator said of this agent (quarantined, work
// held back). Per project; the slots, the desktop's say and the subtask steps are the machine's, reached
// through Hooks.
//
// On the event loop's thread; the coordinator calls go through the network thread (NetworkHop).

#include "Result.h"
#include "config/AgentConfig.h"
#include "config/PinnedKeys.h"
#include "net/CoordinatorMessages.h"
#include "runner/SubtaskStore.h"
#include "runner/TaskManifest.h"
#include "util/Clock.h"

#include <QJsonObject>
#include <QTimer>

#include <functional>

namespace gleaner::agent {

class CoordinatorClient;
class EventFeed;
class FileCache;
class NetworkHop;
class SubtaskTable;
struct FailureStreak;

class LeaseDesk
{
public:
    struct Settings
    {
        qint64 maxBackoffMs = 60'000;
        // Batch mode (--until-empty): ask again by the end of the idle wait at the latest, to stop on time.
        bool untilEmpty = false;
        double idleExitSeconds = 120;
    };
    // What the leasing asks of, and tells, the rest of the agent.
    struct Hooks
    {
        std::function<bool()> closed;   // no new work: stopping, finishing, or the credentials refused
        std::function<bool()> stopping; // a reply that comes back now is dropped
        std::function<int()> freeSlots; // subtasks that may be taken now (0 or less: none)
        std::function<QJsonObject()> capabilities;
        std::function<void(const QString& error)> credentialsRefused;
        std::function<void()> reached;
        std::function<void(const QString& error)> unreachable;
        std::function<void()> stateChanged;
        std::function<void(bool noWork)> answered; // the coordinator had work (or held it back) or none
        std::function<void(const LeaseId&, const QString& stage, const QString& reason)> failSubtask;
        std::function<void(const LeaseId&)> taken; // recorded and checked: its steps begin
    };

    LeaseDesk(const AgentConfig& config, PinnedKeys& keys, CoordinatorClient& client, NetworkHop& network,
              FileCache& cache, SubtaskStore& store, SubtaskTable& subtasks, EventFeed& feed,
              FailureStreak& failures, const Clock& clock, Settings settings, Hooks hooks);

    // Asks for work in `delayMs` (or sooner, if already due sooner).
    void schedule(qint64 delayMs);
    // No request until the next schedule().
    void hold() { m_timer.stop(); }
    // When the next request goes out, while one is due.
    bool due() const { return m_timer.isActive(); }
    qint64 nextTryMs() const { return m_nextTryMs; }
    // The coordinator's reason while it gives this agent no work (empty: it does).
    const QString& quarantined() const { return m_quarantined; }
    // A stored manifest, leased before any rotation since: any key this agent trusted may have signed it.
    Result<TaskManifest> checkStoredManifest(const Subtask& record) const;

private:
    void request();
    // A lease reply named a signing key other than the pinned one: follow the coordinator's signed rotations
    // to it (or log why not), then take the reply.
    void followSigningKey(const LeaseReply& reply);
    void takeReply(const LeaseReply& reply);
    // Takes a leased task on: an error when it was refused before anything of it was recorded (a lease the
    // agent has had before); a task recorded and then refused (its manifest) is failed and reported instead.
    Status accept(const LeasedTask& task);

    // A signing key the agent could not follow to is not tried again for this long.
    static constexpr qint64 kRetryUntrustedKeyMs = 10 * 60 * 1000;

    const AgentConfig& m_config;
    PinnedKeys& m_keys;
    CoordinatorClient& m_client; // on the network thread only
    NetworkHop& m_network;
    FileCache& m_cache;
    SubtaskStore& m_store;
    SubtaskTable& m_subtasks;
    EventFeed& m_feed;
    FailureStreak& m_failures;
    const Clock& m_clock;
    const Settings m_settings;
    const Hooks m_hooks;
    QTimer m_timer;
    bool m_inFlight = false;
    int m_requestFailures = 0;
    qint64 m_nextTryMs = 0;
    QString m_quarantined;
    QString m_heldBack; // the coordinator's reason, while it holds new work back (folding what it received)
    QString m_atWidth;  // the coordinator's word on jobs at their width, while it gives this agent none
    QString m_untrustedKey;
    qint64 m_untrustedUntilMs = 0;
};

} // namespace gleaner::agent
