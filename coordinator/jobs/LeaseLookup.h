#pragma once
// How the owners below the coordinator's core find a lease: also one that another coordinator of the deployment
// issued (peers/Deployment reads it), and the answer for one no longer in memory (409 with why it closed, 503
// while its job is left to the other coordinators, else 404). The core wires both; state thread only.

#include "http/HttpTypes.h"
#include "jobs/JobState.h"

#include <functional>

namespace gleaner::coordinator {

struct LeaseLookup
{
    // Null when the database does not know the lease as one that may still deliver.
    std::function<Lease*(const QString& leaseId)> find;
    std::function<HttpResponse(const QString& agentId, const QString& leaseId)> notInMemory;
};

} // namespace gleaner::coordinator
