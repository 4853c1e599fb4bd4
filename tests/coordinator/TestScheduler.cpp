// The scheduler's decisions on memory and a manual clock, as gleaner-sim runs them: which workunit comes next,
// deadlines and re-issue, epochs, replicas, and subtasks sized to agents' speeds; and what a received result
// counts for (ResultIntake).

#include "scheduling/ResultIntake.h"
#include "scheduling/Scheduler.h"

#include <QTest>

using namespace gleaner;
using namespace gleaner::coordinator;

namespace {

JobState job(int shards, qint64 shardSamples = 320)
{
    JobState j;
    j.id = 1;
    j.status = JobStatus::Running;
    j.spec.shards = shards;
    j.spec.batchSize = 32;
    j.spec.localEpochs = 1;
    j.spec.deadlineSeconds = 60;
    j.spec.maxEpochs = 3;
    for (int i = 0; i < shards; ++i)
        j.files.shards.append(ShardRef{i, QStringLiteral("shard-%1").arg(i), 1000, shardSamples});
    j.published = PublishedWeights{0, QStringLiteral("weights-0"), 1000, 0};
    return j;
}

} // namespace

class TestScheduler : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void init();
    void leasesPendingWorkOldestEpochFirstAndStickyShards();
    void missedDeadlineReissuesTheWorkunit();
    void aDroppedJobsLeasesAreNotExpiredHere();
    void progressExtendsALeaseWithinItsLifetime();
    void nextEpochOpensWithOverlapAndValidation();
    void stragglersAreReplicatedWhenTheJobAllowsIt();
    void completedAndReleasedLeavesAreCounted();
    void handedBackWorkunitResumesOnItsBase();
    void subtasksAreSizedToAgentsSpeeds();
    void agentsBetweenSubtasksStillCountAsTraining();
    void resultIntakeFoldsFirstResultsAndComparesLaterOnes();
    void resultIntakeRefusesWhatCannotCount();

private:
    Scheduler& scheduler() { return *m_scheduler; }
    JobState& theJob() { return m_jobs.at(1); }
    Lease lease(const QString& agent, const QSet<QString>& cached = {});

    ManualClock m_clock{1'000'000};
    MemorySchedulerStore m_store;
    std::map<qint64, JobState> m_jobs;
    qint64 m_ids = 0;
    std::unique_ptr<Scheduler> m_scheduler;
    QStringList m_expired;
};

void TestScheduler::init()
{
    m_jobs.clear();
    m_expired.clear();
    m_jobs.emplace(1, job(4));
    m_scheduler = std::make_unique<Scheduler>(m_jobs, m_store, m_clock, SchedulerLimits{3},
                                              [this] { return QStringLiteral("id-%1").arg(++m_ids); });
    m_scheduler->setExpiredObserver([this](const Lease& l, const JobState*) { m_expired << l.id; });
    QVERIFY(m_scheduler->createEpoch(theJob(), 1).ok());
}

Lease TestScheduler::lease(const QString& agent, const QSet<QString>& cached)
{
    auto granted = scheduler().leaseNext(theJob(), agent, cached);
    if (!granted || !*granted)
        return {};
    return **granted;
}

void TestScheduler::leasesPendingWorkOldestEpochFirstAndStickyShards()
{
    QCOMPARE(theJob().epoch, 1);
    QCOMPARE(theJob().workunits.size(), size_t(4));
    // The agent holding shard 2 gets shard 2's workunit first.
    const Lease sticky = lease(QStringLiteral("a"), {QStringLiteral("shard-2")});
    QCOMPARE(theJob().workunits.at(sticky.workunitId).shard, 2);
    QCOMPARE(sticky.baseVersion, qint64(0));
    QCOMPARE(sticky.weightsSha, QStringLiteral("weights-0"));
    QCOMPARE(sticky.deadlineMs, m_clock.nowMs() + 60'000);
    QVERIFY(!sticky.nonce.isEmpty() && sticky.nonce != sticky.id);
    QCOMPARE(scheduler().openLeasesOf(QStringLiteral("a")), 1);
    QCOMPARE(scheduler().agentsTraining(1), 1);
    for (int i = 0; i < 3; ++i)
        QVERIFY(!lease(QStringLiteral("b")).id.isEmpty());
    QCOMPARE(scheduler().agentsTraining(1), 2);
    // Nothing pending, no replication: nothing more (the next epoch waits until this one has nothing pending and
    // the one before is validated; here epoch 1 has nothing pending and there is no epoch 0, so epoch 2 opens).
    const Lease next = lease(QStringLiteral("c"));
    QCOMPARE(theJob().workunits.at(next.workunitId).epoch, 2);
}

void TestScheduler::missedDeadlineReissuesTheWorkunit()
{
    const Lease first = lease(QStringLiteral("a"));
    m_clock.advance(59'999);
    scheduler().expire();
    QVERIFY(m_expired.isEmpty());
    m_clock.advance(1);
    scheduler().expire();
    QCOMPARE(m_expired, QStringList{first.id});
    QCOMPARE(scheduler().find(first.id)->state, Lease::State::Expired); // a late result still counts once
    QCOMPARE(theJob().workunits.at(first.workunitId).state, Workunit::State::Pending);
    // Oldest first: the re-issued workunit is the next one leased, to another agent.
    const Lease again = lease(QStringLiteral("b"));
    QCOMPARE(again.workunitId, first.workunitId);
    QCOMPARE(theJob().workunits.at(first.workunitId).issued, 2);
}

void TestScheduler::aDroppedJobsLeasesAreNotExpiredHere()
{
    // A job that leaves this coordinator's memory without ending (another coordinator serves it): its leases
    // go with it, and a missed deadline is that coordinator's to act on, not this one's.
    const Lease held = lease(QStringLiteral("a"));
    const Lease other = lease(QStringLiteral("b"));
    const QStringList dropped = scheduler().drop(1);
    QCOMPARE(QSet<QString>(dropped.begin(), dropped.end()), (QSet<QString>{held.id, other.id}));
    QVERIFY(!scheduler().find(held.id) && !scheduler().find(other.id));
    QCOMPARE(scheduler().openLeasesOf(QStringLiteral("a")), 0);
    m_jobs.erase(1);
    m_clock.advance(120'000);
    scheduler().expire();
    QVERIFY(m_expired.isEmpty());
    QVERIFY(scheduler().drop(1).isEmpty());
}

void TestScheduler::progressExtendsALeaseWithinItsLifetime()
{
    Lease* held = scheduler().find(lease(QStringLiteral("a")).id);
    QVERIFY(held);
    const qint64 issued = held->issuedMs;
    for (int step = 1; step <= 10; ++step) {
        m_clock.advance(30'000);
        QVERIFY(scheduler().progressed(*held, theJob(), step).ok());
    }
    // Three deadlines in all (SchedulerLimits), however it reports.
    QCOMPARE(held->deadlineMs, issued + 3 * 60'000);
    // A stalled step is kept one more deadline after it last moved.
    init();
    held = scheduler().find(lease(QStringLiteral("a")).id);
    QVERIFY(scheduler().progressed(*held, theJob(), 5).ok());
    const qint64 moved = m_clock.nowMs();
    m_clock.advance(50'000);
    QVERIFY(scheduler().progressed(*held, theJob(), 5).ok());
    QCOMPARE(held->deadlineMs, moved + 110'000);
    m_clock.advance(50'000);
    QVERIFY(scheduler().progressed(*held, theJob(), 5).ok());
    QCOMPARE(held->deadlineMs, moved + 120'000);
}

void TestScheduler::nextEpochOpensWithOverlapAndValidation()
{
    std::vector<Lease> held;
    for (int i = 0; i < 4; ++i)
        held.push_back(lease(QStringLiteral("a")));
    QCOMPARE(theJob().epoch, 1);
    scheduler().openNextEpochIfReady(theJob());
    QCOMPARE(theJob().epoch, 2); // overlap: epoch 2 may start while epoch 1's last are out
    for (const Lease& l : held) {
        QVERIFY(scheduler().recordCompleted(theJob(), l.id).ok());
        scheduler().completed(theJob(), l.id);
    }
    QCOMPARE(scheduler().validationsDue(theJob()), std::vector<int>{1});
    QVERIFY(scheduler().validationsDue(theJob()).empty()); // in flight now
    for (int i = 0; i < 4; ++i)
        QVERIFY(!lease(QStringLiteral("b")).id.isEmpty());
    // Epoch 3 must wait for epoch 1's validation (at most one epoch ahead of the last validated).
    scheduler().openNextEpochIfReady(theJob());
    QCOMPARE(theJob().epoch, 2);
    scheduler().validated(theJob(), 1);
    scheduler().openNextEpochIfReady(theJob());
    QCOMPARE(theJob().epoch, 3);
    // Max epochs reached: no epoch 4.
    for (int i = 0; i < 4; ++i)
        QVERIFY(!lease(QStringLiteral("c")).id.isEmpty());
    scheduler().validated(theJob(), 2);
    scheduler().openNextEpochIfReady(theJob());
    QCOMPARE(theJob().epoch, 3);
}

void TestScheduler::stragglersAreReplicatedWhenTheJobAllowsIt()
{
    theJob().spec.replication = 2;
    theJob().spec.maxEpochs = 1;
    std::vector<Lease> held;
    for (int i = 0; i < 4; ++i)
        held.push_back(lease(QStringLiteral("a")));
    // Nothing pending: another agent gets a replica, never the same agent.
    QVERIFY(lease(QStringLiteral("a")).id.isEmpty());
    const Lease replica = lease(QStringLiteral("b"));
    QVERIFY(!replica.id.isEmpty());
    QCOMPARE(theJob().workunits.at(replica.workunitId).openLeases.size(), 2);
}

void TestScheduler::completedAndReleasedLeavesAreCounted()
{
    const Lease done = lease(QStringLiteral("a"));
    const Lease given = lease(QStringLiteral("a"));
    QVERIFY(scheduler().recordCompleted(theJob(), done.id).ok());
    scheduler().completed(theJob(), done.id);
    QCOMPARE(theJob().workunits.at(done.workunitId).state, Workunit::State::Done);
    QVERIFY(!scheduler().find(done.id));
    QVERIFY(scheduler().released(&theJob(), given.id, Lease::State::Refused)); // back to the queue
    QCOMPARE(theJob().workunits.at(given.workunitId).state, Workunit::State::Pending);
    QCOMPARE(scheduler().openLeasesOf(QStringLiteral("a")), 0);
}

void TestScheduler::handedBackWorkunitResumesOnItsBase()
{
    theJob().spec.speedAware = true;
    scheduler().noteSpeed(QStringLiteral("fast"), 4000, 1.0);
    scheduler().noteSpeed(QStringLiteral("slow"), 1000, 1.0);
    scheduler().noteSpeed(QStringLiteral("median"), 2000, 1.0);
    const Lease left = lease(QStringLiteral("fast"), {QStringLiteral("shard-3")});
    QCOMPARE(left.steps, qint64(20)); // sized to the fast agent: twice the median's 10 mini-batches
    // The server moves on while the agent trains; then the agent leaves and hands the lease back part-way.
    theJob().published = PublishedWeights{5, QStringLiteral("weights-5"), 1000, 0};
    const Workunit::ResumePoint point{left.id, QStringLiteral("checkpoint-a"), 3000, 7, left.baseVersion,
                                      left.weightsSha, left.steps,   QStringLiteral("fast")};
    const auto outcome = scheduler().handedBack(&theJob(), left.id, point);
    QVERIFY(outcome.requeued && outcome.resumeKept);
    QVERIFY(!scheduler().find(left.id));
    QCOMPARE(scheduler().openLeasesOf(QStringLiteral("fast")), 0);
    QCOMPARE(scheduler().agentsTraining(1), 0); // it left: not counted as training any more
    QCOMPARE(theJob().workunits.at(left.workunitId).state, Workunit::State::Pending);

    // The next agent gets it first (even over a shard it holds), on the same base and size, from the checkpoint.
    const Lease next = lease(QStringLiteral("slow"), {QStringLiteral("shard-0")});
    QCOMPARE(next.workunitId, left.workunitId);
    QCOMPARE(next.baseVersion, qint64(0));
    QCOMPARE(next.weightsSha, QStringLiteral("weights-0"));
    QCOMPARE(next.steps, left.steps);
    QCOMPARE(next.checkpointSha, QStringLiteral("checkpoint-a"));
    QCOMPARE(next.resumeStep, qint64(7));

    // Its lease expires: the resume point stays for the one after.
    m_clock.advance(61'000);
    scheduler().expire();
    QCOMPARE(lease(QStringLiteral("other")).checkpointSha, QStringLiteral("checkpoint-a"));

    // A hand-back without a checkpoint keeps the older one; a done workunit needs none.
    const Lease other = lease(QStringLiteral("other"));
    QVERIFY(other.checkpointSha.isEmpty()); // another workunit
    const Lease third = [&] {
        for (const Lease& l : scheduler().leases())
            if (l.workunitId == left.workunitId && l.state == Lease::State::Open)
                return l;
        return Lease{};
    }();
    QVERIFY(!third.id.isEmpty());
    QVERIFY(scheduler().handedBack(&theJob(), third.id, std::nullopt).requeued);
    QCOMPARE(theJob().workunits.at(left.workunitId).resume->sha256, QStringLiteral("checkpoint-a"));
    // Discarding names the agent that handed the checkpoint back, once, and only for the checkpoint still kept.
    QVERIFY(!scheduler().discardResume(&theJob(), left.workunitId, QStringLiteral("checkpoint-b")));
    QVERIFY(theJob().workunits.at(left.workunitId).resume);
    QCOMPARE(scheduler().discardResume(&theJob(), left.workunitId, QStringLiteral("checkpoint-a")),
             std::optional<QString>(QStringLiteral("fast")));
    QVERIFY(!theJob().workunits.at(left.workunitId).resume);
    QVERIFY(!scheduler().discardResume(&theJob(), left.workunitId, QStringLiteral("checkpoint-a")));
    QVERIFY(scheduler().handedBack(&theJob(), lease(QStringLiteral("slow")).id, point).resumeKept);
    const Lease fourth = lease(QStringLiteral("slow"));
    QCOMPARE(fourth.checkpointSha, QStringLiteral("checkpoint-a"));
    QVERIFY(scheduler().recordCompleted(theJob(), fourth.id).ok());
    scheduler().completed(theJob(), fourth.id);
    QVERIFY(!theJob().workunits.at(left.workunitId).resume);
    // A checkpoint handed back for a workunit another lease still holds (replicas) is not kept.
    const Lease a = lease(QStringLiteral("a"));
    QVERIFY(!a.id.isEmpty());
    theJob().workunits.at(a.workunitId).openLeases.append(QStringLiteral("someone-else"));
    const auto kept = scheduler().handedBack(&theJob(), a.id, point);
    QVERIFY(!kept.requeued && !kept.resumeKept);
}

void TestScheduler::subtasksAreSizedToAgentsSpeeds()
{
    // 320 samples, batch 32: a whole subtask is 10 mini-batches.
    const Lease before = lease(QStringLiteral("fast"));
    QCOMPARE(before.steps, qint64(0)); // not speed-aware
    theJob().spec.speedAware = true;
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("fast")), qint64(0)); // speed not known yet
    scheduler().noteSpeed(QStringLiteral("fast"), 4000, 1.0);
    scheduler().noteSpeed(QStringLiteral("median"), 1000, 1.0);
    scheduler().noteSpeed(QStringLiteral("slow"), 500, 1.0);
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("median")), qint64(0)); // the median's size is whole
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("fast")), qint64(40));
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("slow")), qint64(5));
    scheduler().noteSpeed(QStringLiteral("crawl"), 1, 1.0);
    scheduler().noteSpeed(QStringLiteral("crawl2"), 1, 1.0);
    // Bounded: at most four times, at least a quarter of the whole subtask (median now 500).
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("fast")), qint64(40));
    QCOMPARE(scheduler().stepsFor(theJob(), 0, QStringLiteral("crawl")), qint64(3));
    QCOMPARE(lease(QStringLiteral("fast")).steps, qint64(40));
    // A speed follows a lasting change, smoothed.
    scheduler().noteSpeed(QStringLiteral("median"), 2000, 1.0);
    QCOMPARE(*scheduler().speedOf(QStringLiteral("median")), 0.7 * 1000 + 0.3 * 2000);
    // Nonsense reports change nothing.
    scheduler().noteSpeed(QStringLiteral("slow"), 100, 0.0);
    scheduler().noteSpeed(QStringLiteral("slow"), -5, 1.0);
    QCOMPARE(*scheduler().speedOf(QStringLiteral("slow")), 500.0);
}

void TestScheduler::agentsBetweenSubtasksStillCountAsTraining()
{
    // Four agents deliver at once (equal speeds): each is still at work when the next result is folded, so
    // the count stays four, not 4, 3, 2, 1.
    std::vector<Lease> held;
    for (const char* agent : {"a", "b", "c", "d"})
        held.push_back(lease(QString::fromLatin1(agent)));
    QCOMPARE(scheduler().agentsTraining(1), 4);
    m_clock.advance(10'000);
    for (const Lease& l : held) {
        QCOMPARE(scheduler().agentsTraining(1), 4);
        QVERIFY(scheduler().recordCompleted(theJob(), l.id).ok());
        scheduler().completed(theJob(), l.id);
    }
    QCOMPARE(scheduler().agentsTraining(1), 4);
    // Gone for longer than twice the median subtask (10 s): no longer counted.
    m_clock.advance(20'001);
    QCOMPARE(scheduler().agentsTraining(1), 0);
    // An ended job's activity is forgotten: agents that delivered a moment ago no longer count for it.
    m_clock.advance(-20'001);
    QCOMPARE(scheduler().agentsTraining(1), 4);
    scheduler().forget(1);
    QCOMPARE(scheduler().agentsTraining(1), 0);
}



void TestScheduler::resultIntakeFoldsFirstResultsAndComparesLaterOnes()
{
    ResultIntake intake(m_jobs, scheduler());
    JobState& j = theJob();
    const Lease a = lease(QStringLiteral("a"));
    const Lease b = lease(QStringLiteral("b"));
    j.updatesApplied = 3; // three updates folded in since both leases' base (version 0)
    ResultIntake::Received received{QStringLiteral("a"), a.id, 0, 320, 2.0, 1.5, 10.0};
    ResultIntake::Verdict verdict = intake.judge(received);
    QCOMPARE(verdict.kind, ResultIntake::Verdict::Kind::Fold);
    QCOMPARE(verdict.staleness, 3);
    QCOMPARE(verdict.context.epoch, 1);
    QCOMPARE(verdict.context.baseVersion, 0);
    QCOMPARE(verdict.context.concurrency, 2); // a and b hold leases
    QVERIFY(scheduler().find(a.id)->state == Lease::State::Open); // judging changes nothing
    QVERIFY(intake.record(verdict).ok());
    intake.accepted(verdict, received, 41, QStringLiteral("updates/1/a.safetensors"));
    QVERIFY(!scheduler().find(a.id));
    const Workunit& unit = j.workunits.at(a.workunitId);
    QCOMPARE(unit.state, Workunit::State::Done);
    QVERIFY(unit.first && unit.first->seq == 41 && unit.first->agentId == u"a" && unit.first->step == 1.5);
    QCOMPARE(j.counts.updatesReceived, 1);
    QCOMPARE(*scheduler().speedOf(QStringLiteral("a")), 160.0);

    // Its agent's next lease waits until the published weights hold update 41.
    QVERIFY(intake.waitsForOwnUpdate(QStringLiteral("a")));
    QVERIFY(!intake.waitsForOwnUpdate(QStringLiteral("b")));
    j.published = PublishedWeights{4, QStringLiteral("weights-4"), 1000, 0, 41};
    ResultIntake::published(j);
    QVERIFY(!intake.waitsForOwnUpdate(QStringLiteral("a")));
    QVERIFY(j.unpublishedOf.empty());

    // b's workunit got its first result meanwhile (as when another agent finished it after b's lease expired):
    // b's result is compared with that one, never folded in twice.
    const Lease late = b;
    j.workunits.at(late.workunitId).first = Workunit::FirstResult{40, QStringLiteral("x"), 0, 1.0, {}};
    ResultIntake::Received replica{QStringLiteral("b"), late.id, 0, 320, 2.0, 1.4, 10.0};
    ResultIntake::Verdict compared = intake.judge(replica);
    QCOMPARE(compared.kind, ResultIntake::Verdict::Kind::Compare);
    QVERIFY(intake.record(compared).ok());
    intake.accepted(compared, replica, -1, {});
    QCOMPARE(j.counts.updatesReceived, 1); // not counted as an update
    QCOMPARE(j.workunits.at(late.workunitId).first->seq, 40);
    QVERIFY(!intake.waitsForOwnUpdate(QStringLiteral("b")));
}

void TestScheduler::resultIntakeRefusesWhatCannotCount()
{
    ResultIntake intake(m_jobs, scheduler());
    JobState& j = theJob();
    const Lease a = lease(QStringLiteral("a"));
    const auto judged = [&](const QString& agent, const QString& leaseId, qint64 base, double step) {
        return intake.judge(ResultIntake::Received{agent, leaseId, base, 320, 2.0, step, 10.0});
    };
    QCOMPARE(judged(QStringLiteral("a"), QStringLiteral("no-such-lease"), 0, 1.0).kind,
             ResultIntake::Verdict::Kind::Unknown);
    auto other = judged(QStringLiteral("b"), a.id, 0, 1.0);
    QCOMPARE(other.kind, ResultIntake::Verdict::Kind::Refuse);
    QCOMPARE(other.status, 409);
    QVERIFY(!other.closesLease && other.reason.contains(u"another agent"));
    auto wrongBase = judged(QStringLiteral("a"), a.id, 7, 1.0);
    QCOMPARE(wrongBase.status, 422);
    QVERIFY(wrongBase.closesLease && wrongBase.reason.contains(u"version 7"));
    // The job's bound on steps, learnt from accepted results: a step far beyond it is refused and closes the lease.
    for (int i = 0; i < 20; ++i)
        j.updateBound.accept(1.0);
    auto huge = judged(QStringLiteral("a"), a.id, 0, 1e6);
    QCOMPARE(huge.status, 422);
    QVERIFY(huge.closesLease && huge.reason.contains(u"moves the weights"));
    QVERIFY(!intake.record(huge).ok()); // a refusal is never recorded as a result
    j.status = JobStatus::Cancelled;
    auto ended = judged(QStringLiteral("a"), a.id, 0, 1.0);
    QCOMPARE(ended.status, 409);
    QVERIFY(ended.reason.contains(u"takes no more results"));
    QCOMPARE(scheduler().find(a.id)->state, Lease::State::Open); // none of this touched the lease
}

QTEST_GUILESS_MAIN(TestScheduler)
#include "TestScheduler.moc"
