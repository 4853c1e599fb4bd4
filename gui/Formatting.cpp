#include "Formatting.h"

#include "util/DurationText.h"

#include <QLocale>

namespace gleaner::gui {

QString formatDuration(qint64 seconds)
{
    return seconds < 0 ? QString() : durationText(seconds);
}

QString formatCount(qint64 count)
{
    return QLocale().toString(count);
}

QString formatHours(qint64 seconds)
{
    const double hours = double(qMax<qint64>(0, seconds)) / 3600.0;
    if (hours >= 100)
        return QStringLiteral("%1 hours").arg(QLocale().toString(qRound64(hours)));
    const QString number = QLocale().toString(hours, 'f', 1);
    return number == QLocale().toString(1.0, 'f', 1) ? QStringLiteral("1 hour")
                                                     : QStringLiteral("%1 hours").arg(number);
}

} // namespace gleaner::gui
