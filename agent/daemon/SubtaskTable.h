#pragma once
// The subtasks the agent holds now, by lease id: one table that the owners of a subtask's steps, of leaving
// and of the desktop's pause share by reference, so that none of them needs the others to find a subtask. On
// the event loop's thread only. A record stays shared (std::shared_ptr) so that a step that comes back after
// its subtask left the table still has what it captured.

#include "daemon/ActiveSubtask.h"

#include <QList>
#include <QMap>

#include <memory>

namespace gleaner::agent {

class SubtaskTable
{
public:
    using Map = QMap<LeaseId, std::shared_ptr<ActiveSubtask>>;

    // Null when the subtask is not (or no longer) held.
    std::shared_ptr<ActiveSubtask> value(const LeaseId& leaseId) const { return m_subtasks.value(leaseId); }
    bool contains(const LeaseId& leaseId) const { return m_subtasks.contains(leaseId); }
    void insert(const LeaseId& leaseId, std::shared_ptr<ActiveSubtask> subtask)
    {
        m_subtasks.insert(leaseId, std::move(subtask));
    }
    std::shared_ptr<ActiveSubtask> take(const LeaseId& leaseId) { return m_subtasks.take(leaseId); }
    bool isEmpty() const { return m_subtasks.isEmpty(); }
    qsizetype size() const { return m_subtasks.size(); }
    QList<LeaseId> keys() const { return m_subtasks.keys(); }
    Map::const_iterator begin() const { return m_subtasks.cbegin(); }
    Map::const_iterator end() const { return m_subtasks.cend(); }

private:
    Map m_subtasks;
};

} // namespace gleaner::agent
