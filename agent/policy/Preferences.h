#pragma once
// The volunteer's preferences: when the agent may compute and how much of the machine it takes
// (docs/desktop.md, "Preferences"). The catalogue is the one description of every key (type, default, limits,
// label, help) that the agent validates against and that the tray app builds its forms from, so a preference
// added here appears in every client without changing them.
//
// A Preferences object always holds every key with a valid value: values enter only through validate(), which
// also brings them into one spelling (whole numbers as integers, schedule entries in lower case, program
// names trimmed), so two objects that mean the same compare equal.

#include "Result.h"
#include "Schedule.h"

#include <QJsonObject>
#include <QJsonValue>
#include <QList>
#include <QString>
#include <QStringList>

namespace gleaner::agent {

enum class PreferenceType
{
    Bool,
    Int,
    Enum,
    StringList
};

struct PreferenceInfo
{
    QString key;
    PreferenceType type;
    QJsonValue defaultValue;
    qint64 min = 0, max = 0; // Int only, inclusive
    QStringList choices;     // Enum only
    QString unit, label, help;
    bool simple = false; // shown on the tray app's simple page too
};

class Preferences
{
public:
    // Every preference of docs/desktop.md, in its order.
    static const QList<PreferenceInfo>& catalogue();
    // Every key, in the catalogue's order.
    static QStringList keys();
    // The entry of `key`; nullptr for an unknown key.
    static const PreferenceInfo* info(const QString& key);
    // The JSON word of a type on the wire: "bool", "int", "enum", "string_list".
    static QString typeName(PreferenceType type);

    static Preferences defaults();
    Preferences(); // the defaults

    // Checks one value against the catalogue and returns it in its one spelling. Refuses an unknown key, a
    // wrong JSON type, a number out of limits or with a fraction, an unknown enum choice, an empty program
    // name and a bad schedule entry, with a sentence naming the key, the value and what is allowed. A
    // non-empty `origin` (a file) prefixes the message: "/etc/gleaner/policy.json: idle_seconds must be ...".
    static Result<QJsonValue> validate(const QString& key, const QJsonValue& value,
                                       const QString& origin = {});

    // Undefined for an unknown key.
    QJsonValue value(const QString& key) const;
    // Validates, then replaces the value; on failure nothing changes.
    Result<void> set(const QString& key, const QJsonValue& value);
    // Every key.
    QJsonObject toJson() const;

    bool onlyWhenIdle() const;
    int idleSeconds() const;
    bool respectInhibitors() const;
    int otherCpuLimitPercent() const;
    bool pauseOnBattery() const;
    QStringList scheduleEntries() const;
    const Schedule& schedule() const { return m_schedule; }
    QStringList pausePrograms() const;
    int maxCores() const; // 0: all but one
    int cpuSharePercent() const;
    qint64 memoryActiveBytes() const; // 0: no cap
    qint64 memoryIdleBytes() const;   // 0: no cap
    // TorchScript models may run where neither the worker's seccomp filter nor its memory cap holds.
    bool allowUnconfinedModels() const;
    enum class Gpu
    {
        Never,
        Idle,
        Always
    };
    Gpu gpu() const;
    qint64 cacheBytes() const;
    qint64 uploadBytesPerSecond() const;   // 0: no cap
    qint64 downloadBytesPerSecond() const; // 0: no cap
    int checkpointSeconds() const;

    // The schedule is derived from the values, so comparing the values is enough.
    bool operator==(const Preferences& other) const { return m_values == other.m_values; }

private:
    qint64 integer(const QString& key) const;
    bool boolean(const QString& key) const;
    QStringList strings(const QString& key) const;

    QJsonObject m_values;
    Schedule m_schedule;
};

} // namespace gleaner::agent
