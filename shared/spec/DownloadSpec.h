#pragma once
// DownloadSpec: how the weights a job hands out change from one publication to the next (the job's "download"
// object). With "density" below 1 each publication changes only that share of each tensor's values (those
// where the server copy has moved furthest from what agents hold; the rest follow in later publications), so
// an agent that holds an earlier version fetches a small patch instead of the full file (docs/protocol.md,
// section 8.5):
//
//   {"density": 0.05}     each publication changes at most 5% of each tensor's values (default 1: all of
//   them)
//
// Only rules that fold pseudo-gradients (fedbuff and the nesterov rules) take it: they fold each update as
// the change from the weights its agent was handed, whatever those were; the mixing rules would pull the
// server copy back toward the lagging published one.

#include "Result.h"

#include <QJsonObject>

namespace gleaner {

struct DownloadSpec
{
    double density = 1.0; // (0, 1]

    bool sparse() const { return density < 1.0; }
    static Result<DownloadSpec> fromJson(const QJsonObject& json,
                                         const QString& path = QStringLiteral("download"));
    QJsonObject toJson() const;

    bool operator==(const DownloadSpec&) const = default;
};

} // namespace gleaner
