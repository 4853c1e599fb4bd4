#pragma once
// How the owners below the coordinator's core find a lease: also one that another coordinator of the deployment
// issued (peers/Deployment reads it), and the answer for one no longer in memory (409 with why it closed, 503
// while its job is left to the other coordinators, else 404). The core wires both; state thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"

#include <functional>
#include <optional>

namespace gleaner::coordinator {

struct LeaseLookup
{
    // Null when the database does not know the lease as one that may still deliver.
    std::function<Lease*(const QString& leaseId)> find;
    std::function<HttpResponse(const QString& agentId, const QString& leaseId)> notInMemory;
};

// 409 for a report about a lease whose result was already received or refused (its progress, its failure):
// nothing more comes of it. nullopt for a lease that may still deliver.
inline std::optional<HttpResponse> resultAlreadyDecided(const Lease& lease)
{
    if (lease.state == Lease::State::Completed)
        return HttpResponse::error(
            409, QStringLiteral("lease %1 is closed: its result was already received").arg(lease.id));
    if (lease.state == Lease::State::Refused)
        return HttpResponse::error(
            409, QStringLiteral("lease %1 is closed: its result was refused as invalid").arg(lease.id));
    return std::nullopt;
}

} // namespace gleaner::coordinator
