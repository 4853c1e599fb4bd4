#pragma once
// Confines gleaner-worker before it reads its task folder. The worker trains data it did not choose and, soon,
// models it did not write, so what that code could reach is bounded by the kernel rather than trusted. On Linux:
//   - no_new_privs: nothing it could execute gains privileges (Landlock needs it too);
//   - no core dumps: RLIMIT_CORE 0 and not dumpable, so the data and the model never land in a core file and no
//     other process of the user may ptrace it; /proc/PID/statm and stat, which the agent reads for the memory cap
//     and the CPU share, stay readable to the agent;
//   - a bounded number of open files (RLIMIT_NOFILE);
//   - Landlock: the file system is the task folder (read-write), the few devices it writes (/dev/null, the GPU's)
//     and what libtorch opens at run time (read-only); nothing may be executed; no TCP bind or connect (ABI 4);
//     no abstract unix sockets or signals out of the sandbox (ABI 6).
// What the kernel lacks or refuses is listed in the report and does not stop the worker: on a kernel without
// Landlock it trains unconfined and says so, and the agent shows it once in its status.
// Landlock confines the calling thread and the threads it starts afterwards: apply() runs before any other thread.

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <cstdint>

namespace gleaner::agent {

// What the sandbox lets through; everything else Landlock handles is refused.
struct SandboxRules
{
    QStringList readOnly;  // read files and list folders beneath these
    QStringList readWrite; // also create, write, truncate and remove files beneath these (the task folder)
    QStringList devices;   // device files opened read-write, ioctl included (/dev/null, /dev/nvidia*)

    // The worker's: its task folder; the folders of the libraries loaded now and the system's library folders
    // (libtorch and CUDA load more later); what libtorch, OpenMP and glibc read to size their thread pools and
    // seed themselves; the GPU's devices when `gpu`.
    static SandboxRules forWorker(const QString& taskDir, bool gpu);
};

// What apply() did; each step the kernel lacked or refused is false here and named in `problems`.
struct SandboxReport
{
    bool noNewPrivs = false;
    bool noCoreDumps = false;  // RLIMIT_CORE 0 and not dumpable
    qint64 maxOpenFiles = -1;  // the RLIMIT_NOFILE in force; -1: unknown
    int landlockAbi = 0;       // the kernel's Landlock ABI version; 0: none
    bool landlock = false;     // the file-system rules are in force
    bool tcpDenied = false;    // Landlock ABI 4 and later
    bool scoped = false;       // Landlock ABI 6 and later: abstract unix sockets and signals
    QString landlockReason;    // why the file system is not confined, when !landlock
    QStringList readOnly;      // the paths the rules allow, as the kernel resolved them
    QStringList readWrite;
    QStringList devices;
    QStringList problems;

    // {"event": "sandbox", ...}: the worker's first event (docs/worker-protocol.md).
    QJsonObject toEvent() const;
};

class WorkerSandbox
{
public:
    // Far more than the worker needs (it holds 6 open files while it trains, with 1 or 16 threads, and 1 or 2
    // more while it writes a checkpoint), small enough that a runaway model cannot exhaust the user's descriptors.
    static constexpr int kMaxOpenFiles = 256;

    // Applies every step the kernel supports, in order; never fails. Irreversible for this process.
    static SandboxReport apply(const SandboxRules& rules, int maxOpenFiles = kMaxOpenFiles);

    // Landlock's file-system rights that ABI version `abi` knows (1: kernel 5.13; 2: refer; 3: truncate;
    // 5: ioctl on devices). The sandbox handles all of them, so a right the kernel knows is never left open.
    static std::uint64_t handledFileAccess(int abi);
    // Why Landlock is missing, from the errno of landlock_create_ruleset(NULL, 0, VERSION), with the remedy.
    static QString missingReason(int error);
};

} // namespace gleaner::agent
