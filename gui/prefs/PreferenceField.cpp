#include "PreferenceField.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalBlocker>
#include <QSpinBox>

#include <algorithm>
#include <cmath>

using namespace Qt::StringLiterals;

namespace gleaner::gui {

namespace {

// What 0 means for keys where 0 switches a limit off (docs/desktop.md), shown instead of the number.
QString zeroText(const PreferenceSpec& spec)
{
    if (spec.min != 0)
        return {};
    if (spec.key.endsWith(u"_mb"))
        return u"none"_s;
    if (spec.key.endsWith(u"_kib_per_s"))
        return u"no cap"_s;
    if (spec.key == u"max_cores")
        return u"all but one"_s;
    return {};
}

QStringList linesOf(const QString& text)
{
    QStringList lines;
    for (const QString& line : text.split(u'\n')) {
        const QString trimmed = line.trimmed();
        if (!trimmed.isEmpty())
            lines << trimmed;
    }
    return lines;
}

QString compactJson(const QJsonValue& value)
{
    const QByteArray json = QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact);
    return QString::fromUtf8(json.mid(1, json.size() - 2));
}

} // namespace

PreferenceField::PreferenceField(const PreferenceSpec& spec, Presentation presentation, QWidget* parent)
    : QObject(parent), m_spec(spec), m_presentation(presentation)
{
    m_row = new QWidget(parent);
    // The note goes beside a one-line editor and under a list, which needs the width for its entries.
    QBoxLayout* layout = spec.type == PreferenceSpec::Type::StringList
                             ? static_cast<QBoxLayout*>(new QVBoxLayout(m_row))
                             : new QHBoxLayout(m_row);
    layout->setContentsMargins(0, 0, 0, 0);
    createEditor(m_row);
    m_editor->setToolTip(spec.help);
    m_editor->setObjectName(u"preference:"_s + spec.key);
    m_lockNote = new QLabel(tr("Set by your organisation"), m_row);
    m_lockNote->setObjectName(u"locked:"_s + spec.key);
    m_lockNote->setVisible(false);
    QFont font = m_lockNote->font();
    font.setItalic(true);
    m_lockNote->setFont(font);
    layout->addWidget(m_editor, 1);
    layout->addWidget(m_lockNote, 0, Qt::AlignTop | Qt::AlignLeft);
    display(spec.defaultValue);
}

void PreferenceField::createEditor(QWidget* parent)
{
    switch (m_spec.type) {
    case PreferenceSpec::Type::Bool: {
        auto* box = new QCheckBox(m_spec.label, parent);
        connect(box, &QCheckBox::toggled, this, &PreferenceField::edited);
        m_editor = box;
        return;
    }
    case PreferenceSpec::Type::Int:
        if (m_presentation == Presentation::Minutes) {
            auto* spin = new QDoubleSpinBox(parent);
            spin->setDecimals(1);
            spin->setRange(std::max(0.1, std::ceil(double(m_spec.min) / 6.0) / 10.0),
                           double(m_spec.max) / 60.0);
            spin->setSuffix(tr(" min"));
            connect(spin, &QDoubleSpinBox::valueChanged, this, &PreferenceField::edited);
            m_editor = spin;
        } else {
            auto* spin = new QSpinBox(parent);
            spin->setRange(int(m_spec.min), int(m_spec.max));
            if (!m_spec.unit.isEmpty())
                spin->setSuffix(u" "_s + m_spec.unit);
            spin->setSpecialValueText(zeroText(m_spec));
            connect(spin, &QSpinBox::valueChanged, this, &PreferenceField::edited);
            m_editor = spin;
        }
        return;
    case PreferenceSpec::Type::Enum: {
        auto* combo = new QComboBox(parent);
        for (const QString& choice : m_spec.choices)
            combo->addItem(choice, choice);
        connect(combo, &QComboBox::currentIndexChanged, this, &PreferenceField::edited);
        m_editor = combo;
        return;
    }
    case PreferenceSpec::Type::StringList: {
        auto* text = new QPlainTextEdit(parent);
        text->setPlaceholderText(m_spec.help);
        text->setTabChangesFocus(true);
        text->setFixedHeight(text->fontMetrics().lineSpacing() * 5);
        connect(text, &QPlainTextEdit::textChanged, this, &PreferenceField::edited);
        m_editor = text;
        return;
    }
    case PreferenceSpec::Type::Unknown:
        break;
    }
    auto* line = new QLineEdit(parent);
    line->setReadOnly(true);
    line->setEnabled(false);
    line->setToolTip(tr("This version of the tray app cannot edit a preference of type \"%1\"; use "
                        "gleaner-agent prefs to change it.")
                         .arg(m_spec.typeName));
    m_editor = line;
}

void PreferenceField::display(const QJsonValue& value)
{
    const QSignalBlocker blocker(m_editor);
    if (auto* box = qobject_cast<QCheckBox*>(m_editor)) {
        box->setChecked(value.toBool());
    } else if (auto* spin = qobject_cast<QSpinBox*>(m_editor)) {
        spin->setValue(int(value.toDouble()));
    } else if (auto* minutes = qobject_cast<QDoubleSpinBox*>(m_editor)) {
        minutes->setValue(value.toDouble() / 60.0);
    } else if (auto* combo = qobject_cast<QComboBox*>(m_editor)) {
        // A choice the catalogue does not list (an agent newer than its catalogue) is still shown as it is.
        if (combo->findData(value.toString()) < 0)
            combo->addItem(value.toString(), value.toString());
        combo->setCurrentIndex(combo->findData(value.toString()));
    } else if (auto* text = qobject_cast<QPlainTextEdit*>(m_editor)) {
        QStringList lines;
        for (const QJsonValue& item : value.toArray())
            lines << item.toString();
        text->setPlainText(lines.join(u'\n'));
    } else if (auto* line = qobject_cast<QLineEdit*>(m_editor)) {
        m_unknownValue = value;
        line->setText(compactJson(value));
    }
}

QJsonValue PreferenceField::value() const
{
    if (auto* box = qobject_cast<QCheckBox*>(m_editor))
        return box->isChecked();
    if (auto* spin = qobject_cast<QSpinBox*>(m_editor))
        return spin->value();
    if (auto* minutes = qobject_cast<QDoubleSpinBox*>(m_editor))
        return qBound(m_spec.min, qint64(std::llround(minutes->value() * 60.0)), m_spec.max);
    if (auto* combo = qobject_cast<QComboBox*>(m_editor))
        return combo->currentData().toString();
    if (auto* text = qobject_cast<QPlainTextEdit*>(m_editor))
        return QJsonArray::fromStringList(linesOf(text->toPlainText()));
    return m_unknownValue;
}

bool PreferenceField::setFromUser(const QJsonValue& value)
{
    if (!m_editor->isEnabled())
        return false;
    if (auto* box = qobject_cast<QCheckBox*>(m_editor)) {
        box->setChecked(value.toBool());
    } else if (auto* spin = qobject_cast<QSpinBox*>(m_editor)) {
        spin->setValue(int(value.toDouble()));
    } else if (auto* minutes = qobject_cast<QDoubleSpinBox*>(m_editor)) {
        minutes->setValue(value.toDouble() / 60.0);
    } else if (auto* combo = qobject_cast<QComboBox*>(m_editor)) {
        const int index = combo->findData(value.toString());
        if (index < 0)
            return false;
        combo->setCurrentIndex(index);
    } else if (auto* text = qobject_cast<QPlainTextEdit*>(m_editor)) {
        QStringList lines;
        for (const QJsonValue& item : value.toArray())
            lines << item.toString();
        text->setPlainText(lines.join(u'\n'));
    } else {
        return false;
    }
    return true;
}

void PreferenceField::setLocked(bool locked, const QString& policyFile)
{
    m_locked = locked;
    m_editor->setEnabled(!locked && m_spec.type != PreferenceSpec::Type::Unknown);
    m_lockNote->setVisible(locked);
    QString why;
    if (locked && policyFile.isEmpty())
        why = tr("Your organisation set this; ask your administrator to change it.");
    else if (locked)
        why = tr("Your organisation set this in %1; ask your administrator to change it.").arg(policyFile);
    m_lockNote->setToolTip(why);
}

void PreferenceField::setHighlighted(bool highlighted)
{
    if (highlighted == m_highlighted)
        return;
    m_highlighted = highlighted;
    m_editor->setStyleSheet(highlighted ? u"background-color: #ffd7d7;"_s : QString());
}

} // namespace gleaner::gui
