#pragma once
// What the HTTP threads need to decide on a request before its body is read, without asking the state thread:
// which agent a token is (and whether it is revoked), the admin tokens, and each open lease's upload limit,
// closing reason and files. The state thread writes it as agents enroll and leases open and close; a shared
// lock lets every HTTP thread read at once.

#include <QByteArray>
#include <QHash>
#include <QList>
#include <QSet>
#include <QString>
#include <QStringList>

#include <optional>
#include <shared_mutex>

namespace gleaner::coordinator {

// What the HTTP threads need to decide on a request before its body is read, without asking the state thread.
class AdmissionCache
{
public:
    struct AgentEntry
    {
        QString id;
        bool revoked = false;
    };
    struct LeaseEntry
    {
        QString agentId;
        qint64 maxUploadBytes = 0;
        QString closedReason; // not empty: no upload is taken any more, and this says why (answered with 409)
        QStringList
            files; // SHA-256 of the files its manifest names: its agent may download them while it is open
        QList<QByteArray>
            roles; // each file's role in the manifest ("model", "weights", ...), in the same order
        qint64 jobId = 0;
    };
    // A file some open lease names: what it is, for the accounting of bytes sent.
    struct FileUse
    {
        int leases = 0;
        QByteArray role;
        qint64 jobId = 0;
    };

    std::optional<AgentEntry> agentByTokenHash(const QString& hash) const;
    bool isAdminTokenHash(const QString& hash) const;
    std::optional<LeaseEntry> lease(const QString& leaseId) const;
    // Agents download only the files of their own open leases: knowing a hash is not enough.
    bool agentMayRead(const QString& agentId, const QString& sha256) const;
    std::optional<FileUse> fileUse(const QString& sha256) const;

    void setAgent(const QString& tokenHash, AgentEntry entry);
    void addAdminTokenHash(const QString& hash);
    void setLease(const QString& leaseId, LeaseEntry entry);
    // The lease takes no more uploads; later ones are answered 409 with `reason` before their body is read.
    void closeLease(const QString& leaseId, const QString& reason);
    // Forgotten here, open or closed (its job left this coordinator's memory): its requests are looked up
    // again.
    void removeLease(const QString& leaseId);

private:
    mutable std::shared_mutex m_mutex;
    QHash<QString, AgentEntry> m_agents;
    QSet<QString> m_adminHashes;
    QHash<QString, LeaseEntry> m_leases;
    QHash<QString, QHash<QString, int>> m_agentFiles; // agent -> file -> open leases naming it
    QHash<QString, FileUse> m_fileUses;               // file -> open leases naming it, its role and job

    void addFiles(const LeaseEntry& entry);
    void removeFiles(const LeaseEntry& entry);
};

} // namespace gleaner::coordinator
