#pragma once
// Confines gleaner-worker before it reads its task folder. The worker trains data it did not choose and, soon,
// models it did not write, so what that code could reach is bounded by the kernel rather than trusted. On Linux:
//   - no_new_privs: nothing it could execute gains privileges (Landlock needs it too);
//   - no core dumps: RLIMIT_CORE 0 and not dumpable, so the data and the model never land in a core file and no
//     other process of the user may ptrace it; /proc/PID/statm and stat, which the agent reads for the memory cap
//     and the CPU share, stay readable to the agent;
//   - a bounded number of open files (RLIMIT_NOFILE);
//   - a private network namespace (PrivateNetwork): no interface but a loopback that is down;
//   - a memory cap the kernel enforces, the owner's (RLIMIT_DATA: see SandboxLimits);
//   - Landlock: the file system is the task folder (read-write), the few devices it writes (/dev/null, the GPU's)
//     and what libtorch opens at run time (read-only); nothing may be executed; no TCP bind or connect (ABI 4);
//     no abstract unix sockets or signals out of the sandbox (ABI 6);
//   - a seccomp filter (SyscallFilter), last: no sockets, no execve, no ptrace, no new namespaces, no kernel
//     modules, bpf, io_uring or mounts, whatever the Landlock ABI.
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

// What apply() is asked to bound besides the files.
struct SandboxLimits
{
    // Far more than the worker needs (it holds 6 open files while it trains, with 1 or 16 threads, and 1 or 2
    // more while it writes a checkpoint), small enough that a runaway model cannot exhaust the user's descriptors.
    static constexpr int kMaxOpenFiles = 256;

    int maxOpenFiles = kMaxOpenFiles;
    // The owner's memory cap as RLIMIT_DATA, bytes; 0: none. RLIMIT_DATA counts the private writable memory a
    // process maps (its heap, libtorch's tensors, its threads' stacks), not the address space it only reserves:
    // glibc reserves 64 MiB per malloc arena and OpenMP and CUDA reserve more, all inaccessible until used, so
    // RLIMIT_AS would fail an honest run long before its memory is used (a small CPU run with one thread: 700 MB
    // of address space, 170 MB resident, 90 MB of data). Thread stacks count, 8 MiB each. An allocation past the
    // cap fails with ENOMEM, which libtorch and Qt turn into errors the worker reports (WorkerRun).
    qint64 maxMemoryBytes = 0;
    // Added to the cap for the stacks of the threads the worker will start: RLIMIT_DATA counts each one whole
    // (8 MiB) though a thread touches a few pages of it, and the agent's check of the resident memory holds
    // the owner's cap exactly. Without it, a 64-core machine's threads alone would reserve 1 GB.
    qint64 stackAllowanceBytes = 0;

    // The allowance for a worker computing with `threads` threads (0: one per core): libtorch's intra-op pool
    // and OpenMP's each, and the few of the worker itself, at the size glibc gives a thread's stack.
    static qint64 stackAllowance(int threads);
    bool privateNetwork = true; // try a network namespace of its own
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
    bool seccomp = false;      // the system-call filter is in force
    QString seccompReason;     // why not
    bool networkNamespace = false;
    bool userNamespace = false; // the network namespace sits in a user namespace of its own
    QString networkReason;      // why there is no network namespace
    qint64 memoryCapBytes = 0;  // the owner's cap, when the kernel enforces it; 0: none
    qint64 dataLimitBytes = 0;  // the RLIMIT_DATA in force: the cap and the allowance for thread stacks
    QString memoryReason;       // why no cap is in force although one was asked
    QStringList readOnly;      // the paths the rules allow, as the kernel resolved them
    QStringList readWrite;
    QStringList devices;
    QStringList problems;

    // The layers in force and those missing, by their names in the event: no_new_privs, no_core_dumps,
    // open_files, network_namespace, memory_cap, landlock, landlock_tcp, landlock_scoped, seccomp.
    QStringList layers() const;
    QStringList missingLayers() const;
    // {"event": "sandbox", ...}: the worker's first event (docs/worker-protocol.md).
    QJsonObject toEvent() const;
};

class WorkerSandbox
{
public:
    static constexpr int kMaxOpenFiles = SandboxLimits::kMaxOpenFiles;

    // Applies every step the kernel supports, in order (limits, network namespace, Landlock, seccomp); never
    // fails. Irreversible for this process.
    static SandboxReport apply(const SandboxRules& rules, const SandboxLimits& limits = {});

    // Landlock's file-system rights that ABI version `abi` knows (1: kernel 5.13; 2: refer; 3: truncate;
    // 5: ioctl on devices). The sandbox handles all of them, so a right the kernel knows is never left open.
    static std::uint64_t handledFileAccess(int abi);
    // Why Landlock is missing, from the errno of landlock_create_ruleset(NULL, 0, VERSION), with the remedy.
    static QString missingReason(int error);
};

} // namespace gleaner::agent
