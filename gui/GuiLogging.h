#pragma once
// The tray app's logging category, gleaner.gui.

#include <QLoggingCategory>

namespace gleaner::gui {
Q_DECLARE_LOGGING_CATEGORY(lcGui)
}
