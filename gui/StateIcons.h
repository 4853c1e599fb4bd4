#pragma once
// The tray app's icons, drawn from the SVGs compiled into it (resources/icons) with QSvgRenderer into pixmaps
// at the sizes panels and windows ask for, so no SVG icon-engine plugin has to be installed.

#include "AgentStatus.h"

#include <QIcon>

namespace gleaner::gui {

// The icon of a tray state (gleaner-training.svg, ...).
QIcon stateIcon(TrayState state);
// The application's icon (gleaner.svg).
QIcon appIcon();
// One SVG from the resources rendered at size x size pixels; a null pixmap when it cannot be read.
QPixmap renderSvg(const QString& resourcePath, int size);

} // namespace gleaner::gui
