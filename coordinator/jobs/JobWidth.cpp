#include "jobs/JobWidth.h"

#include <QJsonArray>

#include <algorithm>
#include <cmath>

namespace gleaner::coordinator {
namespace {

int agentsFor(double noiseScale)
{
    return int(std::clamp(std::round(noiseScale), double(JobWidth::kMinAgents), double(JobWidth::kMaxAgents)));
}

} // namespace

void JobWidth::measured(qint64 version, double value, qint64 atMs)
{
    noiseScale = value;
    history.push_back(Point{version, value, agentsFor(value), atMs});
    while (history.size() > kHistory)
        history.pop_front();
}

void JobWidth::follow(const NoiseScale* noise, qint64 version, qint64 atMs)
{
    if (!noise || noise->rounds() == roundsFollowed)
        return;
    roundsFollowed = noise->rounds();
    if (const std::optional<double> value = noise->value())
        measured(version, *value, atMs);
}

std::optional<int> JobWidth::usefulAgents() const
{
    if (!noiseScale)
        return std::nullopt;
    return agentsFor(*noiseScale);
}

QJsonObject JobWidth::toJson() const
{
    if (!noiseScale)
        return {};
    QJsonArray points;
    for (const Point& point : history)
        points.append(QJsonObject{{QStringLiteral("version"), point.version},
                                  {QStringLiteral("noise_scale"), point.noiseScale},
                                  {QStringLiteral("useful_agents"), point.usefulAgents},
                                  {QStringLiteral("at_ms"), point.atMs}});
    return {{QStringLiteral("noise_scale"), *noiseScale},
            {QStringLiteral("useful_agents"), *usefulAgents()},
            {QStringLiteral("history"), points}};
}

} // namespace gleaner::coordinator
