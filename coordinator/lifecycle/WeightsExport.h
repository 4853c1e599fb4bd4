#pragma once
// A job's weights for its admin (GET /api/v1/jobs/ID/weights): the server weights as safetensors, named as
// PyTorch's state_dict names them, or a TorchScript job's own archive with those weights in it. A job that
// keeps an average of its weights ("ema_decay") exports the average, which its validations measured. A live
// job's are asked of the weights thread; an ended job's are its last snapshot (and the average in the rule's
// state beside it). State thread; the archive and the average are written on the programs thread, and the
// answer comes later.

#include "Result.h"
#include "http/HttpTypes.h"
#include "util/SerialExecutor.h"

#include <QString>

namespace gleaner::coordinator {

class BlobStore;
class Database;
class JobDesk;
class JobTakeUp;
class WeightsKeeper;

class WeightsExport
{
public:
    struct Parts
    {
        JobDesk& jobs;
        JobTakeUp& takeUp;
        Database& db;
        WeightsKeeper& weights;
        BlobStore& blobs;
        SerialExecutor& programs;
    };
    // `scratch`: the folder an archive is written in before it joins the blobs.
    WeightsExport(Parts parts, QString scratch) : m_parts(parts), m_scratch(std::move(scratch)) {}

    void serve(qint64 jobId, Responder respond, bool torchscript = false);

private:
    // The blob of the average held in the rule's state `ruleSha` beside the snapshot `weightsSha` (that
    // snapshot itself when the state holds none yet). On failure the export serves the snapshot, with a
    // warning.
    Result<QString> averageOf(const QString& weightsSha, const QString& ruleSha, qint64 version);

    Parts m_parts;
    const QString m_scratch;
};

} // namespace gleaner::coordinator
