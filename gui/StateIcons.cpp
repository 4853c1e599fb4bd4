#include "StateIcons.h"

#include "GuiLogging.h"

#include <QHash>
#include <QPainter>
#include <QPixmap>
#include <QSvgRenderer>

namespace gleaner::gui {
namespace {

// Panels use 16 to 24 px (and twice that on HiDPI), windows 32 to 64.
constexpr int kSizes[] = {16, 22, 24, 32, 44, 48, 64, 128, 256};

QIcon iconFrom(const QString& resourcePath)
{
    static QHash<QString, QIcon> cache;
    const auto cached = cache.constFind(resourcePath);
    if (cached != cache.constEnd())
        return cached.value();
    QIcon icon;
    for (int size : kSizes) {
        const QPixmap pixmap = renderSvg(resourcePath, size);
        if (!pixmap.isNull())
            icon.addPixmap(pixmap);
    }
    cache.insert(resourcePath, icon);
    return icon;
}

} // namespace

QPixmap renderSvg(const QString& resourcePath, int size)
{
    QSvgRenderer renderer(resourcePath);
    if (!renderer.isValid()) {
        qCWarning(lcGui) << "cannot render the icon" << resourcePath
                         << "(missing from the build's resources?)";
        return {};
    }
    QImage image(size, size, QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    renderer.render(&painter, QRectF(0, 0, size, size));
    painter.end();
    return QPixmap::fromImage(image);
}

QIcon stateIcon(TrayState state)
{
    return iconFrom(QStringLiteral(":/icons/gleaner-%1.svg").arg(trayStateName(state)));
}

QIcon appIcon()
{
    return iconFrom(QStringLiteral(":/icons/gleaner.svg"));
}

} // namespace gleaner::gui
