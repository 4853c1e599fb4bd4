#pragma once
// One project's link to its coordinator: the enrolment (AgentConfig: the coordinator's URL, this agent's id),
// the coordinator's pinned signing keys, the client over one kept-alive connection (its agent token, retries,
// rate caps), and whether the coordinator answers. The agent works for one project today; each further one
// would be another ProjectLink with its own LeaseDesk, TaskFiles and SubtaskSteps.
//
// The client is used on the network thread only; the rest on the event loop's thread.

#include "config/AgentConfig.h"
#include "config/PinnedKeys.h"
#include "daemon/Reachability.h"
#include "util/Clock.h"

#include <memory>

namespace gleaner::agent {

class CoordinatorClient;
class CurlTransport;
class EventFeed;
class StopSignal;

class ProjectLink
{
public:
    // `dataDir` holds the agent token and the pinned TLS certificate; `stop` cuts the client's waits short.
    ProjectLink(AgentConfig config, PinnedKeys keys, const QString& dataDir, const Clock& clock,
                StopSignal& stop, EventFeed& feed);
    ~ProjectLink();

    const AgentConfig& config() const { return m_config; }
    PinnedKeys& keys() { return m_keys; }
    const PinnedKeys& keys() const { return m_keys; }
    CoordinatorClient& client() { return *m_client; }
    Reachability& reachability() { return m_reach; }
    const Reachability& reachability() const { return m_reach; }

private:
    AgentConfig m_config;
    PinnedKeys m_keys;
    std::unique_ptr<CurlTransport> m_transport;
    std::unique_ptr<CoordinatorClient> m_client;
    Reachability m_reach;
};

} // namespace gleaner::agent
