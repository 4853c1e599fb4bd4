#pragma once
// Numbers and durations as the tray app writes them for people ("4 min 10 s", "1,234,000", "5.2 hours").

#include <QString>

namespace gleaner::gui {

// 0 s, 42 s, 4 min 10 s, 2 h 5 min, 3 d 4 h; negative: empty.
QString formatDuration(qint64 seconds);
// With the locale's digit grouping.
QString formatCount(qint64 count);
// Training time in hours with one decimal below 100 h ("0.5 hours", "1 hour", "312 hours").
QString formatHours(qint64 seconds);

} // namespace gleaner::gui
