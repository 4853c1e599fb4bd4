#include "FakeAgent.h"

#include "TestSupport.h"
#include "control/ControlProtocol.h"
#include "control/ControlServer.h"

#include <QDateTime>
#include <QJsonDocument>
#include <QTest>

#include <cmath>

using namespace Qt::StringLiterals;

namespace gleaner::gui::test {

namespace {

QString compact(const QJsonValue& value)
{
    if (value.isUndefined())
        return u"nothing"_s;
    // A bare value is not a JSON document; wrap it in an array and strip the brackets.
    const QByteArray json = QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(json.mid(1, json.size() - 2));
}

QJsonObject entryFor(const QJsonArray& catalogue, const QString& key)
{
    for (const QJsonValue& entry : catalogue)
        if (entry.toObject().value(u"key"_s).toString() == key)
            return entry.toObject();
    return {};
}

QStringList keysOf(const QJsonArray& catalogue)
{
    QStringList keys;
    for (const QJsonValue& entry : catalogue)
        keys << entry.toObject().value(u"key"_s).toString();
    return keys;
}

// Why `value` is not a valid value of the catalogue entry, or empty when it is. Worded as the agent's
// Preferences::validate() words it.
QString invalidValue(const QJsonObject& entry, const QJsonValue& value)
{
    const QString key = entry.value(u"key"_s).toString();
    const QString type = entry.value(u"type"_s).toString();
    if (type == u"bool") {
        if (!value.isBool())
            return u"%1 must be true or false, not %2"_s.arg(key, compact(value));
    } else if (type == u"int") {
        const double min = entry.value(u"min"_s).toDouble(-9007199254740992.0);
        const double max = entry.value(u"max"_s).toDouble(9007199254740992.0);
        const double number = value.toDouble();
        if (!value.isDouble() || std::floor(number) != number || number < min || number > max) {
            QString allowed = u"a whole number from %1 to %2"_s.arg(qint64(min)).arg(qint64(max));
            if (entry.contains(u"unit"_s))
                allowed += u" (%1)"_s.arg(entry.value(u"unit"_s).toString());
            return u"%1 must be %2, not %3"_s.arg(key, allowed, compact(value));
        }
    } else if (type == u"enum") {
        QStringList choices;
        for (const QJsonValue& choice : entry.value(u"choices"_s).toArray())
            choices << choice.toString();
        if (!value.isString() || !choices.contains(value.toString())) {
            QStringList quoted;
            for (const QString& choice : std::as_const(choices))
                quoted << u'"' + choice + u'"';
            const QString last = quoted.isEmpty() ? u"nothing"_s : quoted.takeLast();
            const QString allowed = quoted.isEmpty() ? last : quoted.join(u", "_s) + u" or "_s + last;
            return u"%1 must be %2, not %3"_s.arg(key, allowed, compact(value));
        }
    } else if (type == u"string_list") {
        bool strings = value.isArray();
        for (const QJsonValue& item : value.toArray())
            strings = strings && item.isString();
        if (!strings)
            return u"%1 must be a list of strings, e.g. [\"steam\", \"obs\"], not %2"_s.arg(key,
                                                                                            compact(value));
    }
    return {};
}

} // namespace

FakeAgent::FakeAgent(QObject* parent)
    : QObject(parent), m_status{{u"state"_s, u"waiting"_s},
                                {u"reason"_s, u"waiting for the computer to be idle"_s},
                                {u"reason_code"_s, u"idle_wait"_s}},
      m_policyFile(u"/etc/gleaner/policy.json"_s)
{
    m_snoozeTimer.setSingleShot(true);
    connect(&m_snoozeTimer, &QTimer::timeout, this, [this] { resume(); });
    setCatalogue(defaultCatalogue());
}

FakeAgent::~FakeAgent()
{
    stop();
}

Status FakeAgent::start(const QString& dataDir)
{
    stop();
    m_server = std::make_unique<agent::ControlServer>(*this);
    return m_server->listen(dataDir);
}

void FakeAgent::stop()
{
    if (m_server)
        m_server->close();
    m_server.reset();
}

bool FakeAgent::isRunning() const
{
    return m_server && m_server->isListening();
}

QStringList FakeAgent::receivedCommands() const
{
    QStringList commands;
    for (const auto& request : m_requests)
        commands << request.first;
    return commands;
}

QJsonObject FakeAgent::lastArgs(const QString& cmd) const
{
    for (auto it = m_requests.crbegin(); it != m_requests.crend(); ++it)
        if (it->first == cmd)
            return it->second;
    return {};
}

bool FakeAgent::waitForRequest(const QString& cmd, int timeoutMs)
{
    return QTest::qWaitFor([&] { return receivedCommands().contains(cmd); }, timeoutMs);
}

void FakeAgent::pushEvent(const QJsonObject& event)
{
    if (m_server)
        m_server->publish(event);
}

QJsonArray FakeAgent::defaultCatalogue()
{
    const QString path = gleaner::test::sourceDir() + u"/tests/gui/support/preferences-catalogue.json"_s;
    const QJsonDocument document = QJsonDocument::fromJson(gleaner::test::readFile(path));
    if (!document.isArray() || document.array().isEmpty())
        qFatal("FakeAgent: %s is missing or not a JSON array of catalogue entries; restore it from git",
               qPrintable(path));
    return document.array();
}

void FakeAgent::setCatalogue(const QJsonArray& catalogue)
{
    m_catalogue = catalogue;
    QJsonObject values;
    for (const QJsonValue& item : catalogue) {
        const QJsonObject entry = item.toObject();
        const QString key = entry.value(u"key"_s).toString();
        values.insert(key, m_values.contains(key) ? m_values.value(key) : entry.value(u"default"_s));
    }
    m_values = values;
}

void FakeAgent::setValues(const QJsonObject& values)
{
    for (auto it = values.begin(); it != values.end(); ++it)
        m_values.insert(it.key(), it.value());
}

QJsonObject FakeAgent::preferencesObject() const
{
    return {{u"values"_s, m_values},
            {u"locked"_s, QJsonArray::fromStringList(m_locked)},
            {u"policy_file"_s, m_policyFile},
            {u"catalogue"_s, m_catalogue}};
}

void FakeAgent::publishPreferences()
{
    pushEvent(agent::controlEvent(
        u"preferences"_s, {{u"values"_s, m_values}, {u"locked"_s, QJsonArray::fromStringList(m_locked)}}));
}

QStringList FakeAgent::commands() const
{
    return {u"status"_s, u"pause"_s,       u"resume"_s,         u"finish"_s,
            u"snooze"_s, u"preferences"_s, u"set_preferences"_s};
}

Result<QJsonObject> FakeAgent::handle(const QString& cmd, const QJsonObject& args)
{
    m_requests.append({cmd, args});
    Q_EMIT requestReceived(cmd, args);
    if (cmd == u"status")
        return m_status;
    if (cmd == u"pause") {
        if (m_status.value(u"state"_s).toString() != u"paused")
            m_beforePause = m_status;
        m_snoozeTimer.stop();
        return enterState(u"paused"_s, u"paused on request"_s, u"paused_by_user"_s);
    }
    if (cmd == u"resume")
        return resume();
    if (cmd == u"finish") {
        m_snoozeTimer.stop();
        return enterState(u"finishing"_s, u"finishing the current subtasks, then stopping"_s, u"finishing"_s);
    }
    if (cmd == u"snooze")
        return snooze(args);
    if (cmd == u"preferences")
        return preferencesObject();
    if (cmd == u"set_preferences")
        return setPreferences(args);
    return fail(u"FakeAgent was given \"%1\", which it does not list in commands()"_s.arg(cmd));
}

QJsonObject FakeAgent::enterState(const QString& state, const QString& reason, const QString& reasonCode)
{
    m_status.insert(u"state"_s, state);
    m_status.insert(u"reason"_s, reason);
    m_status.insert(u"reason_code"_s, reasonCode);
    pushEvent(agent::controlEvent(
        u"state"_s, {{u"state"_s, state}, {u"reason"_s, reason}, {u"reason_code"_s, reasonCode}}));
    return {{u"state"_s, state}};
}

QJsonObject FakeAgent::resume()
{
    m_snoozeTimer.stop();
    if (m_status.value(u"state"_s).toString() != u"paused")
        return {{u"state"_s, m_status.value(u"state"_s)}};
    QJsonObject policy = m_status.value(u"policy"_s).toObject();
    if (policy.contains(u"snoozed_until_ms"_s)) {
        policy.insert(u"snoozed_until_ms"_s, QJsonValue::Null);
        m_status.insert(u"policy"_s, policy);
    }
    QString state = m_beforePause.value(u"state"_s).toString();
    if (state.isEmpty() || state == u"paused")
        return enterState(u"waiting"_s, u"waiting for the computer to be idle"_s, u"idle_wait"_s);
    return enterState(state, m_beforePause.value(u"reason"_s).toString(),
                      m_beforePause.value(u"reason_code"_s).toString());
}

Result<QJsonObject> FakeAgent::snooze(const QJsonObject& args)
{
    const QJsonValue seconds = args.value(u"seconds"_s);
    const double value = seconds.toDouble();
    if (!seconds.isDouble() || std::floor(value) != value || value < 1 || value > 86400)
        return fail(u"snooze needs {\"seconds\": N} with N a whole number from 1 to 86400, not %1"_s.arg(
            compact(seconds)));
    if (m_status.value(u"state"_s).toString() != u"paused")
        m_beforePause = m_status;
    const qint64 untilMs = QDateTime::currentMSecsSinceEpoch() + qint64(value) * 1000;
    QJsonObject policy = m_status.value(u"policy"_s).toObject();
    policy.insert(u"snoozed_until_ms"_s, untilMs);
    m_status.insert(u"policy"_s, policy);
    m_snoozeTimer.start(int(value) * 1000);
    const QString until = QDateTime::fromMSecsSinceEpoch(untilMs).toString(u"HH:mm"_s);
    QJsonObject result = enterState(u"paused"_s, u"snoozed until %1"_s.arg(until), u"snoozed"_s);
    result.insert(u"until_ms"_s, untilMs);
    return result;
}

Result<QJsonObject> FakeAgent::setPreferences(const QJsonObject& args)
{
    if (!args.value(u"values"_s).isObject())
        return fail(u"set_preferences needs {\"values\": {KEY: VALUE, ...}}, not %1"_s.arg(compact(args)));
    QJsonObject values = args.value(u"values"_s).toObject();
    // All or nothing: every key is checked before any is changed. Like the agent, null puts a key back to its
    // default, and a locked key may be "set" to the value it already has.
    for (auto it = values.begin(); it != values.end(); ++it) {
        const QJsonObject entry = entryFor(m_catalogue, it.key());
        if (entry.isEmpty())
            return fail(u"unknown preference \"%1\"; the known ones are %2"_s.arg(
                it.key(), keysOf(m_catalogue).join(u", "_s)));
        if (it.value().isNull())
            it.value() = entry.value(u"default"_s);
        if (const QString why = invalidValue(entry, it.value()); !why.isEmpty())
            return fail(why);
        if (m_locked.contains(it.key()) && it.value() != m_values.value(it.key()))
            return fail(u"%1 is set by your organisation (%2) and cannot be changed here; ask your IT administrator"_s.arg(
                it.key(), m_policyFile));
    }
    QJsonObject changed;
    for (auto it = values.begin(); it != values.end(); ++it)
        if (it.value() != m_values.value(it.key()))
            changed.insert(it.key(), it.value());
    values = changed;
    setValues(values);
    if (!values.isEmpty())
        publishPreferences();
    return preferencesObject();
}

} // namespace gleaner::gui::test
