#pragma once
// The desktop policy at run time: samples the probes (the user's idle time often, power, CPU, programs and
// GPU less often), asks the PolicyEngine what the owner's preferences allow now, and tells the daemon when
// that changes. It also holds the preferences (PreferenceStore) that the control socket reads and changes.
//
// The daemon applies a Decision: it pauses or resumes the workers, stops or starts leasing, and passes the
// resource limits on (threads for new subtasks, the CPU share and the memory cap at once). A `--dedicated`
// agent has no desktop: its decision is always to compute, and the probes are never read.
//
// Cadence: the idle time every 250 ms, so that a key press pauses the workers well within a second (the
// X11 query is one round trip; the D-Bus ones are cheap calls); /proc/stat every 2 s (a shorter window makes
// the other programs' CPU share jumpy); power, the pause list and the GPU every 5 s.

#include "Result.h"
#include "policy/Observation.h"
#include "policy/PolicyEngine.h"
#include "policy/PreferenceStore.h"
#include "util/Clock.h"

#include <QJsonObject>
#include <QObject>
#include <QTimer>

#include <memory>

namespace gleaner::agent {

class SessionReports;

class IdleProbe;
class PowerProbe;
class CpuProbe;
class ProcessProbe;
class GpuProbe;

struct DesktopProbes
{
    DesktopProbes();
    DesktopProbes(DesktopProbes&&) noexcept;
    DesktopProbes& operator=(DesktopProbes&&) noexcept;
    ~DesktopProbes();

    // This machine's probes; `idleSource` is "auto", one source's name, "none", or "sessions" (the system
    // service: every session's idle time, from `sessions` and logind).
    static DesktopProbes system(const QString& idleSource, std::shared_ptr<SessionReports> sessions = {});

    std::unique_ptr<IdleProbe> idle;
    std::unique_ptr<PowerProbe> power;
    std::unique_ptr<CpuProbe> cpu;
    std::unique_ptr<ProcessProbe> processes;
    std::unique_ptr<GpuProbe> gpu;
};

struct DesktopCadence
{
    int idleMs = 250;
    int cpuMs = 2'000;
    int powerMs = 5'000;
    int processesMs = 5'000;
    int gpuMs = 5'000;
};

class DesktopPolicy final : public QObject
{
    Q_OBJECT
public:
    DesktopPolicy(PreferenceStore store, DesktopProbes probes, const Clock& clock, bool dedicated,
                  DesktopCadence cadence = {}, QObject* parent = nullptr);
    ~DesktopPolicy() override;

    // Takes a first sample and starts sampling (nothing for a dedicated agent).
    void start();
    // Reads the probes that are due and evaluates; decisionChanged() when the decision differs.
    void sample();

    bool dedicated() const { return m_dedicated; }
    const Decision& decision() const { return m_decision; }
    const Observation& observation() const { return m_observation; }
    const PreferenceStore& store() const { return m_store; }
    const Preferences& preferences() const { return m_store.current(); }

    // The control socket's `set_preferences`: all or nothing; persists, then re-evaluates at once.
    Result<bool> setPreferences(const QJsonObject& values);
    // The organisation's policy file read again (PreferenceStore::reloadPolicy); re-evaluates at once when it
    // changed anything.
    Result<bool> reloadPolicy();

    // The status object's "policy" member (docs/desktop.md), less what the daemon adds.
    QJsonObject statusObject() const;

Q_SIGNALS:
    void decisionChanged(const gleaner::agent::Decision& decision);
    void preferencesChanged();

private:
    void evaluate();
    // After the store changed: preferencesChanged() and a new sample when it changed anything.
    Result<bool> changed(Result<bool> changed);

    PreferenceStore m_store;
    DesktopProbes m_probes;
    const Clock& m_clock;
    bool m_dedicated;
    DesktopCadence m_cadence;
    PolicyEngine m_engine;
    Observation m_observation;
    Decision m_decision;
    bool m_evaluated = false;
    qint64 m_lastCpuMs = -1;
    qint64 m_lastPowerMs = -1;
    qint64 m_lastProcessesMs = -1;
    qint64 m_lastGpuMs = -1;
    QTimer m_timer;
};

} // namespace gleaner::agent
