#pragma once
// One entry of the agent's preference catalogue (docs/desktop.md, "On the control socket"): what the tray app
// needs to build an editor for a preference it has never heard of. The agent sends the catalogue with every
// `preferences` reply, so the dialog's forms follow the agent rather than a list compiled into the app.

#include <QJsonArray>
#include <QJsonObject>
#include <QJsonValue>
#include <QList>
#include <QString>
#include <QStringList>

namespace gleaner::gui {

struct PreferenceSpec
{
    // Unknown: a type a newer agent added; shown read-only.
    enum class Type
    {
        Bool,
        Int,
        Enum,
        StringList,
        Unknown
    };

    QString key;
    Type type = Type::Unknown;
    QString typeName; // as the agent wrote it
    QJsonValue defaultValue;
    qint64 min = 0;
    qint64 max = 0;
    QString unit;
    QStringList choices;
    QString label; // the key when the agent gave none
    QString help;
    QString group; // "simple" (on the simple page too) or "advanced"

    bool isSimple() const { return group == u"simple"; }
    static PreferenceSpec fromJson(const QJsonObject& entry);
};

// The catalogue's entries in the agent's order; entries without a key are skipped.
QList<PreferenceSpec> parsePreferenceCatalogue(const QJsonArray& catalogue);

} // namespace gleaner::gui
