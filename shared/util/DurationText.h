#pragma once
// A duration as people read it, the same in the agent's reasons, its command line and the tray app:
// "40 s", "3 min", "1 min 30 s", "2 h 5 min", "1 d 3 h". Negative durations read as 0 s.

#include <QString>

namespace gleaner {

QString durationText(qint64 seconds);

} // namespace gleaner
