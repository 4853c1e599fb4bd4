#include "GuiLogging.h"

namespace gleaner::gui {
Q_LOGGING_CATEGORY(lcGui, "gleaner.gui", QtInfoMsg)
}
