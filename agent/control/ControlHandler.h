#pragma once
// What the agent's control socket dispatches to: the daemon implements ControlHandler (status, pause, resume,
// finish, later the desktop's preferences) and hands it to ControlServer, which owns the connections, the
// framing and subscriptions.

#include "Result.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

namespace gleaner::agent {

// Who is on the other end of a connection: the server's serial for it and the peer's credentials
// (SO_PEERCRED), for a handler on a socket that more than one user may reach.
struct ControlPeer
{
    qint64 connection = 0;
    qint64 uid = -1;
    qint64 pid = -1;
};

class ControlHandler
{
public:
    virtual ~ControlHandler();

    // The commands handle() understands. The server answers any other command itself, with an error that
    // names it and lists these (plus the server's own `subscribe` / `unsubscribe`), so handle() is only ever
    // called with one of them and the list a person reads cannot drift from what is dispatched.
    virtual QStringList commands() const = 0;

    // Runs one command on the daemon's event loop; must not block. A failure's message goes to the client as
    // the reply's "error": say what failed and what to do.
    virtual Result<QJsonObject> handle(const QString& cmd, const QJsonObject& args) = 0;
    // The same, told who asked; by default who asked does not matter.
    virtual Result<QJsonObject> handleFrom(const QString& cmd, const QJsonObject& args, const ControlPeer& peer)
    {
        Q_UNUSED(peer);
        return handle(cmd, args);
    }
    // A connection closed.
    virtual void connectionClosed(const ControlPeer& peer) { Q_UNUSED(peer); }
};

} // namespace gleaner::agent
