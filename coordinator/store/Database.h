#pragma once
// The coordinator's SQLite database: its schema on the shared SqlDatabase (WAL, versioned, nested
// transactions). The coordinator uses it from its state thread only. Durability: see SqlDatabase.h and
// docs/architecture.md.

#include "Result.h"
#include "store/SqlDatabase.h"

#include <memory>

namespace gleaner::coordinator {

class Database final : public SqlDatabase
{
public:
    static Result<std::unique_ptr<Database>> open(const QString& path);

private:
    Database() = default;
};

} // namespace gleaner::coordinator
