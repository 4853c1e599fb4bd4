#pragma once
// gleaner-sim's engine: C simulated agents train a job through the coordinator's own Scheduler (workunits,
// leases, epochs) and AggregationRule (with WeightsKeeper's checked fold), on a simulated clock. Every subtask
// is trained for real with the Trainer the worker uses and validated with the Evaluator the coordinator uses;
// only time is simulated: an agent of speed s takes samples / (rate s) seconds (plus the network time) for a
// subtask, so the figures do not depend on this machine's load, and a run is reproducible bit for bit on one
// machine for a seed.
//
// What it does not simulate: progress reports (subtasks are far shorter than their deadline), a validation's
// own duration (it happens at the moment it is due), and the upload checks of the hardening work (its agents
// are honest).

#include "Result.h"
#include "sim/SimOptions.h"

#include <QJsonObject>

#include <functional>
#include <map>

namespace gleaner::coordinator::sim {

struct SimPoint
{
    double seconds = 0.0; // simulated
    qint64 samples = 0;   // trained samples folded in so far
    qint64 version = 0;
    int epoch = 0;
    bool epochEnd = false;
    double accuracy = 0.0;
    double loss = 0.0;
};

struct SimUpdate
{
    double seconds = 0.0;
    QString agent;
    qint64 staleness = 0;
    bool folded = true;
    std::optional<double> accuracy; // when a validation followed this update
    qint64 uploadBytes = 0;         // the upload as it would go over the wire
};

struct SimReport
{
    QString rule;
    QJsonObject aggregation; // the rule's parameters as a job spec gives them
    QJsonObject upload;      // the upload encoding, as a job spec gives it
    QJsonObject download;    // the publications' density, as a job spec gives it
    qint64 weightsBytes = 0; // the full weights file, what an fp32 upload sends
    qint64 leases = 0;
    qint64 downloadBytes = 0; // weights bytes agents fetched for their leases (files and patches)
    // Leases whose weights the agent fetched, by how many publications its newest usable file was behind (0: it
    // held none of the last few, and fetched the whole file); what they cost. Leases of a file it held cost nothing.
    struct Fetches
    {
        qint64 leases = 0;
        qint64 bytes = 0;
    };
    std::map<int, Fetches> fetchesBehind;
    int agents = 0;
    std::vector<double> speeds;
    std::vector<SimPoint> points; // every validation, in time order
    std::vector<SimUpdate> updates;
    qint64 preempted = 0; // subtasks lost part-way (--preemption)
    qint64 handedBack = 0; // of those, handed back by their agent (--on-preempt hand-back or bare)
    qint64 resumedLeases = 0; // leases that resumed a handed-back checkpoint
    double lostTrainSeconds = 0.0; // training time preempted agents spent that nobody resumed from (redone)
    QString ended; // why the run stopped
    QJsonObject width; // the job's measured width and its history (JobWidth::toJson; at_ms simulated)
    double bestAccuracy() const;
    QJsonObject toJson(const SimOptions& options) const;
    QByteArray toCsv() const;
};

class Simulation
{
public:
    using Progress = std::function<void(const QString& line)>;
    static Result<SimReport> run(const SimOptions& options, const Progress& progress = {});
};

} // namespace gleaner::coordinator::sim
