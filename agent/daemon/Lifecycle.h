#pragma once
// Where the agent is in its life, which every part of the daemon consults before it starts something: no new
// work while stopping, finishing or after the credentials were refused; while leaving only uploads go on.
// Departure writes the stopping side, the daemon the refusal; on the event loop's thread.

#include <QString>

namespace gleaner::agent {

struct Lifecycle
{
    bool stopping = false; // a stop or leaving began: no new work, steps that come back end there
    bool finishing =
        false; // `finish` or batch mode out of work: what is held is finished, then the agent stops
    bool leaving = false;        // within the grace budget, each subtask is finished or handed back
    bool stoppedEmitted = false; // done: the process may exit
    QString fatal;               // the credentials were refused: nothing more until an operator acts

    // No new work may start (nor a lease be asked for).
    bool closed() const { return stopping || finishing || !fatal.isEmpty(); }
};

} // namespace gleaner::agent
