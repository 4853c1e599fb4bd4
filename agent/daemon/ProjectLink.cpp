#include "daemon/ProjectLink.h"

#include "daemon/StopSignal.h"
#include "net/CoordinatorClient.h"
#include "net/CurlTransport.h"

#include <QFile>
#include <QFileInfo>

namespace gleaner::agent {

ProjectLink::ProjectLink(AgentConfig config, PinnedKeys keys, const QString& dataDir, const Clock& clock,
                         StopSignal& stop, EventFeed& feed)
    : m_config(std::move(config)), m_keys(std::move(keys)), m_reach(m_config.coordinatorUrl, feed)
{
    const QString ca = AgentConfig::caPath(dataDir);
    m_transport = std::make_unique<CurlTransport>(QFileInfo::exists(ca) ? ca : QString());
    RetryOptions retry;
    retry.maxAttempts =
        4; // the daemon tries a step again later itself; the network thread must not hang on one
    retry.maxDelayMs = 15'000;
    m_client =
        std::make_unique<CoordinatorClient>(*m_transport, m_config.coordinatorUrl, clock, RetryPolicy(retry),
                                            [&stop](qint64 ms) { return stop.sleep(ms); });
    QFile token(AgentConfig::tokenPath(dataDir));
    if (token.open(QIODevice::ReadOnly))
        m_client->setAgentToken(token.readAll().trimmed());
}

ProjectLink::~ProjectLink() = default;

} // namespace gleaner::agent
