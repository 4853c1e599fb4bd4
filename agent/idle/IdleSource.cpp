#include "IdleSource.h"

#include <QElapsedTimer>

namespace gleaner::agent {

IdleSource::~IdleSource() = default;

MonotonicClock steadyClock()
{
    return [] {
        QElapsedTimer timer; // only to read the monotonic clock the platform has
        timer.start();
        return timer.msecsSinceReference();
    };
}

} // namespace gleaner::agent
