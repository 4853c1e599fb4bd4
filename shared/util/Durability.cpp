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

Status syncFile(const QString& path)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(QStringLiteral("cannot open %1 to make it durable: %2")
                        .arg(path, QString::fromLocal8Bit(std::strerror(errno))));
    const int synced = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (synced != 0)
        return fail(QStringLiteral("cannot flush %1 to disk: %2").arg(path, QString::fromLocal8Bit(std::strerror(error))));
    return {};
}

Status syncFolder(const QString& path)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail(QStringLiteral("cannot open the folder %1 to make its entries durable: %2")
                        .arg(path, QString::fromLocal8Bit(std::strerror(errno))));
    const int synced = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (synced != 0)
        return fail(QStringLiteral("cannot flush the folder %1 to disk: %2")
                        .arg(path, QString::fromLocal8Bit(std::strerror(error))));
    return {};
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
