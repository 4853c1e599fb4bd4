#include "PreferenceStore.h"

#include "JsonFile.h"
#include "PolicyEnrollment.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>

namespace gleaner::agent {

namespace {

// Sets a value already validated by a layer; failing here would be a bug in the layering, not bad input.
void apply(Preferences& preferences, const QString& key, const QJsonValue& value)
{
    const bool applied = preferences.set(key, value).ok();
    Q_ASSERT(applied);
    Q_UNUSED(applied);
}

// A JSON value as written, for messages: "gpus", 3.
QString jsonText(const QJsonValue& value)
{
    const QByteArray wrapped = QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(wrapped.mid(1, wrapped.size() - 2));
}

} // namespace

QString PreferenceStore::defaultPolicyFile()
{
    const QString fromEnvironment = qEnvironmentVariable("GLEANER_POLICY_FILE");
    return fromEnvironment.isEmpty() ? QStringLiteral("/etc/gleaner/policy.json") : fromEnvironment;
}

Result<PreferenceStore> PreferenceStore::open(const QString& userFile, const QString& policyFile)
{
    PreferenceStore store;
    store.m_userFile = userFile;
    store.m_policyFile = policyFile;
    if (Result<void> policy = store.loadPolicy(); !policy)
        return fail(policy.error());
    store.loadUserFile();
    store.m_current = store.compose(store.m_user);
    return store;
}

Result<bool> PreferenceStore::reloadPolicy()
{
    PreferenceStore fresh;
    fresh.m_userFile = m_userFile;
    fresh.m_policyFile = m_policyFile;
    if (Result<void> policy = fresh.loadPolicy(); !policy)
        return fail(policy.error());
    fresh.m_user = m_user; // already validated; the user's file is the agent's own and has not changed
    fresh.m_current = fresh.compose(fresh.m_user);
    const bool changed = !(fresh.m_current == m_current) || fresh.m_locked != m_locked;
    fresh.m_warnings = m_warnings;
    *this = std::move(fresh);
    return changed;
}

Result<void> PreferenceStore::loadPolicy()
{
    if (m_policyFile.isEmpty() || !QFileInfo::exists(m_policyFile))
        return {};
    const QString& file = m_policyFile;
    const ReadJson read = readJsonObject(file);
    if (!read.problem.isEmpty())
        return fail(
            QStringLiteral("%1 %2; the organisation's policy is never ignored: fix the file or remove it")
                .arg(file, read.problem));

    const QString expected =
        QStringLiteral("the policy file holds only \"preferences\" (an object), \"locked\" "
                       "(a list of preference names) and \"enrollment\" (an object)");
    for (auto it = read.object.begin(); it != read.object.end(); ++it) {
        if (it.key() != u"preferences" && it.key() != u"locked" && it.key() != u"enrollment")
            return fail(QStringLiteral("%1: unknown key \"%2\"; %3").arg(file, it.key(), expected));
    }
    // Used before the agent enrolls (RunCommand); checked here too, so a typo there never goes unnoticed.
    if (auto enrollment = PolicyEnrollment::parse(read.object.value(QStringLiteral("enrollment")), file); !enrollment)
        return fail(enrollment.error());
    const QJsonValue preferences = read.object.value(QStringLiteral("preferences"));
    if (!preferences.isUndefined() && !preferences.isObject())
        return fail(QStringLiteral("%1: \"preferences\" is not an object; %2").arg(file, expected));
    const QJsonObject values = preferences.toObject();
    for (auto it = values.begin(); it != values.end(); ++it) {
        const Result<QJsonValue> checked = Preferences::validate(it.key(), it.value(), file);
        if (!checked)
            return fail(checked.error());
        m_organisation.insert(it.key(), *checked);
    }

    const QJsonValue locked = read.object.value(QStringLiteral("locked"));
    if (!locked.isUndefined() && !locked.isArray())
        return fail(QStringLiteral("%1: \"locked\" is not a list; %2").arg(file, expected));
    QStringList names;
    for (const QJsonValue& name : locked.toArray()) {
        if (!name.isString() || !Preferences::info(name.toString()))
            return fail(
                QStringLiteral("%1: \"locked\" names %2, which is not a preference; the known ones are %3")
                    .arg(file, jsonText(name), Preferences::keys().join(QStringLiteral(", "))));
        names << name.toString();
    }
    for (const PreferenceInfo& info : Preferences::catalogue()) {
        if (names.contains(info.key))
            m_locked << info.key;
    }
    return {};
}

void PreferenceStore::loadUserFile()
{
    if (m_userFile.isEmpty() || !QFileInfo::exists(m_userFile))
        return;
    const QString backup =
        QStringLiteral("%1.broken-%2").arg(m_userFile).arg(QDateTime::currentMSecsSinceEpoch());
    // Keeps the file as it was, so a person can still look at (or restore) what the agent could not use.
    const auto keepAside = [&]() -> QString {
        QFile::remove(backup);
        QFile original(m_userFile);
        if (original.rename(backup))
            return QStringLiteral("the file as it was is kept as %1").arg(backup);
        return QStringLiteral("it could not be kept aside (%1) and will be replaced on the next change")
            .arg(original.errorString());
    };

    const ReadJson read = readJsonObject(m_userFile);
    if (!read.problem.isEmpty()) {
        const QString kept = keepAside();
        m_warnings << QStringLiteral("%1 %2, so your saved preferences were not used; %3")
                          .arg(m_userFile, read.problem, kept);
        return;
    }

    QStringList problems;
    for (auto it = read.object.begin(); it != read.object.end(); ++it) {
        const Result<QJsonValue> checked = Preferences::validate(it.key(), it.value(), m_userFile);
        if (checked)
            m_user.insert(it.key(), *checked);
        else
            problems << checked.error();
    }
    if (problems.isEmpty())
        return;
    const QString kept = keepAside();
    for (const QString& problem : std::as_const(problems))
        m_warnings << QStringLiteral("%1; that value was left out and %2").arg(problem, kept);
    if (Result<void> written = writeUserFile(m_user); !written)
        m_warnings << written.error();
}

QJsonValue PreferenceStore::valueBelowUser(const QString& key) const
{
    if (m_organisation.contains(key))
        return m_organisation.value(key);
    const PreferenceInfo* info = Preferences::info(key);
    return info ? info->defaultValue : QJsonValue();
}

Preferences PreferenceStore::compose(const QJsonObject& userValues) const
{
    Preferences preferences;
    for (auto it = m_organisation.begin(); it != m_organisation.end(); ++it) {
        if (!isLocked(it.key()))
            apply(preferences, it.key(), it.value());
    }
    for (auto it = userValues.begin(); it != userValues.end(); ++it) {
        if (!isLocked(it.key()))
            apply(preferences, it.key(), it.value());
    }
    for (const QString& key : m_locked)
        apply(preferences, key, valueBelowUser(key));
    return preferences;
}

Result<bool> PreferenceStore::set(const QJsonObject& values)
{
    QJsonObject user = m_user;
    for (auto it = values.begin(); it != values.end(); ++it) {
        const QString& key = it.key();
        if (it.value().isNull() && Preferences::info(key)) {
            user.remove(key);
            continue;
        }
        const Result<QJsonValue> checked = Preferences::validate(key, it.value());
        if (!checked)
            return fail(checked.error());
        if (isLocked(key)) {
            if (*checked == m_current.value(key))
                continue;
            return fail(QStringLiteral("%1 is set by your organisation (%2) and cannot be changed here; ask "
                                       "your IT administrator")
                            .arg(key, m_policyFile));
        }
        if (*checked == valueBelowUser(key))
            user.remove(key);
        else
            user.insert(key, *checked);
    }
    if (user == m_user)
        return false;

    if (Result<void> written = writeUserFile(user); !written)
        return fail(written.error());
    const Preferences next = compose(user);
    const bool changed = !(next == m_current);
    m_user = user;
    m_current = next;
    return changed;
}

Result<void> PreferenceStore::writeUserFile(const QJsonObject& values) const
{
    const QString folder = QFileInfo(m_userFile).absolutePath();
    if (!QDir().mkpath(folder))
        return fail(QStringLiteral("%1: cannot create the folder %2; check that the agent may write there")
                        .arg(m_userFile, folder));
    QSaveFile file(m_userFile);
    // Owner only: the file says when this person is away from their computer.
    if (!file.open(QIODevice::WriteOnly) ||
        !file.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner) ||
        file.write(QJsonDocument(values).toJson()) < 0 || !file.commit())
        return fail(
            QStringLiteral("%1: cannot save the preferences (%2); check that the agent may write there")
                .arg(m_userFile, file.errorString()));
    return {};
}

QJsonObject PreferenceStore::describe() const
{
    QJsonArray catalogue;
    for (const PreferenceInfo& info : Preferences::catalogue()) {
        QJsonObject entry{
            {QStringLiteral("key"), info.key},
            {QStringLiteral("type"), Preferences::typeName(info.type)},
            {QStringLiteral("default"), info.defaultValue},
            {QStringLiteral("label"), info.label},
            {QStringLiteral("help"), info.help},
            {QStringLiteral("group"), info.simple ? QStringLiteral("simple") : QStringLiteral("advanced")}};
        if (info.type == PreferenceType::Int) {
            entry.insert(QStringLiteral("min"), info.min);
            entry.insert(QStringLiteral("max"), info.max);
        }
        if (!info.unit.isEmpty())
            entry.insert(QStringLiteral("unit"), info.unit);
        if (info.type == PreferenceType::Enum)
            entry.insert(QStringLiteral("choices"), QJsonArray::fromStringList(info.choices));
        catalogue.append(entry);
    }
    return QJsonObject{
        {QStringLiteral("values"), m_current.toJson()},
        {QStringLiteral("locked"), QJsonArray::fromStringList(m_locked)},
        {QStringLiteral("policy_file"), m_policyFile.isEmpty() ? QJsonValue() : QJsonValue(m_policyFile)},
        {QStringLiteral("catalogue"), catalogue},
    };
}

} // namespace gleaner::agent
