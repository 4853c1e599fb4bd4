#pragma once
// The tray app's preferences window (docs/desktop.md, "Preferences"). It holds no list of preferences: on
// opening it asks the agent for `preferences` and builds its pages from the reply's catalogue, so a
// preference added to the agent appears here without changing this class.
//
// - Simple page: a Light / Balanced / Full choice (ProfileChoice.h) standing for
//       Light    = {max_cores: 1, cpu_share_percent: 50,  other_cpu_limit_percent: 15}
//       Balanced = {max_cores: 0, cpu_share_percent: 100, other_cpu_limit_percent: 25}   (the defaults)
//       Full     = {max_cores: machine cores, cpu_share_percent: 100, other_cpu_limit_percent: 50}
//   ("Custom" when the values match none; disabled when any of the three is locked), then the catalogue's
//   `simple` entries ("Only when I'm away (idle)", "Start after idle for" shown in minutes).
// - Advanced page: an editor for every catalogue entry (PreferenceField.h).
// A locked preference is disabled and says "Set by your organisation". OK / Apply send `set_preferences` with
// only the values that differ from the agent's; a refused change shows the agent's message in the window,
// highlights the preference it names and keeps the window open. Cancel discards. While open, `preferences`
// events refresh the values and locks of the fields the user has not touched (the client should be
// subscribed), and a reconnection reloads.

#include "PreferenceSpec.h"
#include "ProfileChoice.h"

#include <QDialog>
#include <QDialogButtonBox>
#include <QHash>
#include <QJsonArray>
#include <QJsonObject>
#include <QJsonValue>
#include <QList>
#include <QStringList>

class QAbstractButton;
class QLabel;
class QScrollArea;
class QTabWidget;

namespace gleaner::agent {
class ControlClient;
}

namespace gleaner::gui {

class PreferenceField;

class PreferencesDialog : public QDialog
{
    Q_OBJECT
public:
    // `client` must outlive the dialog. Create one dialog per opening: it loads the preferences at once (or
    // as soon as the client connects).
    explicit PreferencesDialog(agent::ControlClient& client, QWidget* parent = nullptr);
    ~PreferencesDialog() override;

    // Asks the agent for the preferences again.
    void reload();
    // Full's max_cores; QThread::idealThreadCount() unless set (the tray may pass status policy.cores).
    void setMachineCores(int cores);

    // The catalogue has been received and the pages built.
    bool isLoaded() const { return m_loaded; }
    // The Advanced page's editor of `key` (see PreferenceField.h for the widget types); nullptr if none.
    QWidget* editorFor(const QString& key) const;
    // The Simple page's editor of a `simple` key (idle_seconds: a QDoubleSpinBox in minutes); nullptr if
    // none.
    QWidget* simpleEditorFor(const QString& key) const;
    // The "Set by your organisation" note beside the Advanced page's editor of `key`.
    QLabel* lockNoteFor(const QString& key) const;
    ProfileChoice* profileChoice() const { return m_profile; }
    // Puts `value` into the Advanced page's editor as the user would; false when the key is unknown, locked
    // or the value cannot be shown.
    bool setValue(const QString& key, const QJsonValue& value);
    // What the Advanced page's editor of `key` shows.
    QJsonValue shownValue(const QString& key) const;
    // What Apply would send: the edited values that differ from the agent's.
    QJsonObject changedValues() const;
    // The message shown in the window (a refused change, an unreachable agent), empty when none.
    QString errorText() const;
    // The preferences a refused change named, highlighted in the window.
    QStringList highlightedKeys() const;
    QAbstractButton* button(QDialogButtonBox::StandardButton which) const;

public Q_SLOTS:
    // Sends the changed values (the Apply button).
    void apply();
    // Applies, then closes once the agent accepted (the OK button).
    void accept() override;

Q_SIGNALS:
    // The pages were built (or rebuilt) from the agent's reply.
    void loaded();
    // The agent answered an apply (ok false: refused, the error is shown).
    void applied(bool ok);

private:
    void onReply(qint64 id, bool ok, const QJsonObject& result, const QString& error);
    void onEvent(const QJsonObject& event);
    void build(const QJsonObject& preferences);
    void rebuildPages();
    PreferenceField* addField(const PreferenceSpec& spec, bool simple, QWidget* page);
    void refreshFromAgent(const QJsonObject& values, const QStringList& locked);
    void onFieldEdited(PreferenceField* field);
    void setEdit(const QString& key, const QJsonValue& value);
    void onProfileChosen(Profile profile);
    void updateProfile();
    QJsonValue effectiveValue(const QString& key) const;
    void fitAdvancedPage();
    void showError(const QString& message);
    void setBusy(bool busy);

    agent::ControlClient& m_client;
    QTabWidget* m_tabs;
    QLabel* m_message;
    QDialogButtonBox* m_buttons;
    ProfileChoice* m_profile = nullptr;
    QScrollArea* m_advancedPage = nullptr;

    QJsonArray m_catalogueJson;
    QList<PreferenceSpec> m_specs;
    QHash<QString, PreferenceField*> m_advanced;
    QHash<QString, PreferenceField*> m_simple;
    QJsonObject m_agentValues;
    QStringList m_locked;
    QString m_policyFile;
    QJsonObject m_edits; // the user's values, by key, that may differ from the agent's
    int m_machineCores;
    qint64 m_loadId = -1;
    qint64 m_applyId = -1;
    bool m_loaded = false;
    bool m_acceptAfterApply = false;
};

} // namespace gleaner::gui
