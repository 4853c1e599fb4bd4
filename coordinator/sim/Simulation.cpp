#include "sim/Simulation.h"

#include "sim/Baseline.h"
#include "sim/PreparedJob.h"

#include "aggregation/AggregationRule.h"
#include "aggregation/UpdateBound.h"
#include "aggregation/WeightsKeeper.h"
#include "codec/UpdateCodec.h"
#include "codec/WeightsPatch.h"
#include "format/SafeTensors.h"
#include "ml/Evaluator.h"
#include "ml/Trainer.h"
#include "ml/WeightMath.h"
#include "scheduling/ResultIntake.h"
#include "scheduling/Scheduler.h"
#include "util/Clock.h"

#include <QJsonArray>
#include <QSet>
#include <QTemporaryDir>

#include <cmath>
#include <deque>
#include <queue>
#include <random>

namespace gleaner::coordinator::sim {
namespace {

constexpr qint64 kStartMs = 1'700'000'000'000;
constexpr qint64 kJobId = 1;

struct Agent
{
    QString id;
    double speed = 1.0;
    bool present = true;
    int generation = 0; // bumps when the agent leaves: its pending events are then void
    TensorBundle optimizerState; // what its last subtask's local optimizer ended with
    TensorBundle residual;       // what its last uploads left out (error feedback of the job's upload encoding)
    QSet<qint64> heldVersions;   // published weights versions in its cache (the last few)
    QSet<QString> cached;
};

struct Event
{
    enum class Kind { Ask, Deliver, Leave, Join, Tick, HandBack };
    qint64 atMs = 0;
    qint64 order = 0;
    Kind kind = Kind::Ask;
    int slot = 0;
    int generation = 0;
    QString leaseId;
    TensorBundle weights;
    qint64 samples = 0;
    double trainSeconds = 0.0;
    qint64 uploadBytes = 0;
    bool operator>(const Event& other) const
    {
        return atMs != other.atMs ? atMs > other.atMs : order > other.order;
    }
};

QString countedId(qint64 n)
{
    return QStringLiteral("%1").arg(n, 32, 16, QLatin1Char('0'));
}

class Engine
{
public:
    Engine(const SimOptions& options, PreparedJob prepared, std::vector<double> speeds,
           const Simulation::Progress& progress)
        : m_options(options), m_data(std::move(prepared)), m_clock(kStartMs), m_random(options.seed),
          m_scheduler(m_jobs, m_store, m_clock, SchedulerLimits{}, [this] { return countedId(++m_lastId); }),
          m_progress(progress)
    {
        m_report.aggregation = m_data.spec.aggregation.toJson();
        m_report.upload = m_data.spec.upload.toJson();
        m_report.download = m_data.spec.download.toJson();
        m_report.rule = m_report.aggregation.value(QStringLiteral("rule")).toString();
        m_report.agents = int(speeds.size());
        m_report.speeds = speeds;
        for (double speed : speeds)
            m_agents.push_back(Agent{newAgentId(), speed, true, 0, {}, {}, {}, {}});
    }

    Result<SimReport> run()
    {
        JobState job;
        job.id = kJobId;
        job.spec = m_data.spec;
        job.status = JobStatus::Running;
        job.files = m_data.files;
        job.schema = m_data.initial;
        m_jobs.emplace(kJobId, std::move(job));
        m_weights = m_data.initial;
        m_report.weightsBytes = SafeTensors::serialize(m_weights).size();
        m_rule = AggregationRule::create(m_data.spec.aggregation);
        publish();
        if (auto s = m_scheduler.createEpoch(this->job(), 1); !s)
            return fail(s.error());
        m_validateEvery = m_options.validateEvery > 0 ? m_options.validateEvery : std::max(1, m_data.spec.shards / 5);

        post(Event::Kind::Tick, kStartMs + std::max(1, m_options.publishIntervalMs), 0);
        for (int slot = 0; slot < int(m_agents.size()); ++slot) {
            post(Event::Kind::Ask, kStartMs, slot);
            if (m_options.churnSeconds > 0)
                post(Event::Kind::Leave, kStartMs + drawMs(m_options.churnSeconds), slot);
        }
        while (!m_events.empty() && m_ended.isEmpty()) {
            Event event = m_events.top();
            m_events.pop();
            m_clock.set(event.atMs);
            // Nothing folded in for many deadlines: the run is stuck (every agent gone, or no work to lease).
            if (m_clock.nowMs() - m_lastFoldMs > 20 * qint64(m_data.spec.deadlineSeconds) * 1000) {
                m_ended = QStringLiteral("stalled: no update was folded in for %1 simulated seconds")
                              .arg((m_clock.nowMs() - m_lastFoldMs) / 1000);
                break;
            }
            Agent& agent = m_agents[size_t(event.slot)];
            switch (event.kind) {
            case Event::Kind::Ask:
                if (agent.present && event.generation == agent.generation)
                    if (auto s = ask(event.slot); !s)
                        return fail(s.error());
                break;
            case Event::Kind::Deliver:
                if (agent.present && event.generation == agent.generation) {
                    if (auto s = deliver(event); !s)
                        return fail(s.error());
                    post(Event::Kind::Ask, m_clock.nowMs(), event.slot);
                }
                break;
            case Event::Kind::Leave:
                // Its subtask in flight is lost: the lease expires at its deadline. It comes back later as a new
                // agent with an empty cache.
                agent.present = false;
                agent.generation += 1;
                post(Event::Kind::Join, m_clock.nowMs() + drawMs(m_options.churnSeconds / 4), event.slot);
                break;
            case Event::Kind::HandBack:
                // The preempted agent hands its lease back within its grace period (the coordinator's own
                // Scheduler::handedBack), with the step its checkpoint holds or bare; its replacement asks again.
                handBack(event);
                if (agent.present && event.generation == agent.generation)
                    post(Event::Kind::Ask, m_clock.nowMs(), event.slot);
                break;
            case Event::Kind::Tick:
                // The coordinator's housekeeping tick publishes the folded weights for the leases after it.
                publish();
                post(Event::Kind::Tick, m_clock.nowMs() + std::max(1, m_options.publishIntervalMs), 0);
                break;
            case Event::Kind::Join:
                agent.present = true;
                agent.id = newAgentId();
                agent.cached.clear();
                agent.optimizerState = {};
                agent.residual = {};
                agent.heldVersions.clear();
                post(Event::Kind::Ask, m_clock.nowMs(), event.slot);
                post(Event::Kind::Leave, m_clock.nowMs() + drawMs(m_options.churnSeconds), event.slot);
                break;
            }
        }
        m_report.ended = m_ended.isEmpty() ? QStringLiteral("no more events") : m_ended;
        m_report.width = this->job().width.toJson();
        return m_report;
    }

private:
    JobState& job() { return m_jobs.at(kJobId); }
    double seconds() const { return double(m_clock.nowMs() - kStartMs) / 1000.0; }
    QString newAgentId() { return QStringLiteral("agent-%1").arg(++m_lastAgent); }

    qint64 drawMs(double meanSeconds)
    {
        std::exponential_distribution<double> exponential(1.0 / std::max(meanSeconds, 1e-3));
        return std::max<qint64>(1, qint64(std::llround(exponential(m_random) * 1000.0)));
    }

    void post(Event::Kind kind, qint64 atMs, int slot, Event event = {})
    {
        event.kind = kind;
        event.atMs = atMs;
        event.order = ++m_order;
        event.slot = slot;
        event.generation = m_agents[size_t(slot)].generation;
        m_events.push(std::move(event));
    }

    // A preempted agent's hand-back: `event.samples` is the step its checkpoint reached (0: handed back bare).
    void handBack(const Event& event)
    {
        const Lease* lease = m_scheduler.find(event.leaseId);
        if (!lease)
            return;
        std::optional<Workunit::ResumePoint> resume;
        if (event.samples > 0)
            resume = Workunit::ResumePoint{lease->id, QStringLiteral("checkpoint-%1").arg(lease->id), 0, event.samples,
                                           lease->baseVersion, lease->weightsSha, lease->steps, lease->agentId};
        m_report.handedBack += 1;
        (void)m_scheduler.handedBack(&job(), event.leaseId, std::move(resume));
    }

    // The coordinator publishes the server copy for new leases on its housekeeping tick, at most once per publish
    // interval (the Tick events): a lease gets the weights of the last tick, without the updates folded since.
    void publish()
    {
        JobState& j = job();
        if (j.published.version == m_version) {
            // Nothing new (the updates since were not folded in): the file out there holds them all the same.
            j.published.throughSeq = m_handledSeq;
            ResultIntake::published(j);
            return;
        }
        j.published = PublishedWeights{m_version, QStringLiteral("v%1").arg(m_version), 0, m_clock.nowMs(), m_handledSeq};
        ResultIntake::published(j);
        // What the coordinator's weights thread hands out: the server copy, or with a sparse download the copy
        // moved toward it (WeightsKeeper::track), with the file agents download and patch.
        WeightsKeeper::track(m_published, m_weights, m_data.spec.download);
        m_bases[m_version] = m_published;
        if (m_data.spec.download.sparse()) {
            m_publishedFiles.emplace_back(m_version, SafeTensors::serialize(m_published));
            while (m_publishedFiles.size() > kPatchSources)
                m_publishedFiles.pop_front();
        }
        // Bases no lease can deliver against any more are dropped.
        QSet<qint64> needed{m_version};
        for (const Lease& lease : m_scheduler.leases())
            needed.insert(lease.baseVersion);
        for (const auto& [id, unit] : job().workunits) // a handed-back workunit resumes on its base
            if (unit.resume)
                needed.insert(unit.resume->baseVersion);
        for (auto it = m_bases.begin(); it != m_bases.end();)
            it = needed.contains(it->first) ? std::next(it) : m_bases.erase(it);
    }

    Status ask(int slot)
    {
        Agent& agent = m_agents[size_t(slot)];
        // The coordinator answers an agent's lease request once the weights out there hold its last result
        // (lease_wait_for_own_update_ms): publishing takes no simulated time here.
        if (m_options.waitForOwnUpdate && m_intake.waitsForOwnUpdate(agent.id))
            publish();
        m_scheduler.expire();
        auto granted = m_scheduler.leaseNext(job(), agent.id, agent.cached);
        if (!granted)
            return fail(granted.error());
        if (!*granted) {
            post(Event::Kind::Ask, m_clock.nowMs() + qint64(m_options.retrySeconds * 1000), slot);
            return {};
        }
        const Lease lease = **granted;
        const Workunit& unit = job().workunits.at(lease.workunitId);
        m_report.leases += 1;
        m_report.downloadBytes += downloadBytes(agent, lease.baseVersion);
        const ShardRef& shard = m_data.files.shards.at(unit.shard);
        agent.cached.insert(shard.sha256);
        // A speed-aware job sized the lease in mini-batches (the last of a pass may be short: an estimate here,
        // the trained count below).
        const qint64 whole = lease.steps > 0 ? lease.steps * m_data.spec.batchSize
                                             : shard.samples * m_data.spec.localEpochs;
        // A lease that resumes a handed-back checkpoint trains only what is left of the subtask (the result is the
        // same training: trained whole below, from the same base, as a resumed run ends bit for bit).
        const qint64 planned = std::max<qint64>(1, whole - lease.resumeStep * m_data.spec.batchSize);
        if (lease.resumeStep > 0)
            m_report.resumedLeases += 1;
        // A machine's pace varies from subtask to subtask (other programs, caches, the network): --jitter.
        std::uniform_real_distribution<double> unit01(0.0, 1.0);
        const double pace = m_options.jitter > 0 ? 1.0 + m_options.jitter * (2.0 * unit01(m_random) - 1.0) : 1.0;
        const auto trainSecondsOf = [&](qint64 samples) {
            return double(samples) / (m_options.rate * agent.speed) * pace;
        };
        const auto durationOf = [&](qint64 samples) {
            return qint64(std::llround((trainSecondsOf(samples) + m_options.networkSeconds) * 1000.0));
        };
        const qint64 durationMs = durationOf(planned);

        if (m_options.preemption > 0 && unit01(m_random) < m_options.preemption) {
            // Preempted part-way, after `spentMs`: what it trained is kept (a checkpoint handed back) or redone.
            const double at = unit01(m_random);
            const qint64 spentMs = std::max<qint64>(1, qint64(at * double(durationMs)));
            const double trainedSeconds = at * trainSecondsOf(planned);
            m_report.preempted += 1;
            if (m_options.onPreempt == SimOptions::OnPreempt::Keep) {
                // The lease expires at its deadline; the replacement agent starts on other work.
                m_report.lostTrainSeconds += trainedSeconds;
                post(Event::Kind::Ask, m_clock.nowMs() + spentMs, slot);
                return {};
            }
            Event handed;
            handed.leaseId = lease.id;
            // The checkpoint the worker writes on the stop holds every whole mini-batch done so far.
            const qint64 stepsDone = qint64(at * double(planned) / double(m_data.spec.batchSize));
            handed.samples = m_options.onPreempt == SimOptions::OnPreempt::HandBack && stepsDone > 0
                                 ? lease.resumeStep + stepsDone
                                 : 0;
            m_report.lostTrainSeconds +=
                handed.samples > 0 ? trainedSeconds - trainSecondsOf(stepsDone * m_data.spec.batchSize) : trainedSeconds;
            post(Event::Kind::HandBack, m_clock.nowMs() + spentMs, slot, std::move(handed));
            return {};
        }

        ml::TrainRequest request;
        request.model = m_data.spec.model;
        request.optimizer = m_data.spec.optimizerAt(lease.baseVersion); // as the manifest says
        request.localEpochs = m_data.spec.localEpochs;
        request.batchSize = m_data.spec.batchSize;
        request.seed = workunitSeed(m_data.spec, unit.id); // as the manifest says
        request.steps = lease.steps;
        request.augment = m_data.spec.augment; // as the manifest says
        request.threads = m_options.threads;
        request.checkpointPath.clear();
        if (m_options.carryOptimizer)
            request.optimizerState = agent.optimizerState;
        auto trained = ml::Trainer::train(request, m_bases.at(lease.baseVersion), m_data.shards.at(size_t(unit.shard)));
        if (!trained)
            return fail(QStringLiteral("training workunit %1: %2").arg(unit.id).arg(trained.error()));
        if (m_options.carryOptimizer)
            agent.optimizerState = std::move(trained->optimizerState);
        Event event;
        event.leaseId = lease.id;
        event.samples = trained->samples;
        event.trainSeconds = trainSecondsOf(trained->samples);
        // The upload as the worker writes it and the coordinator reads it: encoded with the agent's residual,
        // counted in bytes, decoded against the lease's base.
        const TensorBundle& base = m_bases.at(lease.baseVersion);
        const UploadSpec& upload = m_data.spec.upload;
        auto encoded = UpdateCodec::encode(trained->weights, base, upload, &agent.residual);
        if (!encoded)
            return fail(QStringLiteral("encoding workunit %1: %2").arg(unit.id).arg(encoded.error()));
        event.uploadBytes = UpdateCodec::pack(*encoded, upload.isUpdate() && upload.zstd).size();
        auto decoded = UpdateCodec::decode(*encoded, base);
        if (!decoded)
            return fail(QStringLiteral("decoding workunit %1: %2").arg(unit.id).arg(decoded.error()));
        event.weights = std::move(*decoded);
        const qint64 uplinkMs =
            m_options.uplinkMbit > 0 ? qint64(std::llround(double(event.uploadBytes) * 8.0 / (m_options.uplinkMbit * 1e3))) : 0;
        // A resumed lease spends only the rest of the subtask's time (its result is the whole subtask's).
        const qint64 trainedHere = std::max<qint64>(1, trained->samples - lease.resumeStep * m_data.spec.batchSize);
        post(Event::Kind::Deliver, m_clock.nowMs() + std::max<qint64>(1, durationOf(trainedHere) + uplinkMs), slot,
             std::move(event));
        return {};
    }

    // The weights bytes an agent fetches for a lease of `version`: none when it holds that file, a patch from the
    // newest earlier file it holds when the coordinator would offer one (under half the file), else the file.
    qint64 downloadBytes(Agent& agent, qint64 version)
    {
        if (agent.heldVersions.contains(version))
            return 0;
        qint64 bytes = m_report.weightsBytes;
        int behind = 0; // publications between the newest file the agent holds and this one; 0: it holds none
        const auto target = std::find_if(m_publishedFiles.cbegin(), m_publishedFiles.cend(),
                                         [&](const auto& file) { return file.first == version; });
        if (target != m_publishedFiles.cend()) {
            for (auto from = m_publishedFiles.crbegin(); from != m_publishedFiles.crend(); ++from) {
                if (from->first >= version || !agent.heldVersions.contains(from->first))
                    continue;
                behind = int(std::distance(m_publishedFiles.cbegin(), target)
                             - std::distance(m_publishedFiles.cbegin(), from.base() - 1));
                const auto key = std::make_pair(from->first, version);
                auto known = m_patchBytes.find(key);
                if (known == m_patchBytes.end()) {
                    auto patch = WeightsPatch::make(from->second, target->second, QString(), QString());
                    known = m_patchBytes.emplace(key, patch ? qint64(patch->size()) : bytes).first;
                }
                if (known->second * 2 <= qint64(target->second.size()))
                    bytes = known->second;
                break;
            }
        }
        SimReport::Fetches& fetches = m_report.fetchesBehind[behind];
        fetches.leases += 1;
        fetches.bytes += bytes;
        agent.heldVersions.insert(version);
        while (agent.heldVersions.size() > int(kPatchSources))
            agent.heldVersions.erase(std::min_element(agent.heldVersions.begin(), agent.heldVersions.end()));
        return bytes;
    }

    Status deliver(const Event& event)
    {
        JobState& j = job();
        const Lease* lease = m_scheduler.find(event.leaseId);
        if (!lease)
            return {};
        // What UpdateChecker measures of an upload on the coordinator.
        const TensorBundle& base = m_bases.at(lease->baseVersion);
        auto step = ml::WeightMath::l2Distance(event.weights, base);
        if (!step)
            return fail(step.error());
        const ResultIntake::Received received{lease->agentId, event.leaseId, lease->baseVersion, event.samples,
                                              event.trainSeconds, *step, ml::WeightMath::l2Norm(base)};
        ResultIntake::Verdict verdict = m_intake.judge(received);
        SimUpdate update;
        update.seconds = seconds();
        update.agent = received.agentId;
        update.uploadBytes = event.uploadBytes;
        update.staleness = m_version - received.baseVersion;
        update.folded = false;
        switch (verdict.kind) {
        case ResultIntake::Verdict::Kind::Unknown:
            return {};
        case ResultIntake::Verdict::Kind::Refuse:
            m_progress(QStringLiteral("result of lease %1 refused: %2").arg(event.leaseId, verdict.reason));
            if (verdict.closesLease)
                m_scheduler.released(&j, event.leaseId, Lease::State::Refused);
            m_report.updates.push_back(update);
            return {};
        case ResultIntake::Verdict::Kind::Compare: // a replica or a late result: never folded in twice
        case ResultIntake::Verdict::Kind::Fold:
            break;
        }
        if (auto s = m_intake.record(verdict); !s)
            return s;
        const bool fold = verdict.kind == ResultIntake::Verdict::Kind::Fold;
        UpdateContext context = verdict.context;
        const int epoch = verdict.unit->epoch;
        m_intake.accepted(verdict, received, fold ? ++m_seq : -1, {});
        if (fold) {
            context.serverVersion = m_version;
            context.base = &base;
            if (auto s = WeightsKeeper::fold(m_weights, m_rule, m_steps, event.weights, context, false); !s) {
                m_progress(QStringLiteral("update of lease %1 not folded in: %2").arg(event.leaseId, s.error()));
            } else {
                update.folded = true;
                m_version += 1;
                m_samples += event.samples;
                m_lastFoldMs = m_clock.nowMs();
                j.updatesApplied = m_version;
                j.width.follow(m_rule->noiseScale(), m_version, m_clock.nowMs()); // as FoldReports records it
            }
            m_handledSeq = m_seq;
        }
        m_report.updates.push_back(update);

        if (update.folded && m_version % m_validateEvery == 0)
            if (auto s = validate(epoch, false); !s)
                return s;
        for (int due : m_scheduler.validationsDue(j)) {
            if (auto s = validate(due, true); !s)
                return s;
            m_scheduler.validated(j, due);
            const SimPoint& point = m_report.points.back();
            if (!m_options.ignoreTarget && point.accuracy >= j.spec.targetAccuracy)
                m_ended = QStringLiteral("reached the target accuracy %1 at epoch %2").arg(j.spec.targetAccuracy).arg(due);
            else if (j.validatedEpoch >= j.spec.maxEpochs)
                m_ended = QStringLiteral("ran its %1 epochs").arg(j.spec.maxEpochs);
            if (!m_ended.isEmpty()) {
                j.status = JobStatus::Completed;
                return {};
            }
        }
        m_scheduler.openNextEpochIfReady(j);
        return {};
    }

    Status validate(int epoch, bool epochEnd)
    {
        // What the coordinator validates: the rule's average when the job keeps one
        // (WeightsKeeper::modelWeights).
        const TensorBundle* average = m_rule->averaged();
        auto evaluation =
            ml::Evaluator::evaluate(m_data.spec.model, average ? *average : m_weights, m_data.test);
        if (!evaluation)
            return fail(QStringLiteral("validation: %1").arg(evaluation.error()));
        SimPoint point{seconds(), m_samples, m_version, epoch, epochEnd, evaluation->accuracy, evaluation->meanLoss};
        m_report.points.push_back(point);
        if (!m_report.updates.empty())
            m_report.updates.back().accuracy = point.accuracy;
        m_progress(QStringLiteral("%1 s: epoch %2%3, version %4, %5 samples: accuracy %6, loss %7")
                       .arg(point.seconds, 0, 'f', 1)
                       .arg(epoch)
                       .arg(epochEnd ? QStringLiteral(" end") : QString())
                       .arg(m_version)
                       .arg(m_samples)
                       .arg(point.accuracy, 0, 'f', 4)
                       .arg(point.loss, 0, 'f', 4));
        return {};
    }

    const SimOptions& m_options;
    PreparedJob m_data;
    ManualClock m_clock;
    std::mt19937_64 m_random;
    std::map<qint64, JobState> m_jobs;
    MemorySchedulerStore m_store;
    qint64 m_lastId = 0;
    Scheduler m_scheduler;
    ResultIntake m_intake{m_jobs, m_scheduler};
    Simulation::Progress m_progress;
    std::vector<Agent> m_agents;
    qint64 m_lastAgent = 0;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> m_events;
    qint64 m_order = 0;
    TensorBundle m_weights;
    std::unique_ptr<AggregationRule> m_rule;
    UpdateBound m_steps;
    qint64 m_version = 0;
    qint64 m_seq = 0;        // updates taken to fold in (the coordinator's update numbers)
    qint64 m_handledSeq = 0; // the last of them folded in or refused by the fold
    qint64 m_samples = 0;
    qint64 m_lastFoldMs = kStartMs;
    int m_validateEvery = 10;
    std::map<qint64, TensorBundle> m_bases;
    TensorBundle m_published; // what the last publication handed out
    static constexpr size_t kPatchSources = WeightsKeeper::kPatchSources;
    std::deque<std::pair<qint64, QByteArray>> m_publishedFiles; // sparse downloads: the last few published files
    std::map<std::pair<qint64, qint64>, qint64> m_patchBytes;    // patch sizes by (from, to) version
    SimReport m_report;
    QString m_ended;
};

} // namespace

Result<SimReport> Simulation::run(const SimOptions& options, const Progress& progress)
{
    QTemporaryDir scratch;
    if (!scratch.isValid())
        return fail(QStringLiteral("cannot create a scratch folder: %1").arg(scratch.errorString()));
    auto prepared = prepareJob(options, scratch.path());
    if (!prepared)
        return fail(prepared.error());
    const Progress report = progress ? progress : Progress([](const QString&) {});
    if (options.baseline)
        return runBaseline(options, prepared->spec, prepared->initial, prepared->test, scratch.path(), report);
    auto speeds = options.resolveSpeeds();
    if (!speeds)
        return fail(speeds.error());
    Engine engine(options, std::move(*prepared), std::move(*speeds), report);
    return engine.run();
}

} // namespace gleaner::coordinator::sim
