#include "http/HttpLogging.h"

namespace gleaner::coordinator {

// Debug (one line per request) is off unless a logging rule turns it on: a busy coordinator would otherwise
// write a line per lease, progress report and file range.
Q_LOGGING_CATEGORY(lcHttp, "gleaner.coordinator.http", QtInfoMsg)

} // namespace gleaner::coordinator
