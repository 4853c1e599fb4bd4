#pragma once
// A lease's id as the coordinator issues it: exactly 32 lowercase hex digits (16 random bytes). The agent
// puts lease ids into folder names (DATA_DIR/tasks/<id>) and URL paths (/api/v1/work/<id>/...), and the ids
// come from the network and from files: a value of this type has been checked, so it can never name `..`, an
// absolute path, a slash or a query. Parse every id once, where it enters (a lease reply, a manifest, a store
// row), and pass this type on.

#include "Result.h"

#include <QHashFunctions>
#include <QString>
#include <QStringView>

namespace gleaner {

class LeaseId
{
public:
    static constexpr qsizetype kLength = 32;

    // `what` names where the text came from, for the message ("the lease reply's lease_id").
    static Result<LeaseId> parse(QStringView text, QStringView what = u"a lease id");
    static bool isValid(QStringView text);

    const QString& toString() const { return m_text; }

    friend bool operator==(const LeaseId& a, const LeaseId& b) { return a.m_text == b.m_text; }
    friend bool operator!=(const LeaseId& a, const LeaseId& b) { return a.m_text != b.m_text; }
    friend bool operator<(const LeaseId& a, const LeaseId& b) { return a.m_text < b.m_text; }
    friend size_t qHash(const LeaseId& id, size_t seed = 0) { return qHash(id.m_text, seed); }

private:
    explicit LeaseId(QString text) : m_text(std::move(text)) {}

    QString m_text;
};

} // namespace gleaner
