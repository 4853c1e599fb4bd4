#include "PreferenceSpec.h"

#include <limits>

using namespace Qt::StringLiterals;

namespace gleaner::gui {

PreferenceSpec PreferenceSpec::fromJson(const QJsonObject& entry)
{
    PreferenceSpec spec;
    spec.key = entry.value(u"key"_s).toString();
    spec.typeName = entry.value(u"type"_s).toString();
    if (spec.typeName == u"bool")
        spec.type = Type::Bool;
    else if (spec.typeName == u"int")
        spec.type = Type::Int;
    else if (spec.typeName == u"enum")
        spec.type = Type::Enum;
    else if (spec.typeName == u"string_list")
        spec.type = Type::StringList;
    spec.defaultValue = entry.value(u"default"_s);
    // A QSpinBox holds an int; limits beyond it are clamped to what the editor can show.
    constexpr double intMin = std::numeric_limits<int>::min();
    constexpr double intMax = std::numeric_limits<int>::max();
    spec.min = qint64(qBound(intMin, entry.value(u"min"_s).toDouble(intMin), intMax));
    spec.max = qint64(qBound(intMin, entry.value(u"max"_s).toDouble(intMax), intMax));
    spec.unit = entry.value(u"unit"_s).toString();
    for (const QJsonValue& choice : entry.value(u"choices"_s).toArray())
        spec.choices << choice.toString();
    spec.label = entry.value(u"label"_s).toString();
    if (spec.label.isEmpty())
        spec.label = spec.key;
    spec.help = entry.value(u"help"_s).toString();
    spec.group = entry.value(u"group"_s).toString(u"advanced"_s);
    return spec;
}

QList<PreferenceSpec> parsePreferenceCatalogue(const QJsonArray& catalogue)
{
    QList<PreferenceSpec> specs;
    for (const QJsonValue& entry : catalogue) {
        PreferenceSpec spec = PreferenceSpec::fromJson(entry.toObject());
        if (!spec.key.isEmpty())
            specs << spec;
    }
    return specs;
}

} // namespace gleaner::gui
