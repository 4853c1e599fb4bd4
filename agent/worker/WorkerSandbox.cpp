#include "worker/WorkerSandbox.h"

#include "worker/PrivateNetwork.h"
#include "worker/SyscallFilter.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#ifdef __linux__
#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gleaner::agent {
namespace {

// The rights and structures of Landlock ABIs newer than the oldest kernel headers we build with (Debian 12's
// describe ABI 2); the values are the kernel's ABI and never change.
constexpr std::uint64_t kFsExecute = 1ULL << 0;
constexpr std::uint64_t kFsWriteFile = 1ULL << 1;
constexpr std::uint64_t kFsReadFile = 1ULL << 2;
constexpr std::uint64_t kFsReadDir = 1ULL << 3;
constexpr std::uint64_t kFsRemoveFile = 1ULL << 5;
constexpr std::uint64_t kFsMakeReg = 1ULL << 8;
constexpr std::uint64_t kFsRefer = 1ULL << 13;    // ABI 2
constexpr std::uint64_t kFsTruncate = 1ULL << 14; // ABI 3
constexpr std::uint64_t kFsIoctlDev = 1ULL << 15; // ABI 5
// The only rights a rule on a file (not a folder) may carry.
constexpr std::uint64_t kFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
constexpr std::uint64_t kNetBindTcp = 1ULL << 0;  // ABI 4
constexpr std::uint64_t kNetConnectTcp = 1ULL << 1;
constexpr std::uint64_t kScopeAbstractUnixSocket = 1ULL << 0; // ABI 6
constexpr std::uint64_t kScopeSignal = 1ULL << 1;

constexpr std::uint64_t kReadOnly = kFsReadFile | kFsReadDir;
// What the worker does in its task folder: read the inputs, write checkpoint and result through a temporary file
// renamed over the old one (QSaveFile), remove the checkpoint. No folders, links, devices, sockets or pipes.
constexpr std::uint64_t kReadWrite = kReadOnly | kFsWriteFile | kFsTruncate | kFsMakeReg | kFsRemoveFile;
constexpr std::uint64_t kDevice = kFsReadFile | kFsWriteFile | kFsTruncate | kFsIoctlDev;

// struct landlock_ruleset_attr as of ABI 6; older kernels take a prefix of it (its size tells them which).
struct RulesetAttr
{
    std::uint64_t handledAccessFs = 0;
    std::uint64_t handledAccessNet = 0;
    std::uint64_t scoped = 0;
};

QString errnoText(int error)
{
    return QString::fromLocal8Bit(std::strerror(error));
}

// Canonical paths, without repeats and without those beneath another of the list (a rule on /usr covers
// /usr/lib); paths that do not exist are dropped (a machine without /lib64 or without a GPU).
QStringList normalized(const QStringList& paths)
{
    QStringList out;
    for (const QString& path : paths) {
        const QString canonical = QFileInfo(path).canonicalFilePath();
        if (!canonical.isEmpty() && !out.contains(canonical))
            out << canonical;
    }
    const auto beneathAnother = [&out](const QString& path) {
        return std::any_of(out.cbegin(), out.cend(), [&path](const QString& other) {
            return other != path && (other == u"/" || path.startsWith(other + u'/'));
        });
    };
    QStringList kept;
    for (const QString& path : std::as_const(out))
        if (!beneathAnother(path))
            kept << path;
    return kept;
}

#ifdef __linux__

int collectLibraryFolder(dl_phdr_info* info, size_t, void* data)
{
    const QString name = QString::fromLocal8Bit(info->dlpi_name);
    if (name.startsWith(u'/'))
        static_cast<QStringList*>(data)->append(QFileInfo(name).absolutePath());
    return 0;
}

// The threads of this process: Landlock and no_new_privs confine only the calling thread and its later children.
int threadCount()
{
    DIR* dir = ::opendir("/proc/self/task");
    if (!dir)
        return -1;
    int count = 0;
    while (const dirent* entry = ::readdir(dir))
        if (entry->d_name[0] != '.')
            ++count;
    ::closedir(dir);
    return count;
}

long landlockCreateRuleset(const RulesetAttr* attr, size_t size, std::uint32_t flags)
{
    return ::syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

// Adds a rule for `path` with `rights` (those the ruleset handles; only file rights on a file); false with the
// reason in `problem` when the kernel refuses it.
bool addRule(int ruleset, const QString& path, std::uint64_t rights, QString* problem)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_PATH | O_CLOEXEC);
    if (fd < 0) {
        *problem = QStringLiteral("%1 is not allowed: cannot open it (%2)").arg(path, errnoText(errno));
        return false;
    }
    struct stat st{};
    if (::fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
        rights &= kFileRights;
    landlock_path_beneath_attr rule{};
    rule.allowed_access = rights;
    rule.parent_fd = fd;
    const long added = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    const int error = errno;
    ::close(fd);
    if (added != 0) {
        *problem = QStringLiteral("%1 is not allowed: the kernel refused the rule (%2)").arg(path, errnoText(error));
        return false;
    }
    return true;
}

void applyLandlock(const SandboxRules& rules, SandboxReport& report)
{
    const long abi = landlockCreateRuleset(nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 0) {
        report.landlockReason = WorkerSandbox::missingReason(errno);
        return;
    }
    report.landlockAbi = int(abi);
    const std::uint64_t handled = WorkerSandbox::handledFileAccess(report.landlockAbi);
    RulesetAttr attr;
    attr.handledAccessFs = handled;
    size_t size = sizeof(attr.handledAccessFs);
    if (abi >= 4) {
        attr.handledAccessNet = kNetBindTcp | kNetConnectTcp; // no rule allows a port: no TCP at all
        size = offsetof(RulesetAttr, scoped);
    }
    if (abi >= 6) {
        attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
        size = sizeof(attr);
    }
    const int ruleset = int(landlockCreateRuleset(&attr, size, 0));
    if (ruleset < 0) {
        report.landlockReason = QStringLiteral("landlock_create_ruleset failed (%1)").arg(errnoText(errno));
        return;
    }
    const auto allow = [&](const QStringList& paths, std::uint64_t rights, QStringList& allowed) {
        for (const QString& path : normalized(paths)) {
            QString problem;
            if (addRule(ruleset, path, rights & handled, &problem))
                allowed << path;
            else
                report.problems << problem;
        }
    };
    allow(rules.readOnly, kReadOnly, report.readOnly);
    allow(rules.readWrite, kReadWrite, report.readWrite);
    allow(rules.devices, kDevice, report.devices);
    const long restricted = ::syscall(SYS_landlock_restrict_self, ruleset, 0);
    const int error = errno;
    ::close(ruleset);
    if (restricted != 0) {
        report.landlockReason = QStringLiteral("landlock_restrict_self failed (%1)%2")
                                    .arg(errnoText(error),
                                         report.noNewPrivs ? QString() : QStringLiteral(": no_new_privs is not set"));
        report.readOnly.clear();
        report.readWrite.clear();
        report.devices.clear();
        return;
    }
    report.landlock = true;
    report.tcpDenied = attr.handledAccessNet != 0;
    report.scoped = attr.scoped != 0;
}

#endif // __linux__

} // namespace

SandboxRules SandboxRules::forWorker(const QString& taskDir, bool gpu)
{
    SandboxRules rules;
    rules.readWrite << taskDir;
    // Libraries, and what they read lazily: ld.so's cache for a later dlopen, the time zone, glibc's and ICU's data.
    rules.readOnly << QStringLiteral("/usr") << QStringLiteral("/lib") << QStringLiteral("/lib64")
                   << QStringLiteral("/etc/ld.so.cache") << QStringLiteral("/etc/localtime")
                   // OpenSSL (the checkpoint's hashes) reads its configuration on first use.
                   << QStringLiteral("/etc/ssl/openssl.cnf");
#ifdef __linux__
    // A libtorch or Qt outside /usr (/opt/libtorch, a build tree): the folders of what is loaded now.
    QStringList loaded;
    ::dl_iterate_phdr(collectLibraryFolder, &loaded);
    rules.readOnly << loaded;
#endif
    // Thread pools (OpenMP, libtorch's cpuinfo) size themselves from these; glibc and Qt read /proc/self.
    rules.readOnly << QStringLiteral("/proc/self") << QStringLiteral("/proc/cpuinfo")
                   << QStringLiteral("/proc/stat") << QStringLiteral("/proc/meminfo")
                   << QStringLiteral("/sys/devices/system/cpu") << QStringLiteral("/sys/devices/system/node")
                   << QStringLiteral("/sys/fs/cgroup") << QStringLiteral("/dev/urandom");
    rules.devices << QStringLiteral("/dev/null");
    if (gpu) {
        // The CUDA driver: its control, memory and device nodes, and what it reads about the GPUs.
        const QDir dev(QStringLiteral("/dev"));
        for (const QString& name : dev.entryList({QStringLiteral("nvidia*")}, QDir::System | QDir::Dirs | QDir::NoDotAndDotDot))
            rules.devices << dev.filePath(name);
        rules.readOnly << QStringLiteral("/proc/driver/nvidia") << QStringLiteral("/sys/bus/pci")
                       << QStringLiteral("/sys/devices");
    }
    return rules;
}

std::uint64_t WorkerSandbox::handledFileAccess(int abi)
{
    if (abi < 1)
        return 0;
    std::uint64_t rights = (1ULL << 13) - 1; // ABI 1: execute ... make_sym
    if (abi >= 2)
        rights |= kFsRefer;
    if (abi >= 3)
        rights |= kFsTruncate;
    if (abi >= 5)
        rights |= kFsIoctlDev;
    return rights;
}

QString WorkerSandbox::missingReason(int error)
{
    switch (error) {
    case ENOSYS:
        return QStringLiteral("this kernel has no Landlock (Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK "
                              "is needed)");
    case EOPNOTSUPP:
        return QStringLiteral("Landlock is built into this kernel but not enabled; add \"landlock\" to the lsm= boot "
                              "parameter");
    default:
        return QStringLiteral("Landlock is not usable here (%1)").arg(errnoText(error));
    }
}

SandboxReport WorkerSandbox::apply(const SandboxRules& rules, const SandboxLimits& limits)
{
    SandboxReport report;
#ifdef __linux__
    const int threads = threadCount();
    if (threads > 1)
        report.problems << QStringLiteral("%1 threads were running before the sandbox; only the calling one and those "
                                          "it starts are confined")
                               .arg(threads);

    report.noNewPrivs = ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
    if (!report.noNewPrivs)
        report.problems << QStringLiteral("no_new_privs: %1").arg(errnoText(errno));

    // Before the process is undumpable and before Landlock: both would keep it from writing its id maps.
    if (limits.privateNetwork) {
        const PrivateNetwork::Outcome network = PrivateNetwork::enter();
        report.networkNamespace = network.entered;
        report.userNamespace = network.userNamespace;
        report.networkReason = network.reason;
        if (network.entered && !network.reason.isEmpty())
            report.problems << network.reason;
    } else {
        report.networkReason = QStringLiteral("not asked for");
    }

    const rlimit noCore{0, 0};
    const bool coreLimited = ::setrlimit(RLIMIT_CORE, &noCore) == 0;
    if (!coreLimited)
        report.problems << QStringLiteral("RLIMIT_CORE 0: %1").arg(errnoText(errno));
    const bool undumpable = ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
    if (!undumpable)
        report.problems << QStringLiteral("not dumpable: %1").arg(errnoText(errno));
    report.noCoreDumps = coreLimited && undumpable;

    // Only ever lowered: a limit the user set lower stays.
    const auto lower = [&report](int resource, const char* name, rlim_t to) -> rlim_t {
        rlimit limit{};
        if (::getrlimit(resource, &limit) != 0)
            return RLIM_INFINITY;
        limit.rlim_cur = std::min(limit.rlim_cur, to);
        limit.rlim_max = std::min(limit.rlim_max, to);
        if (::setrlimit(resource, &limit) != 0)
            report.problems << QStringLiteral("%1 %2: %3").arg(QLatin1String(name)).arg(to).arg(errnoText(errno));
        return ::getrlimit(resource, &limit) == 0 ? limit.rlim_cur : RLIM_INFINITY;
    };
    const rlim_t files = lower(RLIMIT_NOFILE, "RLIMIT_NOFILE", rlim_t(limits.maxOpenFiles));
    report.maxOpenFiles = files == RLIM_INFINITY ? -1 : qint64(files);
    if (limits.maxMemoryBytes > 0) {
        const rlim_t wanted = rlim_t(limits.maxMemoryBytes + std::max<qint64>(0, limits.stackAllowanceBytes));
        const rlim_t data = lower(RLIMIT_DATA, "RLIMIT_DATA", wanted);
        if (data != RLIM_INFINITY && data <= wanted) {
            report.memoryCapBytes = std::min(limits.maxMemoryBytes, qint64(data));
            report.dataLimitBytes = qint64(data);
        } else {
            report.memoryReason = QStringLiteral("the kernel refused RLIMIT_DATA");
        }
    } else {
        report.memoryReason = QStringLiteral("the owner set no memory limit");
    }

    applyLandlock(rules, report);

    // Last, so that nothing above needed a call it refuses (unshare, the rules' files).
    report.seccompReason = SyscallFilter::install();
    report.seccomp = report.seccompReason.isEmpty();
    if (!report.seccomp)
        report.problems << QStringLiteral("the system calls are not filtered: %1").arg(report.seccompReason);
#else
    Q_UNUSED(rules);
    Q_UNUSED(limits);
    report.landlockReason = QStringLiteral("Landlock exists only on Linux");
    report.seccompReason = QStringLiteral("seccomp exists only on Linux");
    report.networkReason = QStringLiteral("network namespaces exist only on Linux");
    report.memoryReason = QStringLiteral("RLIMIT_DATA is not used on this system");
#endif
    if (!report.landlock)
        report.problems << QStringLiteral("the file system is not confined: %1").arg(report.landlockReason);
    return report;
}

qint64 SandboxLimits::stackAllowance(int threads)
{
    const qint64 compute = threads > 0 ? threads : qint64(std::max(1u, std::thread::hardware_concurrency()));
    qint64 stack = 8LL << 20; // glibc's default when RLIMIT_STACK is unlimited or absurd
#ifdef __linux__
    rlimit limit{};
    if (::getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= (64 << 10) &&
        limit.rlim_cur <= (64 << 20))
        stack = qint64(limit.rlim_cur);
#endif
    return (2 * compute + 4) * stack;
}

QStringList SandboxReport::layers() const
{
    const std::pair<bool, const char*> all[] = {
        {noNewPrivs, "no_new_privs"}, {noCoreDumps, "no_core_dumps"},    {maxOpenFiles > 0, "open_files"},
        {networkNamespace, "network_namespace"}, {memoryCapBytes > 0, "memory_cap"}, {landlock, "landlock"},
        {tcpDenied, "landlock_tcp"},  {scoped, "landlock_scoped"},         {seccomp, "seccomp"}};
    QStringList in;
    for (const auto& [active, name] : all)
        if (active)
            in << QLatin1String(name);
    return in;
}

QStringList SandboxReport::missingLayers() const
{
    const QStringList in = layers();
    QStringList out;
    for (const char* name : {"no_new_privs", "no_core_dumps", "open_files", "network_namespace", "memory_cap",
                             "landlock", "landlock_tcp", "landlock_scoped", "seccomp"})
        if (!in.contains(QLatin1String(name)))
            out << QLatin1String(name);
    return out;
}

QJsonObject SandboxReport::toEvent() const
{
    QJsonObject event{{QStringLiteral("event"), QStringLiteral("sandbox")},
                      {QStringLiteral("layers"), QJsonArray::fromStringList(layers())},
                      {QStringLiteral("missing"), QJsonArray::fromStringList(missingLayers())},
                      {QStringLiteral("landlock"), landlock},
                      {QStringLiteral("landlock_abi"), landlockAbi},
                      {QStringLiteral("tcp_denied"), tcpDenied},
                      {QStringLiteral("scoped"), scoped},
                      {QStringLiteral("seccomp"), seccomp},
                      {QStringLiteral("network_namespace"), networkNamespace},
                      {QStringLiteral("user_namespace"), userNamespace},
                      {QStringLiteral("memory_cap_mb"),
                       memoryCapBytes > 0 ? QJsonValue(memoryCapBytes / (1024 * 1024)) : QJsonValue(QJsonValue::Null)},
                      {QStringLiteral("data_limit_mb"),
                       dataLimitBytes > 0 ? QJsonValue(dataLimitBytes / (1024 * 1024)) : QJsonValue(QJsonValue::Null)},
                      {QStringLiteral("no_new_privs"), noNewPrivs},
                      {QStringLiteral("no_core_dumps"), noCoreDumps},
                      {QStringLiteral("max_open_files"), maxOpenFiles},
                      {QStringLiteral("read_only"), QJsonArray::fromStringList(readOnly)},
                      {QStringLiteral("read_write"), QJsonArray::fromStringList(readWrite)},
                      {QStringLiteral("devices"), QJsonArray::fromStringList(devices)},
                      {QStringLiteral("problems"), QJsonArray::fromStringList(problems)}};
    if (!landlock)
        event.insert(QStringLiteral("reason"), landlockReason);
    if (!seccomp)
        event.insert(QStringLiteral("seccomp_reason"), seccompReason);
    if (!networkNamespace)
        event.insert(QStringLiteral("network_reason"), networkReason);
    if (memoryCapBytes <= 0)
        event.insert(QStringLiteral("memory_reason"), memoryReason);
    return event;
}

} // namespace gleaner::agent
