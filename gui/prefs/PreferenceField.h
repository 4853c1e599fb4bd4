#pragma once
// The editor of one preference, made from its catalogue entry: bool -> QCheckBox, int -> QSpinBox (the unit
// as suffix; 0 of a `_mb` or `_kib_per_s` key reads "none" / "no cap"), enum -> QComboBox, string_list ->
// QPlainTextEdit (one entry per line), an unknown type -> a read-only line of its JSON. A locked preference's
// editor is disabled and "Set by your organisation" shows beside it.
//
// edited() fires whenever the editor's value changes other than through display(): the user typing, or a test
// setting the widget. display() shows the agent's value without firing it.

#include "PreferenceSpec.h"

#include <QJsonValue>
#include <QObject>

class QLabel;
class QWidget;

namespace gleaner::gui {

class PreferenceField : public QObject
{
    Q_OBJECT
public:
    // Minutes: an int in seconds shown and typed in minutes (the simple page's "Start after idle for").
    enum class Presentation
    {
        Plain,
        Minutes
    };

    PreferenceField(const PreferenceSpec& spec, Presentation presentation, QWidget* parent);

    const PreferenceSpec& spec() const { return m_spec; }
    QString key() const { return m_spec.key; }
    // The input widget (QCheckBox, QSpinBox, QDoubleSpinBox, QComboBox, QPlainTextEdit or QLineEdit).
    QWidget* editor() const { return m_editor; }
    // The editor with its lock note, for a form's field column.
    QWidget* row() const { return m_row; }
    QLabel* lockNote() const { return m_lockNote; }

    // Shows the agent's value without firing edited().
    void display(const QJsonValue& value);
    // The value the editor holds, as JSON of the preference's type.
    QJsonValue value() const;
    // Puts `value` into the editor as the user would (fires edited()); false when it is locked or read-only.
    bool setFromUser(const QJsonValue& value);

    void setLocked(bool locked, const QString& policyFile);
    bool isLocked() const { return m_locked; }
    // Marks the editor as the one a refused change named.
    void setHighlighted(bool highlighted);
    bool isHighlighted() const { return m_highlighted; }

Q_SIGNALS:
    void edited();

private:
    void createEditor(QWidget* parent);

    PreferenceSpec m_spec;
    Presentation m_presentation;
    QWidget* m_row = nullptr;
    QWidget* m_editor = nullptr;
    QLabel* m_lockNote = nullptr;
    QJsonValue m_unknownValue; // what a read-only editor of an unknown type shows
    bool m_locked = false;
    bool m_highlighted = false;
};

} // namespace gleaner::gui
