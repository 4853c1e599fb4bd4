#pragma once
// Whether the machine runs on battery, for the policy's `pause_on_battery`: training drains a laptop's
// battery in an hour, and on a desktop whose UPS has taken over it eats the minutes the owner needs to save
// their work.
//
// SysfsPowerProbe reads Linux's /sys/class/power_supply; Windows (GetSystemPowerStatus) and macOS
// (IOPSCopyPowerSourcesInfo) sources would be one file each behind this interface.

#include "policy/Observation.h"

namespace gleaner::agent {

class PowerProbe
{
public:
    virtual ~PowerProbe();
    virtual PowerObservation sample() = 0;
};

class FakePowerProbe final : public PowerProbe
{
public:
    PowerObservation next;
    PowerObservation sample() override { return next; }
};

} // namespace gleaner::agent
