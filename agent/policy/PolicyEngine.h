#pragma once
// Decides, from the preferences and one Observation of the machine, whether the agent may compute now, and
// with how much of it. The daemon (agent/daemon/DesktopPolicy) samples the probes every few seconds, calls
// evaluate() and applies the Decision; the engine itself reads no clock and no device, so every rule is
// tested with hand-made observations.
//
// The rules, checked in this order; the first that blocks decides the mode, the reason code and the reason:
//  1. schedule: the schedule does not allow now                   -> Wait,  "schedule"
//     "Waiting: outside your schedule; next start Mon 18:00" (English day names, whatever the locale).
//  2. pause_on_battery, power known and on battery                  -> Pause, "on_battery", "Paused: on
//  battery"
//  3. a pause-list program runs                                     -> Pause, "program_running",
//     "Paused: steam is running" / "steam and obs are running" / "steam, obs and 1 more are running".
//  4. only_when_idle, respect_inhibitors and the session inhibited  -> Pause, "inhibited",
//     "Paused: firefox (video playing) keeps the screen awake".
//  5. only_when_idle and no idle source                             -> Wait,  "idle_unknown": computing while
//  the
//     user may be at the keyboard is the one thing the owner asked us not to do, so unknown is not "idle"
//     here.
//  6. only_when_idle and idle for less than idle_seconds            -> Pause, "user_active" when the previous
//     decision was Compute or already user_active (the user interrupted us, and is told so until computing
//     starts again); otherwise Wait, "idle_wait" (we are just waiting out the grace period).
//  7. other programs' CPU over other_cpu_limit_percent (limit < 100) -> Pause, "cpu_busy". Hysteresis:
//  blocking
//     starts as soon as the share exceeds the limit and ends only once it has stayed at or below 80% of the
//     limit for 30 s in a row (Observation::nowMs), so a program that works in bursts does not make us flap.
//  8. otherwise                                                     -> Compute, "computing".
// An input whose probe is not `known` never blocks (except idle, rule 5). A negative idle time (clock skew)
// counts as 0. The CPU hysteresis follows every observation, even while an earlier rule blocks, so a machine
// that has been quiet all along computes at once when the user leaves.
//
// The resources of the Decision are resolved whatever the mode, so the daemon and the status show what
// computing would use: threads from max_cores (0: all cores but one, at least one; never more than the
// machine has), cpuShare from cpu_share_percent, the memory cap and the GPU from whether the user is idle.
// The user counts as idle when the idle time reached idle_seconds and (with respect_inhibitors) nothing holds
// the screen awake.

#include "Observation.h"
#include "Preferences.h"

#include <QString>

namespace gleaner::agent {

struct Decision
{
    enum class Mode
    {
        Compute,
        Wait,
        Pause
    };
    Mode mode = Mode::Wait;
    QString reasonCode; // stable word for programs: schedule, on_battery, ..., computing
    QString reason;     // for people; starts with "Computing: ", "Waiting: " or "Paused: "
    int threads = 1;    // cores for all workers together
    double cpuShare = 1.0;
    qint64 memoryCapBytes = 0; // per subtask; 0: none
    bool gpuAllowed = false;
    bool userIdle = false;

    bool operator==(const Decision& other) const = default;
};

class PolicyEngine
{
public:
    // Stateful only for the CPU hysteresis and for knowing whether the previous decision was to compute.
    Decision evaluate(const Preferences& prefs, const Observation& now);
    // Forgets the previous decisions (after a snooze or a switch to dedicated mode, say).
    void reset();

    // 40 s, 3 min, 1 min 30 s, 2 h, 2 h 5 min, 1 d, 1 d 3 h, 2 d (util/DurationText); whole seconds, rounded down.
    static QString formatDuration(qint64 ms);

private:
    // Follows the other programs' CPU share; true while rule 7 blocks.
    bool cpuBlocks(const Preferences& prefs, const Observation& now);

    Decision m_previous;
    bool m_cpuBlocking = false;
    qint64 m_cpuCalmSinceMs =
        -1; // since when the share has stayed at or below 80% of the limit; -1: it has not
};

} // namespace gleaner::agent
