#pragma once
// A chaos soak: a real coordinator and N real agents on the loopback interface (E2eCluster) train jobs while,
// for a set time, a seeded random schedule SIGKILLs an agent or the coordinator (or SIGTERMs an agent, which hands
// its work back) and starts it again after a short random delay. A job that completes during the chaos is followed
// by the next round of the same job, so the kills always meet work. Then the kills stop, the last job runs to its
// end, every process is stopped, and SoakAudit checks what an operator can see: every update answered 202 folded
// in exactly once, no workunit lost or done twice, every job at its target.
//
//     auto options = ChaosOptions::parse(arguments);   // --seconds 600 --agents 3 --seed 1 ...
//     ChaosSoak soak(*options, scratchFolder);
//     const QJsonObject figures = soak.run();          // figures["ok"], figures["violations"]

#include "E2eCluster.h"
#include "Result.h"

#include <QElapsedTimer>
#include <QJsonObject>
#include <QStringList>

#include <memory>
#include <random>

namespace gleaner::e2e {

struct ChaosOptions
{
    int seconds = 600;
    int agents = 3;
    quint64 seed = 1;
    int killIntervalMinMs = 3'000;
    int killIntervalMaxMs = 15'000;
    // How long a killed process stays down; past the job's deadline_seconds its leases expire.
    int downMinMs = 200;
    int downMaxMs = 12'000;
    double coordinatorKillProbability = 0.25;
    // The chaos goes on past `seconds` until this many of each were killed (a short run's guarantee).
    int minAgentKills = 0;
    int minCoordinatorKills = 0;
    int snapshotEveryUpdates = 8; // small, so that kills meet snapshots and replays alike
    int finishTimeoutSeconds = 900;
    QJsonObject job; // the job spec of every round
    bool keep = false;
    bool json = false;

    // The soak's default job: E2eCluster::fashionJob() with 3,000 images in 4 shards, a 10 s lease deadline
    // and a target of 0.75 within 30 epochs, so one round takes a minute or two on one core.
    static QJsonObject defaultJob();
    static QString usage();
    // The command line; fails naming the option that is wrong and what it takes.
    static Result<ChaosOptions> parse(const QStringList& arguments);
};

class ChaosSoak
{
public:
    ChaosSoak(ChaosOptions options, QString root);
    ~ChaosSoak();
    ChaosSoak(const ChaosSoak&) = delete;
    ChaosSoak& operator=(const ChaosSoak&) = delete;

    // Runs the whole soak; the figures: duration_s, agent_kills, coordinator_kills, rounds, updates_accepted,
    // final_version, target_reached, seconds_to_target, ok, violations and the audit's figures.
    QJsonObject run();

private:
    Status setUp();
    Status chaos();
    Status finish();
    QJsonObject audit();

    // Waits `ms`, polling the current job while the coordinator runs; a completed job starts the next round
    // while `nextRounds` holds.
    Status watch(int ms, bool nextRounds);
    Status submitRound();
    Status killAndRestart();
    Status restartCoordinator();
    void note(const QString& line) const;
    int uniform(int min, int max);

    ChaosOptions m_options;
    QString m_root;
    std::unique_ptr<E2eCluster> m_cluster;
    std::mt19937_64 m_random;
    QElapsedTimer m_clock;

    QList<qint64> m_jobs;
    qint64 m_roundSubmittedMs = 0;
    double m_lastSecondsToTarget = -1;
    bool m_currentCompleted = false;
    int m_agentKills = 0;
    int m_agentLeaves = 0; // agent kills by SIGTERM (the agent hands back what it holds)
    int m_coordinatorKills = 0;
    double m_chaosSeconds = 0;
    QStringList m_errors;
};

} // namespace gleaner::e2e
