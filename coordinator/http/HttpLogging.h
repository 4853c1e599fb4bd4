#pragma once
// The logging category of the coordinator's HTTP layer, server and client: enable the per-request lines with
// QT_LOGGING_RULES="gleaner.coordinator.http.debug=true".

#include <QLoggingCategory>

namespace gleaner::coordinator {

Q_DECLARE_LOGGING_CATEGORY(lcHttp)

} // namespace gleaner::coordinator
