#pragma once
// The simple page's three-step "how much of this computer" choice. Each step stands for three preferences:
//
//   step       max_cores            cpu_share_percent   other_cpu_limit_percent
//   Light      1                    50                  15
//   Balanced   0 (all but one)      100                 25      (the agent's defaults)
//   Full       the machine's cores  100                 50
//
// Values that match no step show "Custom" with no step selected (they were set on the Advanced page or by an
// organisation). When an organisation locks any of the three keys the choice is disabled and says "Set by
// your organisation".

#include <QJsonObject>
#include <QStringList>
#include <QWidget>

#include <optional>

class QAbstractButton;
class QButtonGroup;
class QLabel;

namespace gleaner::gui {

enum class Profile
{
    Light,
    Balanced,
    Full
};

// The keys a profile sets.
QStringList profileKeys();
// The values of a step; `machineCores` is Full's max_cores.
QJsonObject profileValues(Profile profile, int machineCores);
// The step whose values `values` hold (other keys are ignored), if any.
std::optional<Profile> matchProfile(const QJsonObject& values, int machineCores);
// "Light", "Balanced", "Full".
QString profileName(Profile profile);

class ProfileChoice : public QWidget
{
    Q_OBJECT
public:
    explicit ProfileChoice(QWidget* parent = nullptr);

    // Shows the step without firing chosen(); nullopt shows "Custom".
    void display(std::optional<Profile> profile);
    std::optional<Profile> selected() const { return m_selected; }
    // "Light", "Balanced", "Full" or "Custom": what the page shows.
    QString selectedName() const;
    void setLocked(bool locked);
    QAbstractButton* button(Profile profile) const;
    QLabel* lockNote() const { return m_lockNote; }

Q_SIGNALS:
    // The user picked a step.
    void chosen(Profile profile);

private:
    QButtonGroup* m_group;
    QLabel* m_customNote;
    QLabel* m_lockNote;
    std::optional<Profile> m_selected;
};

} // namespace gleaner::gui
