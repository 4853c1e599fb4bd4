#pragma once
// How many agents a job can use at once, as the coordinator measures it: the gradient noise scale its rule
// measured over the agents' changes (aggregation/NoiseScale), the useful agents that follows, and their
// history for the dashboard and job status. Memory only: the rule's state holds the measurement across
// restarts, and the weights thread reports it when it loads the job (the history starts again there).

#include "aggregation/NoiseScale.h"

#include <QJsonObject>

#include <deque>
#include <optional>

namespace gleaner::coordinator {

struct JobWidth
{
    struct Point
    {
        qint64 version = 0;
        double noiseScale = 0;
        int usefulAgents = 0;
        qint64 atMs = 0;
    };

    std::optional<double> noiseScale; // the latest measurement, in updates
    std::deque<Point> history;        // the last kHistory measurements, oldest first
    int roundsFollowed = 0;           // the rule's rounds when follow() last looked

    // A measurement at server version `version`.
    void measured(qint64 version, double value, qint64 atMs);
    // The rule's measurement, recorded when a round ended since the last call (gleaner-sim, which folds on
    // the thread that keeps the job; the coordinator hears of it through WeightsListener::widthMeasured).
    void follow(const NoiseScale* noise, qint64 version, qint64 atMs);
    // The agents the job uses productively now: the noise scale, rounded, and at least kMinAgents (two agents
    // keep the measurement going: one alone makes no rounds); nullopt before the first measurement.
    std::optional<int> usefulAgents() const;
    // {"noise_scale", "useful_agents", "history": [{"version", "noise_scale", "useful_agents", "at_ms"}]};
    // empty before the first measurement.
    QJsonObject toJson() const;

    static constexpr int kMinAgents = 2;
    static constexpr int kMaxAgents = 100000;
    static constexpr size_t kHistory = 240;
};

} // namespace gleaner::coordinator
