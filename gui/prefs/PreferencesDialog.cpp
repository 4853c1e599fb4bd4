#include "PreferencesDialog.h"

#include "PreferenceField.h"
#include "control/ControlClient.h"

#include <QAbstractButton>
#include <QFormLayout>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QTabWidget>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <utility>

using namespace Qt::StringLiterals;

namespace gleaner::gui {

namespace {

// Whether an error message names `key` as a whole word ("idle_seconds", not the "idle" in "only_when_idle").
bool mentions(const QString& message, const QString& key)
{
    const QRegularExpression word(u"(?<![A-Za-z0-9_])"_s + QRegularExpression::escape(key) +
                                  u"(?![A-Za-z0-9_])"_s);
    return word.match(message).hasMatch();
}

QStringList stringsOf(const QJsonValue& value)
{
    QStringList strings;
    for (const QJsonValue& item : value.toArray())
        strings << item.toString();
    return strings;
}

} // namespace

PreferencesDialog::PreferencesDialog(agent::ControlClient& client, QWidget* parent)
    : QDialog(parent), m_client(client), m_tabs(new QTabWidget(this)), m_message(new QLabel(this)),
      m_buttons(new QDialogButtonBox(
          QDialogButtonBox::Ok | QDialogButtonBox::Apply | QDialogButtonBox::Cancel, this)),
      m_machineCores(std::max(1, QThread::idealThreadCount()))
{
    setWindowTitle(tr("Gleaner preferences"));
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_tabs, 1);
    m_message->setObjectName(u"error"_s);
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_message->setStyleSheet(u"color: #b71c1c;"_s);
    m_message->setVisible(false);
    layout->addWidget(m_message);
    layout->addWidget(m_buttons);

    auto* waiting = new QLabel(tr("Reading the preferences from gleaner-agent…"));
    waiting->setAlignment(Qt::AlignCenter);
    m_tabs->addTab(waiting, tr("Simple"));
    button(QDialogButtonBox::Apply)->setEnabled(false);

    connect(m_buttons, &QDialogButtonBox::accepted, this, &PreferencesDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &PreferencesDialog::reject);
    connect(button(QDialogButtonBox::Apply), &QAbstractButton::clicked, this, &PreferencesDialog::apply);
    connect(&m_client, &agent::ControlClient::replyReceived, this, &PreferencesDialog::onReply);
    connect(&m_client, &agent::ControlClient::eventReceived, this, &PreferencesDialog::onEvent);
    connect(&m_client, &agent::ControlClient::connected, this, &PreferencesDialog::reload);
    connect(&m_client, &agent::ControlClient::disconnected, this, [this] {
        showError(tr("Lost the connection to gleaner-agent; reconnecting. Your changes are kept."));
    });
    if (m_client.isConnected())
        reload();
}

PreferencesDialog::~PreferencesDialog() = default;

void PreferencesDialog::reload()
{
    m_loadId = m_client.send(u"preferences"_s);
}

void PreferencesDialog::setMachineCores(int cores)
{
    m_machineCores = std::max(1, cores);
    updateProfile();
}

QWidget* PreferencesDialog::editorFor(const QString& key) const
{
    const PreferenceField* field = m_advanced.value(key);
    return field ? field->editor() : nullptr;
}

QWidget* PreferencesDialog::simpleEditorFor(const QString& key) const
{
    const PreferenceField* field = m_simple.value(key);
    return field ? field->editor() : nullptr;
}

QLabel* PreferencesDialog::lockNoteFor(const QString& key) const
{
    const PreferenceField* field = m_advanced.value(key);
    return field ? field->lockNote() : nullptr;
}

bool PreferencesDialog::setValue(const QString& key, const QJsonValue& value)
{
    PreferenceField* field = m_advanced.value(key);
    return field && field->setFromUser(value);
}

QJsonValue PreferencesDialog::shownValue(const QString& key) const
{
    const PreferenceField* field = m_advanced.value(key);
    return field ? field->value() : QJsonValue(QJsonValue::Undefined);
}

QJsonObject PreferencesDialog::changedValues() const
{
    QJsonObject changes;
    for (auto it = m_edits.begin(); it != m_edits.end(); ++it)
        if (it.value() != m_agentValues.value(it.key()))
            changes.insert(it.key(), it.value());
    return changes;
}

QString PreferencesDialog::errorText() const
{
    return m_message->text();
}

QStringList PreferencesDialog::highlightedKeys() const
{
    QStringList keys;
    for (const PreferenceSpec& spec : m_specs) {
        const PreferenceField* advanced = m_advanced.value(spec.key);
        const PreferenceField* simple = m_simple.value(spec.key);
        if ((advanced && advanced->isHighlighted()) || (simple && simple->isHighlighted()))
            keys << spec.key;
    }
    return keys;
}

QAbstractButton* PreferencesDialog::button(QDialogButtonBox::StandardButton which) const
{
    return m_buttons->button(which);
}

void PreferencesDialog::apply()
{
    if (!m_loaded || m_applyId >= 0)
        return;
    const QJsonObject changes = changedValues();
    if (changes.isEmpty()) {
        showError({});
        Q_EMIT applied(true);
        if (std::exchange(m_acceptAfterApply, false))
            QDialog::accept();
        return;
    }
    setBusy(true);
    m_applyId = m_client.send(u"set_preferences"_s, {{u"values"_s, changes}});
}

void PreferencesDialog::accept()
{
    if (!m_loaded) {
        QDialog::accept();
        return;
    }
    m_acceptAfterApply = true;
    apply();
}

void PreferencesDialog::onReply(qint64 id, bool ok, const QJsonObject& result, const QString& error)
{
    if (id == m_loadId) {
        m_loadId = -1;
        if (ok)
            build(result);
        else
            showError(tr("Could not read the preferences: %1").arg(error));
        return;
    }
    if (id != m_applyId)
        return;
    m_applyId = -1;
    setBusy(false);
    if (!ok) {
        m_acceptAfterApply = false;
        showError(tr("Not saved: %1").arg(error));
        bool onSimplePage = m_tabs->currentIndex() == 0;
        for (const PreferenceSpec& spec : m_specs) {
            if (!mentions(error, spec.key))
                continue;
            for (PreferenceField* field : {m_advanced.value(spec.key), m_simple.value(spec.key)})
                if (field)
                    field->setHighlighted(true);
            onSimplePage = onSimplePage && (m_simple.contains(spec.key) || profileKeys().contains(spec.key));
        }
        if (!onSimplePage)
            m_tabs->setCurrentIndex(1); // the named preference is only on the Advanced page
        Q_EMIT applied(false);
        return;
    }
    showError({});
    refreshFromAgent(result.value(u"values"_s).toObject(), stringsOf(result.value(u"locked"_s)));
    Q_EMIT applied(true);
    if (std::exchange(m_acceptAfterApply, false))
        QDialog::accept();
}

void PreferencesDialog::onEvent(const QJsonObject& event)
{
    if (!m_loaded || event.value(u"event"_s).toString() != u"preferences")
        return;
    const QJsonObject values =
        event.contains(u"values"_s) ? event.value(u"values"_s).toObject() : m_agentValues;
    const QStringList locked = event.contains(u"locked"_s) ? stringsOf(event.value(u"locked"_s)) : m_locked;
    refreshFromAgent(values, locked);
}

void PreferencesDialog::build(const QJsonObject& preferences)
{
    const QJsonArray catalogue = preferences.value(u"catalogue"_s).toArray();
    m_policyFile = preferences.value(u"policy_file"_s).toString();
    // The same catalogue (a reconnection to the same agent) keeps the pages and the user's edits.
    if (!m_loaded || catalogue != m_catalogueJson) {
        m_catalogueJson = catalogue;
        m_specs = parsePreferenceCatalogue(catalogue);
        m_edits = {};
        rebuildPages();
    }
    showError({});
    refreshFromAgent(preferences.value(u"values"_s).toObject(), stringsOf(preferences.value(u"locked"_s)));
    m_loaded = true;
    button(QDialogButtonBox::Apply)->setEnabled(true);
    Q_EMIT loaded();
}

void PreferencesDialog::rebuildPages()
{
    m_advanced.clear();
    m_simple.clear();
    m_profile = nullptr;
    m_advancedPage = nullptr;
    while (m_tabs->count() > 0) {
        QWidget* page = m_tabs->widget(0);
        m_tabs->removeTab(0);
        delete page;
    }

    auto* simple = new QWidget;
    auto* simpleLayout = new QVBoxLayout(simple);
    QStringList keys;
    for (const PreferenceSpec& spec : m_specs)
        keys << spec.key;
    const QStringList profile = profileKeys();
    if (std::all_of(profile.begin(), profile.end(), [&](const QString& key) { return keys.contains(key); })) {
        m_profile = new ProfileChoice(simple);
        connect(m_profile, &ProfileChoice::chosen, this, &PreferencesDialog::onProfileChosen);
        simpleLayout->addWidget(m_profile);
    }
    auto* simpleForm = new QFormLayout;
    simpleLayout->addLayout(simpleForm);
    for (const PreferenceSpec& spec : m_specs) {
        // The steps stand for the profile's keys on this page; their own editors are on the Advanced page.
        if (!spec.isSimple() || (m_profile && profile.contains(spec.key)))
            continue;
        PreferenceField* field = addField(spec, true, simple);
        if (spec.type == PreferenceSpec::Type::Bool)
            simpleForm->addRow(field->row());
        else
            simpleForm->addRow(spec.label, field->row());
    }
    simpleLayout->addStretch(1);
    auto* more = new QLabel(tr("Every setting is on the Advanced page."), simple);
    more->setEnabled(false);
    simpleLayout->addWidget(more);
    m_tabs->addTab(simple, tr("Simple"));

    auto* scroll = new QScrollArea;
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_advancedPage = scroll;
    auto* advanced = new QWidget;
    auto* advancedForm = new QFormLayout(advanced);
    for (const PreferenceSpec& spec : m_specs) {
        PreferenceField* field = addField(spec, false, advanced);
        if (spec.type == PreferenceSpec::Type::Bool) {
            advancedForm->addRow(field->row());
        } else {
            auto* label = new QLabel(spec.label, advanced);
            label->setToolTip(spec.help);
            label->setBuddy(field->editor());
            advancedForm->addRow(label, field->row());
        }
    }
    scroll->setWidget(advanced);
    m_tabs->addTab(scroll, tr("Advanced"));
}

PreferenceField* PreferencesDialog::addField(const PreferenceSpec& spec, bool simple, QWidget* page)
{
    // On the simple page a duration in seconds reads better in minutes ("Start after idle for 3 min").
    const bool minutes = simple && spec.type == PreferenceSpec::Type::Int && spec.unit == u"s";
    auto* field = new PreferenceField(
        spec, minutes ? PreferenceField::Presentation::Minutes : PreferenceField::Presentation::Plain, page);
    connect(field, &PreferenceField::edited, this, [this, field] { onFieldEdited(field); });
    (simple ? m_simple : m_advanced).insert(spec.key, field);
    return field;
}

void PreferencesDialog::refreshFromAgent(const QJsonObject& values, const QStringList& locked)
{
    m_agentValues = values;
    m_locked = locked;
    // An edit the agent now agrees with is no change; a newly locked key cannot be changed, so its edit goes.
    for (const QString& key : m_edits.keys())
        if (locked.contains(key) || m_edits.value(key) == values.value(key))
            m_edits.remove(key);
    for (QHash<QString, PreferenceField*>* fields : {&m_advanced, &m_simple}) {
        for (PreferenceField* field : std::as_const(*fields)) {
            field->setLocked(locked.contains(field->key()), m_policyFile);
            if (!m_edits.contains(field->key()) && values.contains(field->key()))
                field->display(values.value(field->key()));
        }
    }
    if (m_profile) {
        const QStringList profile = profileKeys();
        m_profile->setLocked(std::any_of(profile.begin(), profile.end(),
                                         [&](const QString& key) { return locked.contains(key); }));
    }
    updateProfile();
    fitAdvancedPage();
}

void PreferencesDialog::fitAdvancedPage()
{
    // The Advanced page scrolls down, never sideways: it is as wide as its widest row, lock notes included.
    if (!m_advancedPage || !m_advancedPage->widget())
        return;
    QWidget* content = m_advancedPage->widget();
    content->layout()->invalidate();
    m_advancedPage->setMinimumWidth(content->sizeHint().width() +
                                    m_advancedPage->verticalScrollBar()->sizeHint().width() +
                                    2 * m_advancedPage->frameWidth());
    if (!m_loaded) // the first build grows the window from the "Reading..." placeholder; later the user's
                   // size stays
        resize(std::max(width(), minimumSizeHint().width()), std::max(height(), 560));
}

void PreferencesDialog::onFieldEdited(PreferenceField* field)
{
    const QJsonValue value = field->value();
    setEdit(field->key(), value);
    for (PreferenceField* other : {m_advanced.value(field->key()), m_simple.value(field->key())}) {
        if (!other)
            continue;
        other->setHighlighted(false);
        if (other != field)
            other->display(value);
    }
    updateProfile();
}

void PreferencesDialog::setEdit(const QString& key, const QJsonValue& value)
{
    if (value == m_agentValues.value(key))
        m_edits.remove(key);
    else
        m_edits.insert(key, value);
}

void PreferencesDialog::onProfileChosen(Profile profile)
{
    const QJsonObject values = profileValues(profile, m_machineCores);
    for (auto it = values.begin(); it != values.end(); ++it) {
        setEdit(it.key(), it.value());
        for (PreferenceField* field : {m_advanced.value(it.key()), m_simple.value(it.key())})
            if (field)
                field->display(it.value());
    }
    updateProfile();
}

void PreferencesDialog::updateProfile()
{
    if (!m_profile)
        return;
    QJsonObject values;
    for (const QString& key : profileKeys())
        values.insert(key, effectiveValue(key));
    m_profile->display(matchProfile(values, m_machineCores));
}

QJsonValue PreferencesDialog::effectiveValue(const QString& key) const
{
    return m_edits.contains(key) ? m_edits.value(key) : m_agentValues.value(key);
}

void PreferencesDialog::showError(const QString& message)
{
    m_message->setText(message);
    m_message->setVisible(!message.isEmpty());
    // A new message replaces the last one, and with it what the last one named.
    for (QHash<QString, PreferenceField*>* fields : {&m_advanced, &m_simple})
        for (PreferenceField* field : std::as_const(*fields))
            field->setHighlighted(false);
}

void PreferencesDialog::setBusy(bool busy)
{
    button(QDialogButtonBox::Ok)->setEnabled(!busy);
    button(QDialogButtonBox::Apply)->setEnabled(!busy);
}

} // namespace gleaner::gui
