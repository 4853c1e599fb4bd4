#include "util/Durability.h"

#include <QByteArray>
#include <QFile>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace gleaner::Durability {

namespace {

// fsync of a file or a folder (flags O_DIRECTORY); `what` names it in errors, `purpose` says what becomes durable.
Status syncPath(const QString& path, int flags, const QString& what, const QString& purpose)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_CLOEXEC | flags);
    if (fd < 0) {
        const int error = errno;
        return fail(QStringLiteral("cannot open %1 to make %2 durable: %3")
                        .arg(what, purpose, QString::fromLocal8Bit(std::strerror(error))));
    }
    const int synced = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (synced != 0)
        return fail(QStringLiteral("cannot flush %1 to disk: %2").arg(what, QString::fromLocal8Bit(std::strerror(error))));
    return {};
}

} // namespace

Status syncFile(const QString& path)
{
    return syncPath(path, 0, path, QStringLiteral("it"));
}

Status syncFolder(const QString& path)
{
    return syncPath(path, O_DIRECTORY, QStringLiteral("the folder %1").arg(path), QStringLiteral("its entries"));
}

namespace {

struct FaultSetting
{
    QByteArray name;
    int when = 1; // the Nth time the point is reached
    std::atomic<int> seen{0};
};

FaultSetting* faultSetting()
{
    static FaultSetting* setting = [] () -> FaultSetting* {
        const char* value = std::getenv("GLEANER_FAULT_POINT");
        if (!value || !*value)
            return nullptr;
        auto* s = new FaultSetting;
        const QByteArray text(value);
        const qsizetype colon = text.indexOf(':');
        s->name = colon < 0 ? text : text.left(colon);
        if (colon >= 0)
            s->when = std::max(1, text.mid(colon + 1).toInt());
        return s;
    }();
    return setting;
}

} // namespace

void faultPoint(const char* name)
{
    FaultSetting* setting = faultSetting();
    if (!setting || setting->name != name)
        return;
    if (setting->seen.fetch_add(1) + 1 != setting->when)
        return;
    std::fprintf(stderr, "fault point %s reached: ending the process\n", name);
    std::fflush(stderr);
    ::_exit(kFaultExitCode);
}

} // namespace gleaner::Durability
