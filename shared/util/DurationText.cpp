#include "util/DurationText.h"

#include <algorithm>

namespace gleaner {

QString durationText(qint64 seconds)
{
    const qint64 s = std::max<qint64>(0, seconds);
    if (s < 60)
        return QStringLiteral("%1 s").arg(s);
    if (s < 3600)
        return s % 60 ? QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60)
                      : QStringLiteral("%1 min").arg(s / 60);
    if (s < 86400) {
        const qint64 minutes = (s % 3600) / 60;
        return minutes ? QStringLiteral("%1 h %2 min").arg(s / 3600).arg(minutes)
                       : QStringLiteral("%1 h").arg(s / 3600);
    }
    const qint64 hours = (s % 86400) / 3600;
    return hours ? QStringLiteral("%1 d %2 h").arg(s / 86400).arg(hours)
                 : QStringLiteral("%1 d").arg(s / 86400);
}

} // namespace gleaner
