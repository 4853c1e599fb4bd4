#include "jobs/JobState.h"

#include <algorithm>

namespace gleaner::coordinator {
namespace {
const std::pair<JobStatus, const char16_t*> kStatusNames[] = {
    {JobStatus::Created, u"created"},     {JobStatus::Running, u"running"},     {JobStatus::Paused, u"paused"},
    {JobStatus::Completed, u"completed"}, {JobStatus::Failed, u"failed"}, {JobStatus::Cancelled, u"cancelled"},
};
} // namespace

QString jobStatusName(JobStatus status)
{
    for (const auto& [value, name] : kStatusNames)
        if (value == status)
            return QString::fromUtf16(name);
    return QStringLiteral("unknown");
}

std::optional<JobStatus> jobStatusFromName(QStringView name)
{
    for (const auto& [value, text] : kStatusNames)
        if (name == QStringView(text))
            return value;
    return std::nullopt;
}

QString leaseStateName(Lease::State state)
{
    switch (state) {
    case Lease::State::Open: return QStringLiteral("open");
    case Lease::State::Expired: return QStringLiteral("expired");
    case Lease::State::Completed: return QStringLiteral("completed");
    case Lease::State::Refused: return QStringLiteral("refused");
    case Lease::State::Failed: return QStringLiteral("failed");
    case Lease::State::HandedBack: return QStringLiteral("handed_back");
    }
    return QStringLiteral("open");
}

std::optional<Lease::State> leaseStateFromName(QStringView name)
{
    for (Lease::State state : {Lease::State::Open, Lease::State::Expired, Lease::State::Completed,
                               Lease::State::Refused, Lease::State::Failed, Lease::State::HandedBack})
        if (name == leaseStateName(state))
            return state;
    return std::nullopt;
}

QString closedLeaseMessage(const QString& leaseId, Lease::State state)
{
    switch (state) {
    case Lease::State::Completed:
        return QStringLiteral("the result of lease %1 was already received; this copy is a duplicate")
            .arg(leaseId);
    case Lease::State::Failed:
        return QStringLiteral("lease %1 is closed: the agent reported it failed").arg(leaseId);
    case Lease::State::HandedBack:
        return QStringLiteral("lease %1 is closed: the agent handed it back").arg(leaseId);
    case Lease::State::Open:
    case Lease::State::Expired:
    case Lease::State::Refused:
        break;
    }
    return QStringLiteral("lease %1 was closed after an invalid result").arg(leaseId);
}

std::optional<int> JobState::agentCap() const
{
    std::optional<int> cap;
    if (spec.maxAgents > 0)
        cap = spec.maxAgents;
    if (!spec.capAtWidth || !spec.aggregation.usesPseudoGradients())
        return cap;
    // A job whose rule measures its width starts at the narrowest and widens as it measures: agents that
    // piled in before the first measurement trained from the same early weights, where the lab's default job
    // can use two at most (its noise scale starts at 0.7 updates).
    const int useful = width.usefulAgents().value_or(JobWidth::kMinAgents);
    return cap ? std::min(*cap, useful) : useful;
}

bool JobState::epochComplete(int e) const
{
    bool any = false;
    for (const auto& [id, unit] : workunits) {
        if (unit.epoch != e)
            continue;
        any = true;
        if (unit.state != Workunit::State::Done)
            return false;
    }
    return any;
}

int JobState::pendingIn(int e) const
{
    int pending = 0;
    for (const auto& [id, unit] : workunits)
        if (unit.epoch == e && unit.state == Workunit::State::Pending)
            ++pending;
    return pending;
}

} // namespace gleaner::coordinator
