#include "ProfileChoice.h"

#include <QButtonGroup>
#include <QJsonValue>
#include <QLabel>
#include <QRadioButton>
#include <QVBoxLayout>

#include <algorithm>

using namespace Qt::StringLiterals;

namespace gleaner::gui {

namespace {

constexpr Profile kProfiles[] = {Profile::Light, Profile::Balanced, Profile::Full};

QString explanation(Profile profile)
{
    switch (profile) {
    case Profile::Light:
        return ProfileChoice::tr("One core at half pace; stops as soon as your programs use 15% of the CPU.");
    case Profile::Balanced:
        return ProfileChoice::tr("All cores but one; stops when your programs use a quarter of the CPU.");
    case Profile::Full:
        return ProfileChoice::tr("Every core at full pace; stops only when your programs use half the CPU.");
    }
    return {};
}

} // namespace

QStringList profileKeys()
{
    return {u"max_cores"_s, u"cpu_share_percent"_s, u"other_cpu_limit_percent"_s};
}

QJsonObject profileValues(Profile profile, int machineCores)
{
    switch (profile) {
    case Profile::Light:
        return {{u"max_cores"_s, 1}, {u"cpu_share_percent"_s, 50}, {u"other_cpu_limit_percent"_s, 15}};
    case Profile::Balanced:
        return {{u"max_cores"_s, 0}, {u"cpu_share_percent"_s, 100}, {u"other_cpu_limit_percent"_s, 25}};
    case Profile::Full:
        return {{u"max_cores"_s, std::max(1, machineCores)},
                {u"cpu_share_percent"_s, 100},
                {u"other_cpu_limit_percent"_s, 50}};
    }
    return {};
}

std::optional<Profile> matchProfile(const QJsonObject& values, int machineCores)
{
    for (Profile profile : kProfiles) {
        const QJsonObject wanted = profileValues(profile, machineCores);
        bool matches = true;
        for (auto it = wanted.begin(); it != wanted.end(); ++it)
            matches = matches && values.value(it.key()).toDouble(-1) == it.value().toDouble();
        if (matches)
            return profile;
    }
    return std::nullopt;
}

QString profileName(Profile profile)
{
    switch (profile) {
    case Profile::Light:
        return ProfileChoice::tr("Light");
    case Profile::Balanced:
        return ProfileChoice::tr("Balanced");
    case Profile::Full:
        return ProfileChoice::tr("Full");
    }
    return {};
}

ProfileChoice::ProfileChoice(QWidget* parent)
    : QWidget(parent), m_group(new QButtonGroup(this)), m_customNote(new QLabel(this)),
      m_lockNote(new QLabel(tr("Set by your organisation"), this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* title = new QLabel(tr("How much of this computer Gleaner may use:"), this);
    layout->addWidget(title);
    for (Profile profile : kProfiles) {
        auto* button = new QRadioButton(profileName(profile), this);
        button->setObjectName(u"profile:"_s + profileName(profile));
        m_group->addButton(button, int(profile));
        auto* line = new QLabel(explanation(profile), this);
        line->setWordWrap(true);
        line->setIndent(24);
        line->setEnabled(false); // greyed: a caption, not a control
        layout->addWidget(button);
        layout->addWidget(line);
    }
    m_customNote->setText(tr("Custom: your settings on the Advanced page match none of these."));
    m_customNote->setWordWrap(true);
    layout->addWidget(m_customNote);
    QFont italic = m_lockNote->font();
    italic.setItalic(true);
    m_lockNote->setFont(italic);
    m_lockNote->setVisible(false);
    layout->addWidget(m_lockNote);
    connect(m_group, &QButtonGroup::idClicked, this, [this](int id) {
        m_selected = Profile(id);
        m_customNote->setVisible(false);
        Q_EMIT chosen(Profile(id));
    });
    display(std::nullopt);
}

void ProfileChoice::display(std::optional<Profile> profile)
{
    m_selected = profile;
    if (profile) {
        m_group->button(int(*profile))->setChecked(true);
    } else if (QAbstractButton* checked = m_group->checkedButton()) {
        // An exclusive group never unchecks its last button; lift that for a moment.
        m_group->setExclusive(false);
        checked->setChecked(false);
        m_group->setExclusive(true);
    }
    m_customNote->setVisible(!profile);
}

QString ProfileChoice::selectedName() const
{
    return m_selected ? profileName(*m_selected) : tr("Custom");
}

void ProfileChoice::setLocked(bool locked)
{
    for (QAbstractButton* button : m_group->buttons())
        button->setEnabled(!locked);
    m_lockNote->setVisible(locked);
}

QAbstractButton* ProfileChoice::button(Profile profile) const
{
    return m_group->button(int(profile));
}

} // namespace gleaner::gui
