#pragma once
// gleaner-sim --baseline: plain training of the job's model with its optimizer over its whole training set, in
// one process with one persistent optimizer, as one agent of speed 1. It stops at the same validation points as a
// simulated run (every N shards' worth of samples, and every epoch's end) through the Trainer's checkpoints, which
// hold the optimizer's state, and reports the same way.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "sim/Simulation.h"
#include "spec/JobSpec.h"
#include "tensor/TensorBundle.h"

namespace gleaner::coordinator::sim {

// `initial`: the job's starting weights; `test`: its test split; `scratch`: a folder for the checkpoint.
Result<SimReport> runBaseline(const SimOptions& options, const JobSpec& spec, const TensorBundle& initial,
                              const ml::Dataset& test, const QString& scratch, const Simulation::Progress& progress);

} // namespace gleaner::coordinator::sim
