#pragma once
// A coordinator in a scratch data directory with a ManualClock, and a tiny learnable job on a synthetic
// safetensors dataset, for tests of the core and of the HTTP API.

#include "config/Initializer.h"
#include "core/Coordinator.h"
#include "ml/data/Dataset.h"
#include "tensor/TensorBundle.h"

#include <QTemporaryDir>

#include <memory>

namespace gleaner::test {

// Writes train.safetensors and test.safetensors (8x8 U8 images, 4 classes) into `dir`.
void writeSyntheticDataset(const QString& dir, qint64 trainCount = 256, qint64 testCount = 128);

// A job spec (JSON text) over that dataset: mlp 64-16-4, `shards` shards, adam.
QByteArray tinyJobSpec(const QString& dir, int shards = 4, int maxEpochs = 3, double target = 0.99,
                       int deadlineSeconds = 60, const QString& extra = {});

struct CoordinatorFixture
{
    std::unique_ptr<QTemporaryDir> scratch;
    coordinator::DataDirectory dir{QString()};
    coordinator::CoordinatorConfig config;
    coordinator::InitResult init;
    ManualClock clock;
    std::unique_ptr<coordinator::Coordinator> core;

    // Initialises the data directory and opens the coordinator; `open` false leaves it closed.
    bool setUp(bool openEnrollment = true);
    bool reopen();
    // [state] helpers, run on the state thread and waited for.
    QJsonObject enroll(const QString& name = QStringLiteral("agent"));
    qint64 submit(const QByteArray& spec); // waits until the job runs
    QJsonObject call(const std::function<coordinator::HttpResponse()>& work, int* status = nullptr);
};

} // namespace gleaner::test
