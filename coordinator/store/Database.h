#pragma once
// The coordinator's SQLite database: its schema on the shared SqliteDatabase (WAL, versioned, nested
// transactions). The coordinator uses it from its state thread only. Durability: see SqliteDatabase.h and
// docs/architecture.md.

#include "Result.h"
#include "store/SqliteDatabase.h"

#include <memory>

namespace gleaner::coordinator {

class Database final : public SqliteDatabase
{
public:
    static Result<std::unique_ptr<Database>> open(const QString& path);

private:
    Database() = default;
};

} // namespace gleaner::coordinator
