#pragma once
// Where the preferences come from and where the user's changes go. Four layers, each over the one before:
//
//   the defaults (Preferences::catalogue())
//   < the organisation's values that are not locked (the policy file's "preferences")
//   < the user's own values (DATA_DIR/preferences.json)
//   < the organisation's locked values (a key in the policy file's "locked": its "preferences" value, or the
//     default when it names none)
//
// The policy file (docs/desktop.md, "The organisation's policy file") is never silently ignored: one that
// exists but cannot be read or parsed, an unknown key (also at the top level, where a typo such as "lockd"
// would otherwise unlock everything) or a bad value fails open(). The user's file is the user's own: when it
// is broken, it is kept aside as preferences.json.broken-<ms> and the agent starts with what could be saved
// of it.
//
// The user's file is a JSON object holding only the keys the user changed, so a later change of a default or
// of the organisation's value shows through every key the user left alone.

#include "Preferences.h"
#include "Result.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

namespace gleaner::agent {

class PreferenceStore
{
public:
    // `userFile` may be missing (no user values yet); its folder is created on the first set(). `policyFile`
    // may be missing or empty (no organisation policy). Fails, naming the file and the key, on a policy file
    // that cannot be read or parsed, holds an unknown key or a bad value, or locks a key that does not exist.
    // A user file that cannot be parsed is renamed to `<userFile>.broken-<ms>`; one with some bad or unknown
    // keys is renamed the same way and rewritten with its good keys. Either way warnings() says what
    // happened.
    static Result<PreferenceStore> open(const QString& userFile, const QString& policyFile);

    // $GLEANER_POLICY_FILE when set and not empty, else /etc/gleaner/policy.json.
    static QString defaultPolicyFile();

    const Preferences& current() const { return m_current; }
    // The locked keys, in the catalogue's order.
    QStringList locked() const { return m_locked; }
    bool isLocked(const QString& key) const { return m_locked.contains(key); }
    // What open() had to repair in the user's file, one sentence each, for the log and the tray app.
    QStringList warnings() const { return m_warnings; }
    QString userFile() const { return m_userFile; }
    QString policyFile() const { return m_policyFile; }

    // Changes the user's values, all or nothing: every key is validated and checked against the locks before
    // anything changes, and a locked key may only be "set" to the value it already has (a form sent back
    // whole). A null value forgets the user's own value, so the organisation's or the default shows again. A
    // key set to what the layers below it give is dropped from the user's file rather than stored, for the
    // same reason. The file is replaced atomically, readable by its owner only. Returns whether the effective
    // values changed.
    Result<bool> set(const QJsonObject& values);

    // Reads the policy file again (SIGHUP, or the file changed): all or nothing. A policy that no longer parses
    // leaves everything as it was and fails, naming the file and the key, so a typo made while the agent runs
    // never lifts a lock. Returns whether the effective values or the locks changed.
    Result<bool> reloadPolicy();

    // The preferences object of the control socket (docs/desktop.md): values, locked, policy_file and the
    // catalogue with each key's type, default, limits or choices, unit, label, help and group.
    QJsonObject describe() const;

private:
    PreferenceStore() = default;
    // Stacks the layers; the layers hold only validated values, so this cannot fail.
    Preferences compose(const QJsonObject& userValues) const;
    // The value `key` has without the user's layer: the organisation's, else the default.
    QJsonValue valueBelowUser(const QString& key) const;
    Result<void> loadPolicy();
    void loadUserFile();
    Result<void> writeUserFile(const QJsonObject& values) const;

    QString m_userFile;
    QString m_policyFile;
    QJsonObject m_organisation; // validated
    QStringList m_locked;
    QJsonObject m_user; // validated; may hold locked keys, which then have no effect
    Preferences m_current;
    QStringList m_warnings;
};

} // namespace gleaner::agent
