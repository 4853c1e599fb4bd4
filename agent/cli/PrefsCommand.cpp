#include "cli/PrefsCommand.h"

#include "AgentPaths.h"
#include "cli/CliErrors.h"
#include "control/ControlConnection.h"

#include <QCommandLineParser>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>

namespace gleaner::agent::cli {
namespace {

const QString kCommand = QStringLiteral("prefs");

QString valueText(const QJsonValue& value)
{
    if (value.isBool())
        return value.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    if (value.isDouble())
        return QString::number(value.toDouble(), 'g', 12);
    if (value.isArray()) {
        QStringList entries;
        for (const QJsonValue& entry : value.toArray())
            entries << entry.toString();
        return entries.isEmpty() ? QStringLiteral("(none)") : entries.join(QStringLiteral("; "));
    }
    return value.toString();
}

QString describe(const QJsonObject& preferences)
{
    const QJsonObject values = preferences.value(QStringLiteral("values")).toObject();
    QStringList locked;
    for (const QJsonValue& key : preferences.value(QStringLiteral("locked")).toArray())
        locked << key.toString();
    QString text;
    QTextStream out(&text);
    for (const QJsonValue& entry : preferences.value(QStringLiteral("catalogue")).toArray()) {
        const QJsonObject info = entry.toObject();
        const QString key = info.value(QStringLiteral("key")).toString();
        QString value = valueText(values.value(key));
        if (const QString unit = info.value(QStringLiteral("unit")).toString(); !unit.isEmpty())
            value += u' ' + unit;
        out << "  " << key.leftJustified(26) << ' ' << value.leftJustified(22);
        if (locked.contains(key))
            out << "  set by your organisation";
        out << "\n";
    }
    if (!locked.isEmpty())
        out << "Locked by " << preferences.value(QStringLiteral("policy_file")).toString() << ".\n";
    return text;
}

} // namespace

Result<ParsedPreference> parsePreferenceArgument(const QString& argument, const QJsonArray& catalogue)
{
    const qsizetype eq = argument.indexOf(u'=');
    if (eq <= 0)
        return fail(QStringLiteral("\"%1\" is not KEY=VALUE").arg(argument));
    const QString key = argument.left(eq).trimmed();
    const QString text = argument.mid(eq + 1).trimmed();
    QString type;
    QStringList known;
    for (const QJsonValue& entry : catalogue) {
        const QJsonObject info = entry.toObject();
        known << info.value(QStringLiteral("key")).toString();
        if (known.last() == key)
            type = info.value(QStringLiteral("type")).toString();
    }
    if (type.isEmpty())
        return fail(QStringLiteral("unknown preference \"%1\"; known: %2").arg(key, known.join(u", ")));
    if (type == u"bool") {
        const QString lower = text.toLower();
        if (lower == u"true" || lower == u"on" || lower == u"yes" || lower == u"1")
            return ParsedPreference{key, true};
        if (lower == u"false" || lower == u"off" || lower == u"no" || lower == u"0")
            return ParsedPreference{key, false};
        return fail(QStringLiteral("%1 takes true or false, not \"%2\"").arg(key, text));
    }
    if (type == u"int") {
        bool ok = false;
        const qint64 number = text.toLongLong(&ok);
        if (!ok)
            return fail(QStringLiteral("%1 takes a whole number, not \"%2\"").arg(key, text));
        return ParsedPreference{key, QJsonValue(number)};
    }
    if (type == u"string_list") {
        if (text.startsWith(u'[')) {
            const QJsonDocument doc = QJsonDocument::fromJson(text.toUtf8());
            if (!doc.isArray())
                return fail(QStringLiteral("%1: \"%2\" is not a JSON array of strings").arg(key, text));
            return ParsedPreference{key, doc.array()};
        }
        QJsonArray entries;
        for (const QString& entry : text.split(u';', Qt::SkipEmptyParts))
            if (!entry.trimmed().isEmpty())
                entries.append(entry.trimmed());
        return ParsedPreference{key, entries};
    }
    return ParsedPreference{key, text}; // enum: the agent checks the choice
}

int prefsCommand(const QStringList& arguments)
{
    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral(
            "Shows the running agent's preferences, or with `set KEY=VALUE ...` changes them: the agent "
            "applies a change at once and keeps it. Lists are separated by ';', e.g. "
            "schedule=\"mon-fri 18:00-08:00;sat,sun\"; an empty value empties a list. Preferences "
            "locked by the organisation's policy file cannot be changed. Without --data-dir this is "
            "the agent of %1.")
            .arg(defaultDataDir(AgentScope::User)));
    parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("set"), QStringLiteral("Change preferences."),
                                 QStringLiteral("[set KEY=VALUE ...]"));
    parser.addOption(
        {QStringLiteral("data-dir"), QStringLiteral("The agent's folder."), QStringLiteral("DIR")});
    parser.addOption(
        {QStringLiteral("system"), QStringLiteral("The system service's agent, /var/lib/gleaner.")});
    parser.addOption(
        {QStringLiteral("json"), QStringLiteral("Print the agent's preferences object as JSON.")});
    if (!parser.parse(arguments))
        return usageError(kCommand, parser.errorText());
    if (parser.isSet(QStringLiteral("help"))) {
        QTextStream(stdout) << parser.helpText();
        return 0;
    }
    QStringList positional = parser.positionalArguments();
    const bool setting = !positional.isEmpty();
    if (setting && positional.first() != u"set")
        return usageError(kCommand, QStringLiteral("unexpected argument \"%1\"; did you mean `prefs set %1`?")
                                        .arg(positional.first()));
    if (setting && positional.size() == 1)
        return usageError(kCommand, QStringLiteral("`prefs set` needs at least one KEY=VALUE"));
    const QString dataDir =
        parser.isSet(QStringLiteral("data-dir"))
            ? parser.value(QStringLiteral("data-dir"))
            : defaultDataDir(parser.isSet(QStringLiteral("system")) ? AgentScope::System : AgentScope::User);

    auto connection = ControlConnection::open(dataDir);
    if (!connection)
        return commandFailure(kCommand, connection.error());
    auto current = (*connection)->call(QStringLiteral("preferences"));
    if (!current)
        return commandFailure(kCommand, current.error());
    QJsonObject result = *current;
    if (setting) {
        QJsonObject values;
        const QJsonArray catalogue = current->value(QStringLiteral("catalogue")).toArray();
        for (const QString& argument : positional.mid(1)) {
            auto parsed = parsePreferenceArgument(argument, catalogue);
            if (!parsed)
                return usageError(kCommand, parsed.error());
            values.insert(parsed->key, parsed->value);
        }
        auto changed =
            (*connection)
                ->call(QStringLiteral("set_preferences"), QJsonObject{{QStringLiteral("values"), values}});
        if (!changed)
            return commandFailure(kCommand, changed.error());
        result = *changed;
    }
    if (parser.isSet(QStringLiteral("json")))
        QTextStream(stdout) << QJsonDocument(result).toJson(QJsonDocument::Indented);
    else
        QTextStream(stdout) << (setting ? QStringLiteral("Changed. ") : QString())
                            << "Preferences of the gleaner-agent for " << dataDir << ":\n"
                            << describe(result);
    return 0;
}

} // namespace gleaner::agent::cli
