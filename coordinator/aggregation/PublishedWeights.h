#pragma once
// A job's server weights as the weights thread published them for leases: the file agents download, the update
// it holds up to, and the patches that bring an agent's cached copy to it.

#include <QString>

#include <vector>

namespace gleaner::coordinator {

// A patch blob that turns an earlier published weights file into this one (WeightsPatch).
struct WeightsPatchRef
{
    QString fromSha256;
    QString sha256;
    qint64 size = 0;
};

struct PublishedWeights
{
    qint64 version = -1;
    QString sha256;
    qint64 size = 0;
    qint64 atMs = 0;
    qint64 throughSeq = 0; // every update received up to this seq was folded in (or refused) before the file was
                           // written: what the weights thread had handled when it published
    std::vector<WeightsPatchRef> patches{}; // from recent publications to this one (jobs with a sparse download)
};

} // namespace gleaner::coordinator
