#pragma once
// An exclusive lock on a data directory (flock on <dir>/lock), held for the life of the object: one
// coordinator or one agent daemon per data directory. The kernel drops the lock when the process dies, so a
// crash never leaves a stale lock behind.

#include "Result.h"

#include <QString>

namespace gleaner {

class DirectoryLock
{
public:
    // Fails at once, without waiting, when another process holds the lock; `holder` names it in the message
    // ("another gleaner-agent is running on DIR; stop it first").
    static Result<DirectoryLock> acquire(const QString& dir, const QString& holder);

    DirectoryLock(DirectoryLock&& other) noexcept;
    DirectoryLock& operator=(DirectoryLock&& other) noexcept;
    DirectoryLock(const DirectoryLock&) = delete;
    DirectoryLock& operator=(const DirectoryLock&) = delete;
    ~DirectoryLock();

private:
    explicit DirectoryLock(int fd) : m_fd(fd) {}
    int m_fd = -1;
};

} // namespace gleaner
