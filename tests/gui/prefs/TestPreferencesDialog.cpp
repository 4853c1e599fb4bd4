// PreferencesDialog against a FakeAgent on a real control socket: every preference goes through the dialog's
// editor, the control protocol and back into a reopened dialog; locks, the simple page's steps, refusals and
// a catalogue entry the dialog has never heard of.
#include "FakeAgent.h"
#include "PreferencesDialog.h"
#include "TestSupport.h"
#include "control/ControlClient.h"
#include "policy/PreferenceStore.h"

#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>

#include <memory>

using namespace Qt::StringLiterals;
using namespace gleaner;
using namespace gleaner::gui;
using gleaner::gui::test::FakeAgent;

namespace {

// JSON compared as its compact text, so a failure prints both sides (and 3 equals 3.0).
QByteArray json(const QJsonValue& value)
{
    return QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
}

QJsonObject catalogueEntry(const QString& key)
{
    for (const QJsonValue& entry : FakeAgent::defaultCatalogue())
        if (entry.toObject().value(u"key"_s).toString() == key)
            return entry.toObject();
    return {};
}

// A valid value of the entry's type that differs from its default.
QJsonValue changedValue(const QJsonObject& entry)
{
    const QString type = entry.value(u"type"_s).toString();
    const QJsonValue fallback = entry.value(u"default"_s);
    if (type == u"bool")
        return !fallback.toBool();
    if (type == u"int") {
        const qint64 value = fallback.toInteger();
        return value + 1 <= entry.value(u"max"_s).toInteger() ? value + 1 : value - 1;
    }
    if (type == u"enum") {
        for (const QJsonValue& choice : entry.value(u"choices"_s).toArray())
            if (choice != fallback)
                return choice;
    }
    if (entry.value(u"key"_s).toString() == u"schedule")
        return QJsonArray{u"mon-fri 18:00-08:00"_s, u"sat,sun"_s};
    if (entry.value(u"key"_s).toString() == u"pause_programs")
        return QJsonArray{u"steam"_s, u"obs"_s};
    return QJsonArray{u"first"_s, u"second"_s};
}

// Puts `value` into an editor the way a user would, through the widget itself.
bool editAsUser(QWidget* editor, const QJsonValue& value)
{
    if (auto* box = qobject_cast<QCheckBox*>(editor)) {
        if (box->isChecked() != value.toBool())
            box->click();
        return box->isChecked() == value.toBool();
    }
    if (auto* spin = qobject_cast<QSpinBox*>(editor)) {
        spin->selectAll();
        QTest::keyClicks(spin, QString::number(value.toInteger()));
        return spin->value() == value.toInteger();
    }
    if (auto* combo = qobject_cast<QComboBox*>(editor)) {
        combo->setCurrentIndex(combo->findText(value.toString()));
        return combo->currentText() == value.toString();
    }
    if (auto* text = qobject_cast<QPlainTextEdit*>(editor)) {
        text->selectAll();
        const QJsonArray lines = value.toArray();
        for (qsizetype i = 0; i < lines.size(); ++i) {
            if (i > 0)
                QTest::keyClick(text, Qt::Key_Return);
            QTest::keyClicks(text, lines.at(i).toString());
        }
        return true;
    }
    return false;
}

// What an editor shows, read from the widget.
QJsonValue shownBy(QWidget* editor)
{
    if (auto* box = qobject_cast<QCheckBox*>(editor))
        return box->isChecked();
    if (auto* spin = qobject_cast<QSpinBox*>(editor))
        return spin->value();
    if (auto* combo = qobject_cast<QComboBox*>(editor))
        return combo->currentText();
    if (auto* text = qobject_cast<QPlainTextEdit*>(editor))
        return QJsonArray::fromStringList(text->toPlainText().split(u'\n', Qt::SkipEmptyParts));
    return QJsonValue::Undefined;
}

QJsonObject setRequest(const QJsonObject& values)
{
    return {{u"values"_s, values}};
}

} // namespace

class TestPreferencesDialog : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();

    void fakeAgentServesTheAgentsCatalogue();

    void roundTripsEveryPreference_data();
    void roundTripsEveryPreference();
    void editorsFollowTheCatalogue();
    void simplePageShowsIdleTimeInMinutes();
    void lockedPreferencesAreDisabledAndSaySo();
    void aLockedProfileKeyDisablesTheSteps();
    void stepsSendTheirValues_data();
    void stepsSendTheirValues();
    void valuesMatchingNoStepShowCustom();
    void aRefusedChangeIsShownAndKeepsTheWindowOpen();
    void okClosesOnceSavedAndCancelSendsNothing();
    void eventsRefreshUntouchedFields();
    void aPreferenceNewToTheDialogGetsAnEditor();

private:
    std::unique_ptr<PreferencesDialog> openDialog(int machineCores = 0);
    // A request after everything the client sent so far, answered in order: once it is, the agent has seen
    // all.
    bool drainClient();

    std::unique_ptr<QTemporaryDir> m_dir;
    std::unique_ptr<FakeAgent> m_agent;
    std::unique_ptr<agent::ControlClient> m_client;
};

void TestPreferencesDialog::init()
{
    m_dir = gleaner::test::scratchDir();
    m_agent = std::make_unique<FakeAgent>();
    const Status started = m_agent->start(m_dir->path());
    QVERIFY2(started.ok(), qPrintable(started.error()));
    m_client = std::make_unique<agent::ControlClient>(m_dir->path());
    m_client->setReconnectDelays(10, 100);
    m_client->setSubscribed(true);
    m_client->start();
    QTRY_VERIFY(m_client->isConnected());
}

void TestPreferencesDialog::cleanup()
{
    m_client.reset();
    m_agent.reset();
    m_dir.reset();
}

std::unique_ptr<PreferencesDialog> TestPreferencesDialog::openDialog(int machineCores)
{
    auto dialog = std::make_unique<PreferencesDialog>(*m_client);
    if (machineCores > 0)
        dialog->setMachineCores(machineCores);
    dialog->show();
    (void)QTest::qWaitFor([&] { return dialog->isLoaded(); }, 5000);
    return dialog;
}

bool TestPreferencesDialog::drainClient()
{
    m_client->send(u"status"_s);
    return m_agent->waitForRequest(u"status"_s);
}

void TestPreferencesDialog::fakeAgentServesTheAgentsCatalogue()
{
    // The dialog is tested against FakeAgent's catalogue; it must be the one the real agent sends.
    const auto store = agent::PreferenceStore::open(m_dir->filePath(u"preferences.json"_s), QString());
    QVERIFY2(store.ok(), qPrintable(store.error()));
    const QJsonArray real = store->describe().value(u"catalogue"_s).toArray();
    const QJsonArray fake = FakeAgent::defaultCatalogue();
    QCOMPARE(fake.size(), real.size());
    for (qsizetype i = 0; i < real.size(); ++i)
        QCOMPARE(json(fake.at(i)), json(real.at(i)));
}

void TestPreferencesDialog::roundTripsEveryPreference_data()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<QJsonValue>("value");
    for (const QJsonValue& entry : FakeAgent::defaultCatalogue()) {
        const QString key = entry.toObject().value(u"key"_s).toString();
        QTest::newRow(qPrintable(key)) << key << changedValue(entry.toObject());
    }
}

void TestPreferencesDialog::roundTripsEveryPreference()
{
    QFETCH(QString, key);
    QFETCH(QJsonValue, value);
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    QWidget* editor = dialog->editorFor(key);
    QVERIFY2(editor, qPrintable(key));
    QVERIFY(json(shownBy(editor)) != json(value));
    QVERIFY(editAsUser(editor, value));

    m_agent->clearRequests();
    QSignalSpy applied(dialog.get(), &PreferencesDialog::applied);
    QTest::mouseClick(dialog->button(QDialogButtonBox::Apply), Qt::LeftButton);
    QVERIFY(m_agent->waitForRequest(u"set_preferences"_s));
    QCOMPARE(json(m_agent->lastArgs(u"set_preferences"_s)), json(setRequest({{key, value}})));
    QTRY_COMPARE(applied.count(), 1);
    QCOMPARE(applied.first().first().toBool(), true);
    QCOMPARE(dialog->errorText(), QString());
    QVERIFY(dialog->isVisible()); // Apply keeps the window open
    QCOMPARE(json(m_agent->values().value(key)), json(value));
    QCOMPARE(json(dialog->changedValues()), json(QJsonObject{}));

    dialog.reset();
    auto reopened = openDialog();
    QVERIFY(reopened->isLoaded());
    QCOMPARE(json(shownBy(reopened->editorFor(key))), json(value));
}

void TestPreferencesDialog::editorsFollowTheCatalogue()
{
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    for (const QJsonValue& item : FakeAgent::defaultCatalogue()) {
        const QJsonObject entry = item.toObject();
        const QString key = entry.value(u"key"_s).toString();
        QWidget* editor = dialog->editorFor(key);
        QVERIFY2(editor, qPrintable(key));
        QCOMPARE(editor->toolTip(), entry.value(u"help"_s).toString());
        QCOMPARE(json(shownBy(editor)), json(entry.value(u"default"_s)));
        if (auto* spin = qobject_cast<QSpinBox*>(editor)) {
            QCOMPARE(spin->minimum(), entry.value(u"min"_s).toInt());
            QCOMPARE(spin->maximum(), entry.value(u"max"_s).toInt());
            QVERIFY2(spin->suffix().contains(entry.value(u"unit"_s).toString()), qPrintable(key));
        }
    }
    QCOMPARE(qobject_cast<QCheckBox*>(dialog->editorFor(u"only_when_idle"_s))->text(),
             catalogueEntry(u"only_when_idle"_s).value(u"label"_s).toString());
    auto* memory = qobject_cast<QSpinBox*>(dialog->editorFor(u"memory_idle_mb"_s));
    QCOMPARE(memory->text(), u"none"_s);
    auto* upload = qobject_cast<QSpinBox*>(dialog->editorFor(u"upload_kib_per_s"_s));
    QCOMPARE(upload->text(), u"no cap"_s);
    auto* gpu = qobject_cast<QComboBox*>(dialog->editorFor(u"gpu"_s));
    QCOMPARE(gpu->count(), 3);
    auto* schedule = qobject_cast<QPlainTextEdit*>(dialog->editorFor(u"schedule"_s));
    QVERIFY(schedule->placeholderText().contains(u"mon-fri 18:00-08:00"_s));
}

void TestPreferencesDialog::simplePageShowsIdleTimeInMinutes()
{
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    auto* minutes = qobject_cast<QDoubleSpinBox*>(dialog->simpleEditorFor(u"idle_seconds"_s));
    QVERIFY(minutes);
    QCOMPARE(minutes->value(), 3.0);
    auto* idleOnly = qobject_cast<QCheckBox*>(dialog->simpleEditorFor(u"only_when_idle"_s));
    QVERIFY(idleOnly);
    QVERIFY(idleOnly->isChecked());

    minutes->setValue(10);
    idleOnly->click();
    QCOMPARE(json(dialog->shownValue(u"idle_seconds"_s)), json(600)); // the Advanced page follows
    QCOMPARE(json(dialog->shownValue(u"only_when_idle"_s)), json(false));

    m_agent->clearRequests();
    dialog->apply();
    QVERIFY(m_agent->waitForRequest(u"set_preferences"_s));
    QCOMPARE(json(m_agent->lastArgs(u"set_preferences"_s)),
             json(setRequest({{u"idle_seconds"_s, 600}, {u"only_when_idle"_s, false}})));
}

void TestPreferencesDialog::lockedPreferencesAreDisabledAndSaySo()
{
    const QStringList locked{u"idle_seconds"_s, u"schedule"_s, u"gpu"_s};
    m_agent->setLocked(locked);
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    for (const QJsonValue& entry : FakeAgent::defaultCatalogue()) {
        const QString key = entry.toObject().value(u"key"_s).toString();
        const bool isLocked = locked.contains(key);
        QCOMPARE(dialog->editorFor(key)->isEnabled(), !isLocked);
        QLabel* note = dialog->lockNoteFor(key);
        QVERIFY(note);
        QCOMPARE(!note->isHidden(), isLocked);
        QCOMPARE(note->text(), u"Set by your organisation"_s);
    }
    QVERIFY(!dialog->setValue(u"idle_seconds"_s, 600));
    QVERIFY(!dialog->simpleEditorFor(u"idle_seconds"_s)->isEnabled());
    // None of the profile's keys is locked: the steps stay usable.
    QVERIFY(dialog->profileChoice()->button(Profile::Light)->isEnabled());
    QVERIFY(dialog->profileChoice()->lockNote()->isHidden());
}

void TestPreferencesDialog::aLockedProfileKeyDisablesTheSteps()
{
    m_agent->setLocked({u"cpu_share_percent"_s});
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    ProfileChoice* choice = dialog->profileChoice();
    QVERIFY(choice);
    for (Profile profile : {Profile::Light, Profile::Balanced, Profile::Full})
        QVERIFY(!choice->button(profile)->isEnabled());
    QVERIFY(choice->lockNote()->isVisible());
    QCOMPARE(choice->lockNote()->text(), u"Set by your organisation"_s);
}

void TestPreferencesDialog::stepsSendTheirValues_data()
{
    QTest::addColumn<Profile>("profile");
    QTest::addColumn<QJsonObject>("start");
    QTest::addColumn<QJsonObject>("sent");
    const QJsonObject light{
        {u"max_cores"_s, 1}, {u"cpu_share_percent"_s, 50}, {u"other_cpu_limit_percent"_s, 15}};
    // From the defaults (Balanced), only what differs is sent.
    QTest::newRow("Light") << Profile::Light << QJsonObject{} << light;
    QTest::newRow("Balanced") << Profile::Balanced << light
                              << QJsonObject{{u"max_cores"_s, 0},
                                             {u"cpu_share_percent"_s, 100},
                                             {u"other_cpu_limit_percent"_s, 25}};
    QTest::newRow("Full") << Profile::Full << QJsonObject{}
                          << QJsonObject{{u"max_cores"_s, 6}, {u"other_cpu_limit_percent"_s, 50}};
}

void TestPreferencesDialog::stepsSendTheirValues()
{
    QFETCH(Profile, profile);
    QFETCH(QJsonObject, start);
    QFETCH(QJsonObject, sent);
    m_agent->setValues(start);
    auto dialog = openDialog(6);
    QVERIFY(dialog->isLoaded());
    QVERIFY(dialog->profileChoice()->selected() != profile);
    QAbstractButton* step = dialog->profileChoice()->button(profile);
    QTest::mouseClick(step, Qt::LeftButton, {}, QPoint(8, step->height() / 2)); // on the round indicator
    QCOMPARE(dialog->profileChoice()->selectedName(), profileName(profile));

    m_agent->clearRequests();
    dialog->apply();
    QVERIFY(m_agent->waitForRequest(u"set_preferences"_s));
    QCOMPARE(json(m_agent->lastArgs(u"set_preferences"_s)), json(setRequest(sent)));
    const QJsonObject mapped = profileValues(profile, 6);
    for (auto it = mapped.begin(); it != mapped.end(); ++it)
        QCOMPARE(json(m_agent->values().value(it.key())), json(it.value()));

    dialog.reset();
    auto reopened = openDialog(6);
    QVERIFY(reopened->isLoaded());
    QCOMPARE(reopened->profileChoice()->selectedName(), profileName(profile));
    QVERIFY(reopened->profileChoice()->button(profile)->isChecked());
}

void TestPreferencesDialog::valuesMatchingNoStepShowCustom()
{
    m_agent->setValues({{u"max_cores"_s, 3}, {u"cpu_share_percent"_s, 70}});
    auto dialog = openDialog(6);
    QVERIFY(dialog->isLoaded());
    ProfileChoice* choice = dialog->profileChoice();
    QCOMPARE(choice->selectedName(), u"Custom"_s);
    for (Profile profile : {Profile::Light, Profile::Balanced, Profile::Full})
        QVERIFY(!choice->button(profile)->isChecked());

    // Advanced edits that land on a step select it; one more edit makes it Custom again.
    QVERIFY(dialog->setValue(u"max_cores"_s, 0));
    QVERIFY(dialog->setValue(u"cpu_share_percent"_s, 100));
    QCOMPARE(choice->selectedName(), u"Balanced"_s);
    QVERIFY(dialog->setValue(u"other_cpu_limit_percent"_s, 40));
    QCOMPARE(choice->selectedName(), u"Custom"_s);
    QVERIFY(!choice->button(Profile::Balanced)->isChecked());
}

void TestPreferencesDialog::aRefusedChangeIsShownAndKeepsTheWindowOpen()
{
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    // The organisation's policy changed while the window was open, and the dialog was not told.
    m_agent->setLocked({u"cache_mb"_s});
    QVERIFY(dialog->setValue(u"idle_seconds"_s, 600));
    QVERIFY(dialog->setValue(u"cache_mb"_s, 20480));

    QSignalSpy applied(dialog.get(), &PreferencesDialog::applied);
    QTest::mouseClick(dialog->button(QDialogButtonBox::Ok), Qt::LeftButton);
    QTRY_COMPARE(applied.count(), 1);
    QCOMPARE(applied.first().first().toBool(), false);
    QVERIFY(dialog->isVisible());
    QVERIFY2(dialog->errorText().contains(u"cache_mb is set by your organisation"_s),
             qPrintable(dialog->errorText()));
    QCOMPARE(dialog->highlightedKeys(), QStringList{u"cache_mb"_s});
    // All or nothing: the valid change was not made either, and is still in the window.
    QCOMPARE(json(m_agent->values().value(u"idle_seconds"_s)), json(180));
    QCOMPARE(json(dialog->changedValues()),
             json(QJsonObject{{u"idle_seconds"_s, 600}, {u"cache_mb"_s, 20480}}));

    // Editing the named field takes its highlight away.
    QVERIFY(dialog->setValue(u"cache_mb"_s, 10240));
    QCOMPARE(dialog->highlightedKeys(), QStringList{});
}

void TestPreferencesDialog::okClosesOnceSavedAndCancelSendsNothing()
{
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    QVERIFY(dialog->setValue(u"checkpoint_seconds"_s, 120));
    QTest::mouseClick(dialog->button(QDialogButtonBox::Ok), Qt::LeftButton);
    QTRY_VERIFY(!dialog->isVisible());
    QCOMPARE(dialog->result(), int(QDialog::Accepted));
    QCOMPARE(json(m_agent->values().value(u"checkpoint_seconds"_s)), json(120));

    auto cancelled = openDialog();
    QVERIFY(cancelled->isLoaded());
    QVERIFY(cancelled->setValue(u"checkpoint_seconds"_s, 300));
    m_agent->clearRequests();
    QTest::mouseClick(cancelled->button(QDialogButtonBox::Cancel), Qt::LeftButton);
    QVERIFY(!cancelled->isVisible());
    QCOMPARE(cancelled->result(), int(QDialog::Rejected));
    QVERIFY(drainClient());
    QCOMPARE(m_agent->receivedCommands(), QStringList{u"status"_s});
    QCOMPARE(json(m_agent->values().value(u"checkpoint_seconds"_s)), json(120));
}

void TestPreferencesDialog::eventsRefreshUntouchedFields()
{
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());
    QVERIFY(dialog->setValue(u"cache_mb"_s, 20480));
    m_agent->setValues({{u"idle_seconds"_s, 600}, {u"cache_mb"_s, 5000}});
    m_agent->setLocked({u"gpu"_s});
    m_agent->publishPreferences();
    QTRY_COMPARE(json(dialog->shownValue(u"idle_seconds"_s)), json(600));
    QCOMPARE(qobject_cast<QDoubleSpinBox*>(dialog->simpleEditorFor(u"idle_seconds"_s))->value(), 10.0);
    QCOMPARE(json(dialog->shownValue(u"cache_mb"_s)), json(20480)); // the user's edit stays
    QVERIFY(!dialog->editorFor(u"gpu"_s)->isEnabled());
    QCOMPARE(json(dialog->changedValues()), json(QJsonObject{{u"cache_mb"_s, 20480}}));
}

void TestPreferencesDialog::aPreferenceNewToTheDialogGetsAnEditor()
{
    QJsonArray catalogue = FakeAgent::defaultCatalogue();
    catalogue.append(QJsonObject{{u"key"_s, u"gpu_memory_mb"_s},
                                 {u"type"_s, u"int"_s},
                                 {u"default"_s, 0},
                                 {u"min"_s, 0},
                                 {u"max"_s, 65536},
                                 {u"unit"_s, u"MB"_s},
                                 {u"label"_s, u"GPU memory per subtask"_s},
                                 {u"help"_s, u"Memory cap on the GPU per subtask; 0: none."_s},
                                 {u"group"_s, u"advanced"_s}});
    catalogue.append(QJsonObject{{u"key"_s, u"quiet_hours"_s},
                                 {u"type"_s, u"time_range"_s},
                                 {u"default"_s, u"22:00-07:00"_s},
                                 {u"label"_s, u"Quiet hours"_s},
                                 {u"group"_s, u"advanced"_s}});
    m_agent->setCatalogue(catalogue);
    auto dialog = openDialog();
    QVERIFY(dialog->isLoaded());

    auto* gpuMemory = qobject_cast<QSpinBox*>(dialog->editorFor(u"gpu_memory_mb"_s));
    QVERIFY(gpuMemory);
    QCOMPARE(gpuMemory->maximum(), 65536);
    QCOMPARE(gpuMemory->toolTip(), u"Memory cap on the GPU per subtask; 0: none."_s);
    QVERIFY(editAsUser(gpuMemory, 2048));
    m_agent->clearRequests();
    dialog->apply();
    QVERIFY(m_agent->waitForRequest(u"set_preferences"_s));
    QCOMPARE(json(m_agent->lastArgs(u"set_preferences"_s)), json(setRequest({{u"gpu_memory_mb"_s, 2048}})));

    // A type this dialog cannot edit is shown, read-only.
    auto* quiet = qobject_cast<QLineEdit*>(dialog->editorFor(u"quiet_hours"_s));
    QVERIFY(quiet);
    QVERIFY(!quiet->isEnabled());
    QCOMPARE(quiet->text(), u"\"22:00-07:00\""_s);
}

QTEST_MAIN(TestPreferencesDialog)
#include "TestPreferencesDialog.moc"
