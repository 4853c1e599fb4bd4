#include "aggregation/WeightsKeeper.h"

#include "aggregation/UpdateChecker.h"
#include "codec/WeightsPatch.h"
#include "config/DataDirectory.h"
#include "format/SafeTensors.h"
#include "metrics/CoordinatorMetrics.h"
#include "ml/WeightMath.h"
#include "util/Durability.h"
#include "validation/ValidationRunner.h"

#include <QLoggingCategory>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

Q_LOGGING_CATEGORY(lcWeights, "gleaner.coordinator.weights")

namespace gleaner::coordinator {

WeightsKeeper::WeightsKeeper(WeightsListener& listener, BlobStore& blobs, const Clock& clock,
                             const CoordinatorConfig& config, metrics::CoordinatorMetrics& metrics,
                             ValidationRunner& validation)
    : m_listener(listener)
    , m_blobs(blobs)
    , m_clock(clock)
    , m_config(config)
    , m_metrics(metrics)
    , m_validation(validation)
{
}

WeightsKeeper::~WeightsKeeper()
{
    m_thread.stop();
}

void WeightsKeeper::load(qint64 jobId, TensorBundle weights, qint64 version, const AggregationSpec& rule,
                         TensorBundle ruleState, std::vector<ReplayedUpdate> replay, const DownloadSpec& download)
{
    m_thread.post([this, jobId, weights = std::move(weights), version, rule, ruleState = std::move(ruleState),
                   replay = std::move(replay), download]() mutable {
        JobWeights& job = m_jobs[jobId];
        job.weights = std::move(weights);
        job.download = download;
        // After a restart the first publication hands out the server copy whole; sparse ones follow from it.
        job.published = TensorBundle();
        job.publishedFiles.clear();
        job.version = version;
        job.snapshotVersion = version;
        job.snapshotMs = m_clock.nowMs();
        job.publishedVersion = -1;
        job.rule = AggregationRule::create(rule);
        if (auto s = job.rule->loadState(ruleState, job.weights); !s) {
            // The buffer or momentum of before the restart is lost; the weights themselves are intact.
            qCCritical(lcWeights) << "job" << jobId << "cannot restore the state of its aggregation rule; it starts"
                                  << "afresh:" << s.error();
            (void)job.rule->loadState(TensorBundle(), job.weights);
        }
        job.spec = rule;
        // The measurement the state holds is the job's width from the start (the scheduler caps it at once);
        // the replay below reports only the rounds it adds.
        job.noiseRounds = 0;
        reportWidth(jobId, job, job.rule->noiseScale(), version);
        job.joined = false;
        job.pending.clear();
        job.ruleFromShared = false;
        job.sharedRuleState = TensorBundle();
        if (m_shared)
            (void)joinShared(jobId, job);
        replayNow(jobId, job, replay);
        if (!replay.empty())
            qCInfo(lcWeights) << "job" << jobId << "replayed" << replay.size() << "update(s) up to version"
                              << job.version;
    });
}

void WeightsKeeper::replayNow(qint64 jobId, JobWeights& job, const std::vector<ReplayedUpdate>& replay)
{
    // An encoded update is read back against the base it names (kept until a snapshot holds the update).
    const qint64 maxBytes = 2 * job.weights.tensorBytes() + 256 * job.weights.size() + (1 << 20);
    for (const ReplayedUpdate& update : replay) {
        auto bundle = UpdateChecker::readKept(update.file, maxBytes,
                                              [&]() { return baseWeights(job, update.baseSha); });
        if (!bundle && m_shared) {
            // Redis may hold it folded already (by this coordinator before it stopped, or by another):
            // then its file is no longer needed.
            if (auto at = m_shared->foldedAt(jobId, update.seq); at && at->has_value()) {
                const qint64 seq = update.seq;
                const qint64 version = **at;
                job.lastSeq = std::max(job.lastSeq, seq);
                m_listener.applied(jobId, seq, version);
                continue;
            }
        }
        if (!bundle) {
            // A received update that cannot be read back is lost: the admin sees it on the update, the job's
            // status and the agent's record; the rest are folded in.
            refused(
                jobId, job, update.seq,
                QStringLiteral("lost by the coordinator: its file could not be read back at a restart (%1)")
                    .arg(bundle.error()),
                /*agentsFault=*/false);
            continue;
        }
        // Counted like a live update: with Redis away it waits in memory as long (a restart, or a takeover of
        // another coordinator's updates).
        applyNow(jobId, job, update.seq, *bundle, update.context, update.baseSha, update.appliedBefore,
                 std::nullopt, countWaiting(*bundle));
    }
}

void WeightsKeeper::setPublisher(const QString& name)
{
    m_thread.call([&] { m_publisher = name; });
}

void WeightsKeeper::replay(qint64 jobId, std::vector<ReplayedUpdate> updates)
{
    m_thread.post([this, jobId, updates = std::move(updates)]() mutable {
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end())
            return;
        JobWeights& job = it->second;
        std::erase_if(updates, [&](const ReplayedUpdate& update) {
            return std::any_of(job.pending.begin(), job.pending.end(),
                               [&](const PendingUpdate& mine) { return mine.seq == update.seq; });
        });
        if (updates.empty())
            return;
        qCInfo(lcWeights) << "job" << jobId << "folds" << updates.size()
                          << "update(s) that another coordinator received and did not fold";
        replayNow(jobId, job, updates);
    });
}

WeightsKeeper::Waiting::Waiting(WeightsKeeper& keeper, qint64 bytes) : m_keeper(keeper), m_bytes(bytes)
{
    m_keeper.m_backlogUpdates.fetch_add(1, std::memory_order_relaxed);
    m_keeper.m_backlogBytes.fetch_add(m_bytes, std::memory_order_relaxed);
}

WeightsKeeper::Waiting::~Waiting()
{
    m_keeper.m_backlogUpdates.fetch_sub(1, std::memory_order_relaxed);
    m_keeper.m_backlogBytes.fetch_sub(m_bytes, std::memory_order_relaxed);
}

std::shared_ptr<const WeightsKeeper::Waiting> WeightsKeeper::countWaiting(const TensorBundle& update)
{
    return std::make_shared<const Waiting>(*this, qint64(update.buffer().size()));
}

WeightsKeeper::Backlog WeightsKeeper::backlog() const
{
    return {m_backlogUpdates.load(std::memory_order_relaxed), m_backlogBytes.load(std::memory_order_relaxed)};
}

void WeightsKeeper::apply(qint64 jobId, qint64 seq, TensorBundle update, UpdateContext context, QString baseSha)
{
    const auto recorded = std::chrono::steady_clock::now();
    // Counted from now, on the caller's thread: the lease path sees it before the fold's task runs.
    auto waiting = countWaiting(update);
    m_thread.post([this, jobId, seq, update = std::move(update), context, baseSha, recorded,
                   waiting = std::move(waiting)]() mutable {
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end())
            return;
        JobWeights& job = it->second;
        // The count goes with the update: out at the end of applyNow, unless it waits for Redis.
        applyNow(jobId, job, seq, update, context, baseSha, false, recorded, std::move(waiting));
        if (!m_shared) // through Redis, when it is folded (it may wait)
            m_metrics.updateAssimilated(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - recorded).count());
        const auto& config = m_config;
        const bool due = job.version - job.snapshotVersion >= config.snapshotEveryUpdates;
        if (due)
            snapshot(jobId, true);
    });
}

void WeightsKeeper::validate(qint64 jobId, int epoch, bool epochEnd)
{
    m_thread.post([this, jobId, epoch, epochEnd] {
        auto it = m_jobs.find(jobId);
        if (it != m_jobs.end()) {
            syncShared(jobId, it->second);
            validateNow(jobId, it->second, epoch, epochEnd);
        } else {
            m_listener.validationFailed(jobId, epoch, epochEnd, QStringLiteral("no weights in memory"));
        }
    });
}

void WeightsKeeper::validateNow(qint64 jobId, const JobWeights& job, int epoch, bool epochEnd)
{
    const qint64 version = job.version;
    m_validation.evaluate(jobId, modelWeights(jobId, job),
                          [this, jobId, epoch, epochEnd, version](ValidationRunner::Outcome outcome) {
                              if (!outcome.ok)
                                  m_listener.validationFailed(jobId, epoch, epochEnd, outcome.error);
                              else
                                  m_listener.validated(jobId, epoch, epochEnd, version, outcome.accuracy,
                                                       outcome.loss);
                          });
}

Result<TensorBundle> WeightsKeeper::baseWeights(JobWeights& job, const QString& sha)
{
    if (auto it = job.recent.find(sha); it != job.recent.end())
        return it->second;
    auto loaded = SafeTensors::load(m_blobs.path(sha));
    if (!loaded)
        return fail(QStringLiteral("the weights it trained from (%1) cannot be read: %2").arg(sha, loaded.error()));
    loaded->metadata().clear();
    remember(job, sha, *loaded);
    return loaded;
}

void WeightsKeeper::remember(JobWeights& job, const QString& sha, const TensorBundle& weights)
{
    if (!job.rule || !job.rule->needsBase() || job.recent.count(sha))
        return;
    job.recent.emplace(sha, weights); // shares the buffer: the next fold writes into a copy
    job.recentOrder.push_back(sha);
    if (job.recentOrder.size() > kRecentBases) {
        job.recent.erase(job.recentOrder.front());
        job.recentOrder.erase(job.recentOrder.begin());
    }
}

void WeightsKeeper::applyNow(qint64 jobId, JobWeights& job, qint64 seq, const TensorBundle& update,
                             UpdateContext context, const QString& baseSha, bool checked,
                             std::optional<std::chrono::steady_clock::time_point> received,
                             std::shared_ptr<const Waiting> waiting)
{
    if (m_shared) {
        job.pending.push_back(
            PendingUpdate{seq, update, context, baseSha, checked, received, std::move(waiting)});
        (void)foldPending(jobId, job);
        return;
    }
    context.serverVersion = job.version;
    Result<TensorBundle> base = TensorBundle();
    if (job.rule->needsBase()) {
        base = baseWeights(job, baseSha);
        if (!base) {
            // Not the agent's fault: the coordinator keeps bases until a snapshot holds their updates.
            refused(jobId, job, seq, QStringLiteral("lost by the coordinator: %1").arg(base.error()),
                    /*agentsFault=*/false);
            return;
        }
        context.base = &*base;
    }
    if (auto s = fold(job.weights, job.rule, job.steps, update, context, checked); !s) {
        refused(jobId, job, seq, s.error());
        return;
    }
    job.version += 1;
    job.lastSeq = seq;
    const qint64 version = job.version;
    m_listener.applied(jobId, seq, version);
    reportWidth(jobId, job, job.rule->noiseScale(), version);
}

void WeightsKeeper::reportWidth(qint64 jobId, JobWeights& job, const NoiseScale* noise, qint64 version)
{
    if (!noise || noise->rounds() == job.noiseRounds)
        return;
    job.noiseRounds = noise->rounds();
    if (const std::optional<double> value = noise->value())
        m_listener.widthMeasured(jobId, version, *value);
}

Status WeightsKeeper::fold(TensorBundle& weights, std::unique_ptr<AggregationRule>& rule, UpdateBound& steps,
                           const TensorBundle& update, const UpdateContext& context, bool checked)
{
    // The rule writes into `next`, which shares the server copy's buffer until that first write copies it:
    // the copy before stays intact for the check and for a refusal. So does the rule's state.
    TensorBundle next = weights;
    std::unique_ptr<AggregationRule> trial = rule->clone();
    if (auto s = trial->apply(next, update, context); !s)
        return s;
    if (!checked) {
        // One pass for both checks: the server copy is finite (every fold into it was checked), so the step is
        // finite exactly when every value of the fold is. Only a non-finite step looks for the tensor to name.
        auto step = ml::WeightMath::l2Distance(next, weights);
        if (!step)
            return fail(step.error());
        if (!std::isfinite(*step)) {
            QString where;
            if (!ml::WeightMath::allFinite(next, &where))
                return fail(QStringLiteral("folding it in would put NaN or infinite values into tensor \"%1\"")
                                .arg(where));
            return fail(QStringLiteral("the distance of the fold from the server copy is not finite; the server "
                                       "copy itself holds NaN or infinite values"));
        }
        if (trial->boundsFoldSteps()) {
            // The weights' norm only when the bound needs it: a pass over 20 MB saved on almost every fold.
            const double norm = steps.needsNorm() || *step > steps.limit(0) ? ml::WeightMath::l2Norm(weights) : 0.0;
            if (!(*step <= steps.limit(norm)))
                return fail(QStringLiteral("folding it in would move the server weights by %1; the job allows at "
                                           "most %2 (%3)")
                                .arg(*step, 0, 'g', 4)
                                .arg(steps.limit(norm), 0, 'g', 4)
                                .arg(steps.describe(norm)));
            steps.accept(*step);
        }
    }
    weights = std::move(next);
    rule = std::move(trial);
    return {};
}

void WeightsKeeper::refused(qint64 jobId, JobWeights& job, qint64 seq, const QString& reason, bool agentsFault)
{
    qCCritical(lcWeights) << "job" << jobId << "update" << seq << "is not folded in:" << reason;
    // Counted as handled: a snapshot taken from now on holds everything up to it, and a restart does not try it
    // again (the coordinator marks it).
    job.lastSeq = std::max(job.lastSeq, seq);
    m_listener.foldRefused(jobId, seq, reason, agentsFault);
}

void WeightsKeeper::publish(qint64 jobId, bool forParked)
{
    m_thread.post([this, jobId, forParked] {
        // Every outcome reports: the coordinator counts the publication it asked for as done either way.
        const auto report = [this, jobId, forParked](std::optional<PublishedWeights> published) {
            m_listener.published(jobId, std::move(published), forParked);
        };
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end()) {
            report(std::nullopt);
            return;
        }
        JobWeights& job = it->second;
        syncShared(jobId, job);
        PublishedWeights published{job.version, {}, 0, m_clock.nowMs(), job.lastSeq, {}};
        if (job.publishedVersion != job.version && job.download.sparse()) {
            auto sparse = publishSparse(jobId, job);
            if (!sparse) {
                qCCritical(lcWeights) << "job" << jobId << "cannot publish weights:" << sparse.error();
                report(std::nullopt);
                return;
            }
            published = *sparse;
        } else if (job.publishedVersion != job.version) {
            auto blob = writeBlob(job, /*publication=*/true);
            if (!blob) {
                qCCritical(lcWeights) << "job" << jobId << "cannot publish weights:" << blob.error();
                report(std::nullopt);
                return;
            }
            job.publishedVersion = job.version;
            remember(job, blob->sha256, job.weights);
            published.sha256 = blob->sha256;
            published.size = blob->size;
        }
        // Also when nothing changed (the updates since were refused): the file out there holds everything
        // handled up to lastSeq, which is what a lease waiting for its agent's own update needs to know.
        report(published);
    });
}

void WeightsKeeper::snapshot(qint64 jobId, bool force)
{
    auto work = [this, jobId, force] {
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end())
            return;
        JobWeights& job = it->second;
        if (!m_keepsSnapshots)
            return;
        syncShared(jobId, job);
        const qint64 now = m_clock.nowMs();
        if (job.version == job.snapshotVersion
            || (!force && now - job.snapshotMs < qint64(m_config.snapshotEverySeconds) * 1000))
            return;
        auto blob = writeBlob(job);
        if (!blob) {
            qCCritical(lcWeights) << "job" << jobId << "cannot write a snapshot:" << blob.error();
            return;
        }
        QString ruleSha;
        if (const TensorBundle state = ruleState(job); !state.isEmpty()) {
            auto ruleBlob = m_blobs.put(SafeTensors::serialize(state));
            if (!ruleBlob) {
                qCCritical(lcWeights) << "job" << jobId << "cannot write the state of its rule:" << ruleBlob.error();
                return;
            }
            ruleSha = ruleBlob->sha256;
        }
        Durability::faultPoint("snapshot.written");
        job.snapshotVersion = job.version;
        job.snapshotMs = now;
        const qint64 version = job.version;
        const qint64 lastSeq = job.lastSeq;
        const QString sha = blob->sha256;
        m_listener.snapshotWritten(jobId, version, lastSeq, sha, ruleSha);
    };
    if (m_thread.isCurrentThread())
        work();
    else
        m_thread.post(work);
}

void WeightsKeeper::exportWeights(qint64 jobId, std::function<void(Result<BlobInfo>)> done)
{
    m_thread.post([this, jobId, done = std::move(done)] {
        auto it = m_jobs.find(jobId);
        if (it == m_jobs.end()) {
            done(fail(QStringLiteral("job %1 has no weights in memory").arg(jobId)));
            return;
        }
        syncShared(jobId, it->second);
        // The model the job trained: what its validations measured (the average, when it keeps one).
        TensorBundle model = modelWeights(jobId, it->second);
        model.metadata().clear();
        model.setMetadata(QStringLiteral("gleaner.version"), QString::number(it->second.version));
        done(m_blobs.put(SafeTensors::serialize(model)));
    });
}

namespace {

// `value` rounded to bfloat16's precision (8 significant bits, ties to even), kept as a float: a sparse
// publication's values, so that what changes between two published files is the top half of each word and a patch
// compresses to about half the bytes.
float toPublishedGrid(float value)
{
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u)
        return value; // infinity or NaN: never in the server copy, which is checked finite
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
    float rounded;
    std::memcpy(&rounded, &bits, 4);
    return rounded;
}

} // namespace

void WeightsKeeper::track(TensorBundle& published, const TensorBundle& server, const DownloadSpec& download)
{
    if (!download.sparse()) {
        published = server; // shares the buffer: the next fold writes into a copy
        return;
    }
    if (published.isEmpty() || published.size() != server.size()) {
        published = server; // the first publication: every value, on the grid
        for (const TensorEntry& entry : published.entries())
            if (entry.dtype == DType::F32)
                for (float& v : published.mutableValues<float>(entry))
                    v = toPublishedGrid(v);
        return;
    }
    for (const TensorEntry& entry : server.entries()) {
        const TensorEntry* mine = published.find(entry.name);
        if (!mine || mine->byteSize != entry.byteSize) {
            published = TensorBundle();
            return track(published, server, download);
        }
        if (entry.dtype != DType::F32) {
            std::memcpy(published.mutableData(*mine), server.data(entry).data(), size_t(entry.byteSize));
            continue;
        }
        const std::span<const float> target = server.values<float>(entry);
        const std::span<float> out = published.mutableValues<float>(*mine);
        const qint64 n = qint64(target.size());
        const qint64 k = std::clamp<qint64>(qint64(std::ceil(download.density * double(n))), 1, std::max<qint64>(n, 1));
        std::vector<qint32> order(target.size());
        std::iota(order.begin(), order.end(), 0);
        // Where the handed-out copy lags the server copy most (ties to the lower position: the same everywhere).
        const auto further = [&](qint32 a, qint32 b) {
            const float x = std::fabs(target[a] - out[a]), y = std::fabs(target[b] - out[b]);
            return x > y || (x == y && a < b);
        };
        if (k < n)
            std::nth_element(order.begin(), order.begin() + k, order.end(), further);
        for (qint64 j = 0; j < std::min(k, n); ++j)
            out[order[j]] = toPublishedGrid(target[order[j]]);
    }
}

Result<PublishedWeights> WeightsKeeper::publishSparse(qint64 jobId, JobWeights& job)
{
    track(job.published, job.weights, job.download);
    job.published.setMetadata(QStringLiteral("gleaner.version"), QString::number(job.version));
    if (!m_publisher.isEmpty())
        job.published.setMetadata(QStringLiteral("gleaner.publisher"), m_publisher);
    const QByteArray bytes = SafeTensors::serialize(job.published);
    auto blob = m_blobs.put(bytes);
    if (!blob)
        return fail(blob.error());
    PublishedWeights published{job.version, blob->sha256, blob->size, m_clock.nowMs(), job.lastSeq, {}};
    // A patch from each of the last few files agents may hold: kept when it is well under the full file.
    for (auto file = job.publishedFiles.crbegin(); file != job.publishedFiles.crend(); ++file) { // newest first
        const auto& [sha, earlier] = *file;
        if (sha == blob->sha256)
            continue;
        auto patch = WeightsPatch::make(earlier, bytes, sha, blob->sha256);
        if (!patch || patch->size() * 2 > bytes.size())
            continue;
        auto patchBlob = m_blobs.put(*patch);
        if (!patchBlob) {
            qCWarning(lcWeights) << "job" << jobId << "cannot keep a weights patch:" << patchBlob.error();
            continue;
        }
        published.patches.push_back({sha, patchBlob->sha256, patchBlob->size});
    }
    job.publishedFiles.emplace_back(blob->sha256, bytes);
    while (job.publishedFiles.size() > kPatchSources)
        job.publishedFiles.pop_front();
    job.publishedVersion = job.version;
    remember(job, blob->sha256, job.published);
    return published;
}

Result<BlobInfo> WeightsKeeper::writeBlob(JobWeights& job, bool publication)
{
    job.weights.setMetadata(QStringLiteral("gleaner.version"), QString::number(job.version));
    if (publication && !m_publisher.isEmpty())
        job.weights.setMetadata(QStringLiteral("gleaner.publisher"), m_publisher);
    else
        job.weights.metadata().remove(QStringLiteral("gleaner.publisher"));
    return m_blobs.put(SafeTensors::serialize(job.weights));
}

void WeightsKeeper::unload(qint64 jobId)
{
    m_thread.post([this, jobId] {
        snapshot(jobId, true);
        auto it = m_jobs.find(jobId);
        // Its copy in Redis goes once the snapshot holds everything it held (the housekeeper's snapshot:
        // another coordinator leaves it).
        if (m_shared && m_keepsSnapshots && it != m_jobs.end() && it->second.pending.empty() &&
            it->second.version == it->second.snapshotVersion)
            if (auto s = m_shared->remove(jobId); !s)
                qCWarning(lcWeights) << "job" << jobId << "leaves its weights in Redis:" << s.error();
        m_jobs.erase(jobId);
    });
}

} // namespace gleaner::coordinator
