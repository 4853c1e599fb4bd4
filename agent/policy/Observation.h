#pragma once
// What the desktop policy sees of the machine at one moment: the probes (agent/idle, agent/power, agent/gpu,
// agent/system) fill one Observation, and PolicyEngine::evaluate() turns it and the preferences into a
// Decision. Plain values, so the engine is tested with hand-made observations and an injected time, never with
// a real desktop or a sleep.
//
// Every part has `known`: a probe that has nothing to say (no X display, no battery, no NVML) leaves it false,
// and the engine treats an unknown input as "no reason to stop" (an unknown idle time is the exception: see
// PolicyEngine).

#include <QDateTime>
#include <QString>
#include <QStringList>

namespace gleaner::agent {

struct IdleObservation
{
    bool known = false;
    QString source;     // which source answered: "logind", "mutter", "screensaver", "x11" (docs/desktop.md)
    qint64 idleMs = 0;  // time since the user's last input
    bool inhibited = false;   // an inhibitor holds the session awake (a video, a presentation)
    QString inhibitedBy;      // who, for the reason: "firefox (video playing)"; may be empty
};

struct PowerObservation
{
    bool known = false;     // false on a machine without power-supply information
    bool onBattery = false; // a battery discharges and no mains adapter is online
    int batteryPercent = -1; // -1: unknown
};

struct CpuObservation
{
    bool known = false;        // false until two /proc/stat samples exist
    double otherPercent = 0;   // other programs' share of the whole machine (all cores = 100), ours excluded
};

struct GpuObservation
{
    bool known = false; // false without NVML (no NVIDIA driver): "no GPU info", not an error
    int count = 0;
    QString name;              // of the first GPU, for people
    int utilisationPercent = 0; // the busiest GPU's utilisation, ours included
};

struct Observation
{
    qint64 nowMs = 0;        // ms since the Unix epoch
    QDateTime localTime;     // the same moment in the machine's time zone, for the weekly schedule
    IdleObservation idle;
    PowerObservation power;
    CpuObservation cpu;
    GpuObservation gpu;
    QStringList pauseProgramsRunning; // the pause-list programs found running, as the preference names them
    int cores = 1;                    // logical CPUs of the machine
};

} // namespace gleaner::agent
