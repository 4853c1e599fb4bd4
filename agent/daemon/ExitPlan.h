#pragma once
// What an agent that must leave does with each subtask it holds, within the grace budget it has (`--grace`:
// about 30 s on a preempted GCE instance, two minutes on AWS spot, what Slurm's --signal asks): finish it and
// upload the result (nothing is lost), hand it back with its checkpoint (the next agent resumes at the same
// step), or hand it back bare (the next agent starts at step 0, but at once rather than at the lease's
// deadline). Pure arithmetic, so that the choice is tested on its own; the agent fills in what it knows
// (Departure).

#include <QtGlobal>

namespace gleaner::agent {

struct ExitEstimate
{
    double secondsLeft = 0.0;        // of the grace budget
    double trainSecondsLeft = -1.0;  // until the worker is done; negative: not known (no pace measured yet)
    qint64 resultBytes = 0;          // the upload, when it finishes (the weights' size when not known better)
    qint64 checkpointBytes = 0;      // the checkpoint's size, written or expected
    double uploadBytesPerSecond = 0; // measured (or capped); 0: not known
    bool checkpointWritten = false;  // the worker has stopped and its checkpoint is on disk
};

enum class ExitStep
{
    Finish,                 // let the worker finish, then upload the result
    HandBackWithCheckpoint, // stop the worker (if running), upload its checkpoint with the hand-back
    HandBackBare,           // hand the lease back without a checkpoint
};

namespace ExitPlan {

// Estimates are wrong by a factor at times (a desktop's pace, an uplink's): a step is chosen only when it fits
// with room to spare.
inline constexpr double kSafety = 1.5;
// What a worker takes to write its checkpoint and exit, and one small request's round trip.
inline constexpr double kStopSeconds = 2.0;
inline constexpr double kRequestSeconds = 1.0;
// The uplink assumed before any upload was measured: a slow home line's 1 MB/s.
inline constexpr double kAssumedUploadBytesPerSecond = 1e6;

inline double uploadSeconds(qint64 bytes, double bytesPerSecond)
{
    return double(bytes) / (bytesPerSecond > 0 ? bytesPerSecond : kAssumedUploadBytesPerSecond);
}

inline ExitStep choose(const ExitEstimate& e)
{
    if (!e.checkpointWritten && e.trainSecondsLeft >= 0) {
        const double finish = e.trainSecondsLeft + uploadSeconds(e.resultBytes, e.uploadBytesPerSecond) + kRequestSeconds;
        // Finishing must leave time for the fallback too: if the worker is slower than thought, it is still stopped
        // and handed back in time.
        if (kSafety * finish <= e.secondsLeft / 2)
            return ExitStep::Finish;
    }
    const double handBack = (e.checkpointWritten ? 0.0 : kStopSeconds) +
                            uploadSeconds(e.checkpointBytes, e.uploadBytesPerSecond) + kRequestSeconds;
    if (e.checkpointBytes > 0 && kSafety * handBack <= e.secondsLeft)
        return ExitStep::HandBackWithCheckpoint;
    return ExitStep::HandBackBare;
}

} // namespace ExitPlan
} // namespace gleaner::agent
