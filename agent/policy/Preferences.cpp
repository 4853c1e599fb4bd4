#include "Preferences.h"

#include <QJsonArray>
#include <QJsonDocument>

#include <cmath>

namespace gleaner::agent {

namespace {

constexpr qint64 kMiB = 1024 * 1024;
constexpr qint64 kKiB = 1024;

PreferenceInfo boolean(const char* key, bool byDefault, const char* label, const char* help, bool simple)
{
    return PreferenceInfo{QString::fromLatin1(key),
                          PreferenceType::Bool,
                          QJsonValue(byDefault),
                          0,
                          0,
                          {},
                          {},
                          QString::fromUtf8(label),
                          QString::fromUtf8(help),
                          simple};
}

PreferenceInfo integer(const char* key, qint64 byDefault, qint64 min, qint64 max, const char* unit,
                       const char* label, const char* help, bool simple)
{
    return PreferenceInfo{
        QString::fromLatin1(key), PreferenceType::Int,      QJsonValue(byDefault),   min,   max, {},
        QString::fromUtf8(unit),  QString::fromUtf8(label), QString::fromUtf8(help), simple};
}

PreferenceInfo stringList(const char* key, const char* label, const char* help, bool simple)
{
    return PreferenceInfo{QString::fromLatin1(key), PreferenceType::StringList, QJsonArray(), 0, 0, {}, {},
                          QString::fromUtf8(label), QString::fromUtf8(help),    simple};
}

QList<PreferenceInfo> buildCatalogue()
{
    QList<PreferenceInfo> all;
    all << boolean("only_when_idle", true, "Only when idle",
                   "Compute only while you are away from the computer, and stop as soon as you come back.",
                   true);
    all << integer("idle_seconds", 180, 5, 86400, "s", "Start after idle for",
                   "How long the keyboard and mouse must have been untouched before computing starts.", true);
    all << boolean(
        "respect_inhibitors", true, "Respect videos and presentations",
        "Count a program that keeps the screen awake (a video, a presentation) as use of the computer.",
        false);
    all << integer(
        "other_cpu_limit_percent", 25, 5, 100, "%", "Stop when other programs use more than",
        "Stop while your other programs use more than this share of the processor; 100: never stop.", false);
    all << boolean("pause_on_battery", true, "Pause on battery",
                   "Stop while the computer runs on battery power.", true);
    all << stringList(
        "schedule", "Schedule",
        "When computing is allowed, e.g. \"mon-fri 18:00-08:00\" and \"sat,sun\"; a range that ends "
        "before it starts runs past midnight. Empty: any time.",
        false);
    all << stringList("pause_programs", "Pause while these programs run",
                      "Stop while one of these programs runs, named as ps shows them (e.g. steam, obs).",
                      false);
    all << integer("max_cores", 0, 0, 1024, "cores", "Processor cores to use",
                   "How many processor cores Gleaner uses in all; 0: all but one.", true);
    all << integer(
        "cpu_share_percent", 100, 10, 100, "%", "Processor time on those cores",
        "The share of the time the cores used compute; they rest the rest of the time, which keeps the "
        "computer cooler and quieter.",
        true);
    all << integer(
        "memory_active_mb", 1024, 0, 1048576, "MiB", "Memory limit while you work",
        "The most memory a subtask may use while you use the computer (when \"Only when idle\" is off); "
        "0: no limit.",
        false);
    all << integer("memory_idle_mb", 0, 0, 1048576, "MiB", "Memory limit while you are away",
                   "The most memory a subtask may use while you are away; 0: no limit.", false);
    PreferenceInfo gpu{
        QStringLiteral("gpu"),
        PreferenceType::Enum,
        QJsonValue(QStringLiteral("idle")),
        0,
        0,
        {QStringLiteral("never"), QStringLiteral("idle"), QStringLiteral("always")},
        {},
        QStringLiteral("Use the GPU"),
        QStringLiteral("When Gleaner may use an NVIDIA graphics card: never, only while you are "
                       "away (idle), or always."),
        false};
    all << gpu;
    all << integer("cache_mb", 10240, 100, 16777216, "MiB", "Disk space for training data",
                   "How much disk space cached training data and model weights may take.", false);
    all << integer("upload_kib_per_s", 0, 0, 10485760, "KiB/s", "Upload limit",
                   "The highest upload rate Gleaner uses; 0: no limit.", false);
    all << integer("download_kib_per_s", 0, 0, 10485760, "KiB/s", "Download limit",
                   "The highest download rate Gleaner uses; 0: no limit.", false);
    all << integer(
        "checkpoint_seconds", 60, 10, 3600, "s", "Save progress every",
        "How often a running subtask saves its progress, so that little is lost when it has to stop.", false);
    all << boolean("allow_unconfined_models", false, "Run job programs without their safety net",
                   "Train a job's own model program (TorchScript) even on a computer where the worker can neither "
                   "filter its system calls nor cap its memory. Off: such a job is refused with the reason.",
                   false);
    return all;
}

// A JSON value as it would be written, for messages: 3, "yes", ["steam", ""], null.
QString render(const QJsonValue& value)
{
    if (value.isUndefined())
        return QStringLiteral("nothing");
    const QByteArray wrapped = QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(wrapped.mid(1, wrapped.size() - 2));
}

QString withOrigin(const QString& origin, const QString& message)
{
    return origin.isEmpty() ? message : origin + QStringLiteral(": ") + message;
}

QString allowedInt(const PreferenceInfo& info)
{
    QString text = QStringLiteral("a whole number from %1 to %2").arg(info.min).arg(info.max);
    if (!info.unit.isEmpty())
        text += QStringLiteral(" (%1)").arg(info.unit);
    return text;
}

QString allowedChoices(const PreferenceInfo& info)
{
    QStringList quoted;
    for (const QString& choice : info.choices)
        quoted << u'"' + choice + u'"';
    const QString last = quoted.takeLast();
    return quoted.isEmpty() ? last : quoted.join(QStringLiteral(", ")) + QStringLiteral(" or ") + last;
}

Result<QJsonValue> validateList(const PreferenceInfo& info, const QJsonValue& value)
{
    const QString example = info.key == u"schedule" ? QStringLiteral("[\"mon-fri 18:00-08:00\", \"sat,sun\"]")
                                                    : QStringLiteral("[\"steam\", \"obs\"]");
    if (!value.isArray())
        return fail(QStringLiteral("%1 must be a list of strings, e.g. %2, not %3")
                        .arg(info.key, example, render(value)));
    QStringList items;
    const QJsonArray array = value.toArray();
    for (qsizetype i = 0; i < array.size(); ++i) {
        if (!array[i].isString())
            return fail(QStringLiteral("%1 must be a list of strings, e.g. %2, not %3 (item %4 is %5)")
                            .arg(info.key, example, render(value), QString::number(i + 1), render(array[i])));
        items << array[i].toString();
    }

    QJsonArray normal;
    if (info.key == u"schedule") {
        const Result<Schedule> schedule = Schedule::parse(items);
        if (!schedule)
            return fail(schedule.error());
        for (const QString& item : items)
            normal.append(Schedule::normalise(item));
        return QJsonValue(normal);
    }

    // pause_programs: names as `ps` shows them; a blank one would match nothing and only hide a typo.
    QStringList seen;
    for (const QString& item : items) {
        const QString name = item.trimmed();
        if (name.isEmpty())
            return fail(
                QStringLiteral("%1 holds an empty program name in %2; name each program as ps shows it, "
                               "e.g. steam")
                    .arg(info.key, render(value)));
        if (!seen.contains(name))
            seen << name;
    }
    return QJsonValue(QJsonArray::fromStringList(seen));
}

} // namespace

const QList<PreferenceInfo>& Preferences::catalogue()
{
    static const QList<PreferenceInfo> all = buildCatalogue();
    return all;
}

QStringList Preferences::keys()
{
    QStringList all;
    for (const PreferenceInfo& entry : catalogue())
        all << entry.key;
    return all;
}

const PreferenceInfo* Preferences::info(const QString& key)
{
    for (const PreferenceInfo& entry : catalogue()) {
        if (entry.key == key)
            return &entry;
    }
    return nullptr;
}

QString Preferences::typeName(PreferenceType type)
{
    switch (type) {
    case PreferenceType::Bool:
        return QStringLiteral("bool");
    case PreferenceType::Int:
        return QStringLiteral("int");
    case PreferenceType::Enum:
        return QStringLiteral("enum");
    case PreferenceType::StringList:
        return QStringLiteral("string_list");
    }
    return {};
}

Preferences::Preferences()
{
    for (const PreferenceInfo& entry : catalogue())
        m_values.insert(entry.key, entry.defaultValue);
}

Preferences Preferences::defaults()
{
    return Preferences();
}

Result<QJsonValue> Preferences::validate(const QString& key, const QJsonValue& value, const QString& origin)
{
    const PreferenceInfo* entry = info(key);
    if (!entry)
        return fail(withOrigin(origin, QStringLiteral("unknown preference \"%1\"; the known ones are %2")
                                           .arg(key, keys().join(QStringLiteral(", ")))));
    switch (entry->type) {
    case PreferenceType::Bool:
        if (!value.isBool())
            return fail(withOrigin(
                origin, QStringLiteral("%1 must be true or false, not %2").arg(key, render(value))));
        return value;
    case PreferenceType::Int: {
        const double number = value.toDouble();
        if (!value.isDouble() || std::floor(number) != number || number < double(entry->min) ||
            number > double(entry->max))
            return fail(withOrigin(
                origin, QStringLiteral("%1 must be %2, not %3").arg(key, allowedInt(*entry), render(value))));
        return QJsonValue(qint64(number));
    }
    case PreferenceType::Enum:
        if (!value.isString() || !entry->choices.contains(value.toString()))
            return fail(withOrigin(
                origin,
                QStringLiteral("%1 must be %2, not %3").arg(key, allowedChoices(*entry), render(value))));
        return value;
    case PreferenceType::StringList: {
        Result<QJsonValue> list = validateList(*entry, value);
        return origin.isEmpty() ? std::move(list) : std::move(list).context(origin);
    }
    }
    return fail(withOrigin(origin, QStringLiteral("%1 has a type this agent does not know").arg(key)));
}

QJsonValue Preferences::value(const QString& key) const
{
    return m_values.value(key);
}

Result<void> Preferences::set(const QString& key, const QJsonValue& value)
{
    Result<QJsonValue> checked = validate(key, value);
    if (!checked)
        return fail(checked.error());
    if (key == u"schedule") {
        QStringList entries;
        for (const QJsonValue& entry : checked->toArray())
            entries << entry.toString();
        // validate() parsed the same entries, so this cannot fail.
        m_schedule = Schedule::parse(entries).value();
    }
    m_values.insert(key, *checked);
    return {};
}

QJsonObject Preferences::toJson() const
{
    return m_values;
}

qint64 Preferences::integer(const QString& key) const
{
    return m_values.value(key).toInteger();
}

bool Preferences::boolean(const QString& key) const
{
    return m_values.value(key).toBool();
}

QStringList Preferences::strings(const QString& key) const
{
    QStringList list;
    for (const QJsonValue& item : m_values.value(key).toArray())
        list << item.toString();
    return list;
}

bool Preferences::onlyWhenIdle() const
{
    return boolean(QStringLiteral("only_when_idle"));
}

int Preferences::idleSeconds() const
{
    return int(integer(QStringLiteral("idle_seconds")));
}

bool Preferences::respectInhibitors() const
{
    return boolean(QStringLiteral("respect_inhibitors"));
}

int Preferences::otherCpuLimitPercent() const
{
    return int(integer(QStringLiteral("other_cpu_limit_percent")));
}

bool Preferences::pauseOnBattery() const
{
    return boolean(QStringLiteral("pause_on_battery"));
}

QStringList Preferences::scheduleEntries() const
{
    return strings(QStringLiteral("schedule"));
}

QStringList Preferences::pausePrograms() const
{
    return strings(QStringLiteral("pause_programs"));
}

int Preferences::maxCores() const
{
    return int(integer(QStringLiteral("max_cores")));
}

int Preferences::cpuSharePercent() const
{
    return int(integer(QStringLiteral("cpu_share_percent")));
}

qint64 Preferences::memoryActiveBytes() const
{
    return integer(QStringLiteral("memory_active_mb")) * kMiB;
}

bool Preferences::allowUnconfinedModels() const
{
    return boolean(QStringLiteral("allow_unconfined_models"));
}

qint64 Preferences::memoryIdleBytes() const
{
    return integer(QStringLiteral("memory_idle_mb")) * kMiB;
}

Preferences::Gpu Preferences::gpu() const
{
    const QString choice = m_values.value(QStringLiteral("gpu")).toString();
    if (choice == u"never")
        return Gpu::Never;
    if (choice == u"always")
        return Gpu::Always;
    return Gpu::Idle;
}

qint64 Preferences::cacheBytes() const
{
    return integer(QStringLiteral("cache_mb")) * kMiB;
}

qint64 Preferences::uploadBytesPerSecond() const
{
    return integer(QStringLiteral("upload_kib_per_s")) * kKiB;
}

qint64 Preferences::downloadBytesPerSecond() const
{
    return integer(QStringLiteral("download_kib_per_s")) * kKiB;
}

int Preferences::checkpointSeconds() const
{
    return int(integer(QStringLiteral("checkpoint_seconds")));
}

} // namespace gleaner::agent
