#include "admission/AdmissionCache.h"

#include <mutex>

namespace gleaner::coordinator {

std::optional<AdmissionCache::AgentEntry> AdmissionCache::agentByTokenHash(const QString& hash) const
{
    std::shared_lock lock(m_mutex);
    auto it = m_agents.constFind(hash);
    if (it == m_agents.cend())
        return std::nullopt;
    return *it;
}

bool AdmissionCache::isAdminTokenHash(const QString& hash) const
{
    std::shared_lock lock(m_mutex);
    return m_adminHashes.contains(hash);
}

std::optional<AdmissionCache::LeaseEntry> AdmissionCache::lease(const QString& leaseId) const
{
    std::shared_lock lock(m_mutex);
    auto it = m_leases.constFind(leaseId);
    if (it == m_leases.cend())
        return std::nullopt;
    return *it;
}

void AdmissionCache::setAgent(const QString& tokenHash, AgentEntry entry)
{
    std::unique_lock lock(m_mutex);
    m_agents.insert(tokenHash, std::move(entry));
}

void AdmissionCache::addAdminTokenHash(const QString& hash)
{
    std::unique_lock lock(m_mutex);
    m_adminHashes.insert(hash);
}

bool AdmissionCache::agentMayRead(const QString& agentId, const QString& sha256) const
{
    std::shared_lock lock(m_mutex);
    auto files = m_agentFiles.constFind(agentId);
    return files != m_agentFiles.cend() && files->contains(sha256);
}

std::optional<AdmissionCache::FileUse> AdmissionCache::fileUse(const QString& sha256) const
{
    std::shared_lock lock(m_mutex);
    auto use = m_fileUses.constFind(sha256);
    if (use == m_fileUses.cend())
        return std::nullopt;
    return *use;
}

void AdmissionCache::addFiles(const LeaseEntry& entry)
{
    if (!entry.closedReason.isEmpty())
        return;
    auto& files = m_agentFiles[entry.agentId];
    for (qsizetype i = 0; i < entry.files.size(); ++i) {
        const QString& sha = entry.files.at(i);
        files[sha] += 1;
        FileUse& use = m_fileUses[sha];
        use.leases += 1;
        use.role = entry.roles.value(i);
        use.jobId = entry.jobId;
    }
}

void AdmissionCache::removeFiles(const LeaseEntry& entry)
{
    if (!entry.closedReason.isEmpty())
        return;
    auto agent = m_agentFiles.find(entry.agentId);
    if (agent == m_agentFiles.end())
        return;
    for (const QString& sha : entry.files) {
        auto file = agent->find(sha);
        if (file != agent->end() && --*file <= 0)
            agent->erase(file);
        auto use = m_fileUses.find(sha);
        if (use != m_fileUses.end() && --use->leases <= 0)
            m_fileUses.erase(use);
    }
    if (agent->isEmpty())
        m_agentFiles.erase(agent);
}

void AdmissionCache::setLease(const QString& leaseId, LeaseEntry entry)
{
    std::unique_lock lock(m_mutex);
    if (auto old = m_leases.constFind(leaseId); old != m_leases.cend())
        removeFiles(*old);
    addFiles(entry);
    m_leases.insert(leaseId, std::move(entry));
}

void AdmissionCache::closeLease(const QString& leaseId, const QString& reason)
{
    std::unique_lock lock(m_mutex);
    auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return;
    removeFiles(*it);
    it->closedReason = reason;
    it->files.clear();
}

void AdmissionCache::removeLease(const QString& leaseId)
{
    std::unique_lock lock(m_mutex);
    auto it = m_leases.find(leaseId);
    if (it == m_leases.end())
        return;
    removeFiles(*it);
    m_leases.erase(it);
}

} // namespace gleaner::coordinator
