#include "aggregation/UpdateBound.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace gleaner::coordinator {

double UpdateBound::median() const
{
    if (m_recent.empty())
        return 0.0;
    std::vector<double> sorted(m_recent.begin(), m_recent.end());
    const size_t mid = sorted.size() / 2;
    std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(mid), sorted.end());
    if (sorted.size() % 2 == 1)
        return sorted[mid];
    const double upper = sorted[mid];
    const double lower = *std::max_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(mid));
    return (lower + upper) / 2.0;
}

double UpdateBound::limit(double fromNorm) const
{
    const double norm = std::isfinite(fromNorm) && fromNorm > 0 ? fromNorm : 0.0;
    if (needsNorm())
        return kStartFraction * norm;
    return std::max(kMedianMultiple * median(), kFloorFraction * norm);
}

QString UpdateBound::describe(double fromNorm) const
{
    if (needsNorm())
        return QStringLiteral("%1 x the norm of the weights it starts from (%2), until %3 updates of the job are "
                              "known")
            .arg(kStartFraction)
            .arg(fromNorm, 0, 'g', 4)
            .arg(kMinHistory);
    return QStringLiteral("%1 x the median step of the job's last %2 accepted updates (%3)")
        .arg(kMedianMultiple)
        .arg(count())
        .arg(median(), 0, 'g', 4);
}

void UpdateBound::accept(double step)
{
    if (!std::isfinite(step) || step < 0)
        return;
    m_recent.push_back(step);
    while (int(m_recent.size()) > kWindow)
        m_recent.pop_front();
}

UpdateBound UpdateBound::fromWindow(const std::vector<double>& steps)
{
    UpdateBound bound;
    for (double step : steps)
        bound.accept(step);
    return bound;
}

} // namespace gleaner::coordinator
