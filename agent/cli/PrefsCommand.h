#pragma once
// `gleaner-agent prefs [set KEY=VALUE ...]`: shows or changes the running agent's preferences
// (docs/desktop.md) over its control socket. The agent validates and persists; a locked preference is refused
// with the organisation's file named. Exit codes as AgentCli.h.

#include "Result.h"

#include <QJsonArray>
#include <QJsonValue>
#include <QStringList>

namespace gleaner::agent::cli {

// `arguments` starts with "prefs".
int prefsCommand(const QStringList& arguments);

// "KEY=VALUE" to the JSON value set_preferences takes, given the key's catalogue type ("bool", "int", "enum",
// "string_list"). A string list is written as entries separated by ';' ("mon-fri 18:00-08:00;sat,sun"), or as
// a JSON array. Errors name the argument.
struct ParsedPreference
{
    QString key;
    QJsonValue value;
};
Result<ParsedPreference> parsePreferenceArgument(const QString& argument, const QJsonArray& catalogue);

} // namespace gleaner::agent::cli
