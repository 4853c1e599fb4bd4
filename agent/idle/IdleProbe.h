#pragma once
// Whether the owner is at the machine: how long since their last keyboard or mouse input, and whether a
// program holds the session awake (a video, a presentation). The policy computes only after `idle_seconds`
// without input and, with `respect_inhibitors`, not while something inhibits idleness.
//
// The real probe is SystemIdleProbe, which asks the desktop's own services (IdleSource); tests of the policy
// and the daemon use FakeIdleProbe.

#include "policy/Observation.h"

namespace gleaner::agent {

class IdleProbe
{
public:
    virtual ~IdleProbe();
    // Called on the daemon's event-loop thread: it never blocks for long (each D-Bus call is bounded by 200
    // ms, and a source that does not answer is left alone for a while).
    virtual IdleObservation sample() = 0;
};

class FakeIdleProbe final : public IdleProbe
{
public:
    IdleObservation next;
    IdleObservation sample() override { return next; }
};

} // namespace gleaner::agent
