#pragma once
// A network namespace of the worker's own, one layer of its sandbox (WorkerSandbox): it holds only a loopback
// that is down, so even a socket the seccomp filter let through would reach nothing, and the abstract Unix
// sockets of the user's session (a D-Bus bus, an X server), which live in the network namespace and which
// Landlock before ABI 6 does not guard, are out of reach.
//
// Root unshares the network namespace alone. Anyone else needs a user namespace around it, mapped to the
// process's own uid and gid, so that the files the worker writes in its task folder keep the user as owner.
// Entered while the process has one thread (the kernel requires it), before it is made undumpable (which
// hands /proc/self/uid_map to root) and before Landlock (which makes /proc/self read-only).

#include <QString>

namespace gleaner::agent {

class PrivateNetwork
{
public:
    struct Outcome
    {
        bool entered = false;
        bool userNamespace = false; // entered through a user namespace (not root)
        QString reason;             // why not, with the remedy, when !entered; or what went wrong after
    };

    static Outcome enter();
    // Why unshare(CLONE_NEWUSER | CLONE_NEWNET) was refused, from its errno, with the remedy.
    static QString refusedReason(int error);
};

} // namespace gleaner::agent
