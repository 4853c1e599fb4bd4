#include "runner/WeightsPatcher.h"

#include "cache/FileCache.h"
#include "codec/WeightsPatch.h"

#include <QFile>

#include <algorithm>

namespace gleaner::agent {

Result<qint64> patchWeights(FileCache& cache, const ManifestFile& weights, const QList<ManifestPatch>& patches,
                            const FetchFile& fetch)
{
    // The smallest patch from a file this agent holds: the newest such file is usually the closest to the weights.
    QList<ManifestPatch> usable;
    for (const ManifestPatch& patch : patches)
        if (cache.contains(patch.fromSha256))
            usable.append(patch);
    std::stable_sort(usable.begin(), usable.end(),
                     [](const ManifestPatch& a, const ManifestPatch& b) { return a.size < b.size; });
    QStringList problems;
    for (const ManifestPatch& patch : usable) {
        qint64 fetched = 0;
        if (!cache.contains(patch.sha256)) {
            auto writer = cache.beginWrite(patch.sha256, patch.size, CacheRole::Unknown);
            if (!writer)
                return fail(writer.error());
            if (auto got = fetch(patch.sha256, (*writer)->partialPath(), patch.size); !got)
                return fail(got.error());
            if (auto committed = (*writer)->commit(); !committed)
                return fail(QStringLiteral("the patch %1 is not the signed file: %2").arg(patch.sha256, committed.error()));
            fetched = patch.size;
        }
        QFile base(cache.path(patch.fromSha256));
        QFile body(cache.path(patch.sha256));
        if (!base.open(QIODevice::ReadOnly) || !body.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("the cached files left before they could be read"));
        auto target = WeightsPatch::apply(base.readAll(), body.readAll(), patch.fromSha256, weights.size);
        cache.remove(patch.sha256); // of no further use, whatever the outcome
        if (!target) {
            problems << target.error();
            continue; // another patch may start from another file this agent holds
        }
        auto writer = cache.beginWrite(weights.sha256, weights.size, CacheRole::Weights);
        if (writer && (*writer)->resumeOffset() > 0) { // a full download began earlier: the file starts afresh
            (*writer)->discard();
            writer = cache.beginWrite(weights.sha256, weights.size, CacheRole::Weights);
        }
        if (!writer)
            return fail(writer.error());
        if (auto s = (*writer)->append(*target); !s)
            return fail(QStringLiteral("the patched weights are not the signed file: %1").arg(s.error()));
        if (auto committed = (*writer)->commit(); !committed)
            return fail(QStringLiteral("the patched weights are not the signed file (is the cached %1 altered?): %2")
                            .arg(patch.fromSha256, committed.error()));
        return fetched;
    }
    if (!problems.isEmpty())
        return fail(problems.join(QStringLiteral("; ")));
    return fail(QStringLiteral("this agent holds none of the %1 earlier weights files the patches start from")
                    .arg(patches.size()));
}

} // namespace gleaner::agent
