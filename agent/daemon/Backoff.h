#pragma once
// How long to wait before trying again after `failures` failures in a row: full jitter over an exponential
// ceiling (1 s, 2 s, 4 s, ... up to `maxMs`), so that agents that lost their coordinator together do not come
// back together.

#include <QRandomGenerator>
#include <QString>
#include <QtGlobal>

#include <algorithm>

namespace gleaner::agent {

inline qint64 backoffMs(int failures, qint64 maxMs)
{
    const qint64 ceiling = std::min<qint64>(maxMs, 1000LL << std::min(failures, 16));
    return 500 + qint64(QRandomGenerator::global()->bounded(double(ceiling)));
}

// Subtasks failed (or work refused) in a row, and the last reason: past a few the agent's state is "error",
// and a coordinator that keeps handing out work this agent refuses is not asked again at once.
struct FailureStreak
{
    int count = 0;
    QString last;

    void failed(const QString& reason)
    {
        last = reason;
        ++count;
    }
};

} // namespace gleaner::agent
