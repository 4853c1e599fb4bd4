#pragma once
// Task folders for the worker's tests, as the agent would prepare them: a small four-class shard of 8x8 images,
// an MLP's starting weights and the manifest the worker reads.

#include <QJsonObject>
#include <QString>

#include <optional>

namespace gleaner::test {

// 512 samples in four classes, an MLP [1, 8, 8] -> 32 -> 4, Adam, mini-batches of 16.
void writeTask(const QString& dir, int localEpochs = 30, std::optional<qint64> steps = std::nullopt,
               const QJsonObject& upload = {});
// Replaces the manifest's model spec (the weights and any model.pt are the caller's).
void setModel(const QString& dir, const QJsonObject& model);

} // namespace gleaner::test
