#pragma once
// Power state from Linux's /sys/class/power_supply (the kernel's power_supply class, ABI in
// Documentation/ABI/testing/sysfs-class-power). Each folder there is one supply with a `type`:
//  - Battery: a system battery, unless its `scope` is "Device" (a wireless mouse or headset reporting its own
//    charge, which says nothing about the machine) or `present` is 0 (an empty second bay);
//  - UPS: an uninterruptible power supply that the kernel drives (most are driven by NUT or UPower instead
//  and
//    do not appear here);
//  - anything else (Mains, USB for a USB-C charger, Wireless): an external source, powering the machine when
//    its `online` reads 1.
//
// On battery: a system battery reads "Discharging" and no external source is online (a battery may discharge
// for a moment while a weak charger is plugged in: that is not "unplugged"), or a UPS reads "Discharging"
// (the mains failed: the UPS is the machine's last reserve). Known: at least one battery, UPS or external
// source was found; a desktop without any, or with only a mouse's battery, has nothing to say.
//
// The percent: the system batteries' energy together (energy_now / energy_full, or charge_*, summed over the
// batteries, as a laptop with two batteries drains them one after the other), else the mean of their
// `capacity`; a UPS's capacity when there is no system battery; -1 when none says.
//
// Cost of a sample: a handful of reads of tiny sysfs files.

#include "PowerProbe.h"

#include <QString>

namespace gleaner::agent {

class SysfsPowerProbe final : public PowerProbe
{
public:
    explicit SysfsPowerProbe(QString root = QStringLiteral("/sys/class/power_supply"));
    PowerObservation sample() override;

private:
    QString m_root;
    PowerObservation m_last; // for logging changes only
    bool m_logged = false;
};

} // namespace gleaner::agent
