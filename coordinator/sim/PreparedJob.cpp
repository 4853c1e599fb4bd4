#include "sim/PreparedJob.h"

#include "format/SafeTensors.h"
#include "store/BlobStore.h"

#include <QDir>
#include <QFile>

namespace gleaner::coordinator::sim {

Result<PreparedJob> prepareJob(const SimOptions& options, const QString& scratch)
{
    QFile file(options.jobPath);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot read the job file: %2").arg(options.jobPath, file.errorString()));
    auto spec = JobSpec::fromJsonText(file.readAll());
    if (!spec)
        return fail(QStringLiteral("%1: %2").arg(options.jobPath, spec.error()));
    if (options.rule) {
        // Another rule, validated as the job would be: on the average the job keeps unless the rule says.
        const double emaDecay = spec->aggregation.emaDecay;
        spec->aggregation = *options.rule;
        if (!options.ruleGivesEmaDecay)
            spec->aggregation.emaDecay = emaDecay;
    }
    if (options.upload)
        spec->upload = *options.upload;
    if (options.epochs > 0)
        spec->maxEpochs = options.epochs;
    if (options.speedAware)
        spec->speedAware = *options.speedAware;
    if (options.downloadDensity)
        spec->download.density = *options.downloadDensity;
    if (spec->download.sparse() && !spec->aggregation.usesPseudoGradients())
        return fail(QStringLiteral("--download: a density below 1 needs a rule that folds pseudo-gradients (fedbuff, "
                                   "delayed-nesterov or adaptive-nesterov)"));
    if (auto s = JobImporter::checkDatasetFiles(spec->dataset); !s)
        return fail(s.error());
    const QString blobDir = scratch + QStringLiteral("/blobs");
    QDir().mkpath(blobDir);
    BlobStore blobs(blobDir);
    auto imported = JobImporter::import(*spec, blobs, scratch + QStringLiteral("/import"));
    if (!imported)
        return fail(imported.error());
    PreparedJob prepared;
    prepared.spec = *spec;
    prepared.files = *imported;
    const auto dataset = [&](const QString& sha, const QString& what) -> Result<ml::Dataset> {
        auto bundle = SafeTensors::load(blobs.path(sha));
        if (!bundle)
            return fail(bundle.error());
        return ml::Dataset::fromBundle(std::move(*bundle), what);
    };
    for (const ShardRef& shard : imported->shards) {
        auto data = dataset(shard.sha256, QStringLiteral("shard %1").arg(shard.index));
        if (!data)
            return fail(data.error());
        prepared.shards.push_back(std::move(*data));
    }
    auto test = dataset(imported->testSet.sha256, QStringLiteral("test split"));
    if (!test)
        return fail(test.error());
    prepared.test = std::move(*test);
    auto initial = SafeTensors::load(blobs.path(imported->initialWeights.sha256));
    if (!initial)
        return fail(initial.error());
    prepared.initial = std::move(*initial);
    prepared.initial.metadata().clear();
    return prepared;
}

} // namespace gleaner::coordinator::sim
