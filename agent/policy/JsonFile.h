#pragma once
// Reading the agent's small JSON files (the policy file, the user's preferences): one object, or a sentence
// saying why not, to follow the file's name in a message.

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QString>

namespace gleaner::agent {

struct ReadJson
{
    QJsonObject object;
    QString problem; // empty when the file held a JSON object
};

inline ReadJson readJsonObject(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return {{}, QStringLiteral("cannot be read (%1)").arg(file.errorString())};
    QJsonParseError error{};
    const QJsonDocument document = QJsonDocument::fromJson(file.read(1 << 20), &error);
    if (error.error != QJsonParseError::NoError)
        return {
            {},
            QStringLiteral("is not valid JSON (%1 at byte %2)").arg(error.errorString()).arg(error.offset)};
    if (!document.isObject())
        return {{}, QStringLiteral("does not hold a JSON object")};
    return {document.object(), {}};
}

} // namespace gleaner::agent
