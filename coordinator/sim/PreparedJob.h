#pragma once
// The job gleaner-sim runs, as the coordinator would run it: its spec with the command line's changes (--rule,
// --upload, --epochs, --speed-aware, --download), its files imported into a scratch blob store with the
// coordinator's own JobImporter, and the shards, the test split and the initial weights loaded from there.

#include "Result.h"
#include "jobs/JobImporter.h"
#include "ml/data/Dataset.h"
#include "sim/SimOptions.h"
#include "spec/JobSpec.h"
#include "tensor/TensorBundle.h"

#include <vector>

namespace gleaner::coordinator::sim {

struct PreparedJob
{
    JobSpec spec;
    ImportedJob files;
    std::vector<ml::Dataset> shards;
    ml::Dataset test;
    TensorBundle initial;
};

// `scratch`: a folder that outlives the run (the blobs and the import's files go there).
Result<PreparedJob> prepareJob(const SimOptions& options, const QString& scratch);

} // namespace gleaner::coordinator::sim
