#include "ChaosSoak.h"

#include "SoakAudit.h"
#include "TestSupport.h"
#include "format/SafeTensors.h"

#include <QDeadlineTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>
#include <QTextStream>

#include <csignal>
#include <limits>

namespace gleaner::e2e {
namespace {

constexpr int kPollMs = 1'000;
constexpr int kRestartAttempts = 5;
// A short run that asks for minimum kills gets them within this much more time, or fails saying so.
constexpr qint64 kMaxOvertimeMs = 300'000;

Result<std::pair<int, int>> range(const QString& option, const QString& text)
{
    const QStringList parts = text.split(u':');
    bool okMin = false, okMax = false;
    const int min = parts.value(0).toInt(&okMin);
    const int max = parts.value(1).toInt(&okMax);
    if (parts.size() != 2 || !okMin || !okMax || min < 0 || max < min)
        return fail(
            QStringLiteral("%1 \"%2\": expected MIN:MAX in milliseconds, 0 <= MIN <= MAX (e.g. 3000:15000)")
                .arg(option, text));
    return std::pair{min, max};
}

Result<qint64> integer(const QString& option, const QString& text, qint64 min, qint64 max)
{
    bool ok = false;
    const qint64 value = text.toLongLong(&ok);
    if (!ok || value < min || value > max)
        return fail(QStringLiteral("%1 \"%2\": expected a whole number from %3 to %4")
                        .arg(option, text)
                        .arg(min)
                        .arg(max));
    return value;
}

QString compact(const QJsonObject& object)
{
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

} // namespace

QJsonObject ChaosOptions::defaultJob()
{
    QJsonObject job = E2eCluster::fashionJob();
    job.insert(QStringLiteral("name"), QStringLiteral("chaos"));
    job.insert(QStringLiteral("limit_train"), 3000);
    job.insert(QStringLiteral("shards"), 4);
    job.insert(QStringLiteral("deadline_seconds"), 10);
    job.insert(QStringLiteral("target_accuracy"), 0.75);
    job.insert(QStringLiteral("max_epochs"), 30);
    return job;
}

QString ChaosOptions::usage()
{
    return QStringLiteral(
        "usage: chaos_soak [--seconds D] [--agents N] [--seed S] [--kill-interval-ms MIN:MAX] [--down-ms "
        "MIN:MAX]\n"
        "                  [--coordinator-kill-probability P] [--min-agent-kills A] [--min-coordinator-kills "
        "C]\n"
        "                  [--snapshot-every-updates U] [--finish-timeout S] [--job FILE] [--keep] [--json]\n"
        "Runs a real gleaner-coordinator and N gleaner-agents on 127.0.0.1 and, for D seconds (default 600), "
        "SIGKILLs\n"
        "one of them every MIN..MAX ms (default 3000:15000; the coordinator with probability P, default "
        "0.25) and\n"
        "starts it again after MIN..MAX ms (default 200:12000). Jobs (FILE, or a small Fashion-MNIST job) "
        "run in\n"
        "rounds; after the chaos the last one runs to its end. Then it checks that every update answered 202 "
        "was\n"
        "folded in exactly once, that no workunit was lost or done twice and that every job reached its "
        "target,\n"
        "and prints its figures. Exit status: 0 when every invariant held, 1 when one broke (the scratch "
        "folder\n"
        "is kept), 2 for a usage error.\n");
}

Result<ChaosOptions> ChaosOptions::parse(const QStringList& arguments)
{
    ChaosOptions o;
    o.job = defaultJob();
    for (qsizetype i = 1; i < arguments.size(); ++i) {
        const QString& option = arguments[i];
        if (option == u"--keep") {
            o.keep = true;
            continue;
        }
        if (option == u"--json") {
            o.json = true;
            continue;
        }
        if (i + 1 >= arguments.size())
            return fail(QStringLiteral("%1: unknown option, or it needs a value; see --help").arg(option));
        const QString value = arguments[++i];
        const auto assign = [&](auto parsed, auto& into) -> Status {
            if (!parsed)
                return fail(parsed.error());
            into = std::remove_reference_t<decltype(into)>(*parsed);
            return {};
        };
        Status s;
        if (option == u"--seconds")
            s = assign(integer(option, value, 1, 7 * 86'400), o.seconds);
        else if (option == u"--agents")
            s = assign(integer(option, value, 1, 32), o.agents);
        else if (option == u"--seed")
            s = assign(integer(option, value, 0, std::numeric_limits<qint64>::max()), o.seed);
        else if (option == u"--min-agent-kills")
            s = assign(integer(option, value, 0, 10'000), o.minAgentKills);
        else if (option == u"--min-coordinator-kills")
            s = assign(integer(option, value, 0, 10'000), o.minCoordinatorKills);
        else if (option == u"--snapshot-every-updates")
            s = assign(integer(option, value, 1, 1'000'000), o.snapshotEveryUpdates);
        else if (option == u"--finish-timeout")
            s = assign(integer(option, value, 10, 86'400), o.finishTimeoutSeconds);
        else if (option == u"--kill-interval-ms" || option == u"--down-ms") {
            auto r = range(option, value);
            if (!r)
                return fail(r.error());
            (option == u"--down-ms" ? o.downMinMs : o.killIntervalMinMs) = r->first;
            (option == u"--down-ms" ? o.downMaxMs : o.killIntervalMaxMs) = r->second;
        } else if (option == u"--coordinator-kill-probability") {
            bool ok = false;
            o.coordinatorKillProbability = value.toDouble(&ok);
            if (!ok || o.coordinatorKillProbability < 0 || o.coordinatorKillProbability > 1)
                return fail(
                    QStringLiteral("%1 \"%2\": expected a probability from 0 to 1").arg(option, value));
        } else if (option == u"--job") {
            const QByteArray text = test::readFile(value);
            QJsonParseError error{};
            const QJsonDocument doc = QJsonDocument::fromJson(text, &error);
            if (text.isEmpty() || !doc.isObject())
                return fail(QStringLiteral("--job %1: cannot read a job spec (a JSON object) from it: %2")
                                .arg(value, text.isEmpty() ? QStringLiteral("empty or unreadable")
                                                           : error.errorString()));
            o.job = doc.object();
        } else {
            return fail(QStringLiteral("%1: unknown option; see --help").arg(option));
        }
        if (!s)
            return fail(s.error());
    }
    if (o.killIntervalMinMs < 500)
        return fail(
            QStringLiteral("--kill-interval-ms: MIN must be at least 500 ms, so that restarts finish"));
    return o;
}

ChaosSoak::ChaosSoak(ChaosOptions options, QString root)
    : m_options(std::move(options)), m_root(std::move(root)), m_random(m_options.seed)
{
}

ChaosSoak::~ChaosSoak() = default;

void ChaosSoak::note(const QString& line) const
{
    QTextStream(stderr) << QStringLiteral("[%1 s] ").arg(double(m_clock.elapsed()) / 1000.0, 6, 'f', 1)
                        << line << "\n";
}

int ChaosSoak::uniform(int min, int max)
{
    return std::uniform_int_distribution<int>(min, max)(m_random);
}

QJsonObject ChaosSoak::run()
{
    m_clock.start();
    Status s = setUp();
    if (s)
        s = chaos();
    if (s)
        s = finish();
    if (!s) {
        m_errors << s.error();
        QTextStream(stderr) << m_cluster->logTails(40);
    }
    QJsonObject figures = audit();
    figures.insert(QStringLiteral("duration_s"), double(m_clock.elapsed()) / 1000.0);
    return figures;
}

Status ChaosSoak::setUp()
{
    m_cluster = std::make_unique<E2eCluster>(m_root);
    if (auto s = m_cluster->initCoordinator(); !s)
        return s;
    // Snapshots often, so that kills fall before, between and after them and restarts replay what follows.
    const QString configPath = m_cluster->coordinatorDir() + QStringLiteral("/config.json");
    QJsonObject config = QJsonDocument::fromJson(test::readFile(configPath)).object();
    config.insert(QStringLiteral("snapshot_every_updates"), m_options.snapshotEveryUpdates);
    if (!test::writeFile(configPath, QJsonDocument(config).toJson()))
        return fail(QStringLiteral("cannot write %1").arg(configPath));
    if (auto s = m_cluster->startCoordinator(); !s)
        return s;
    for (int i = 1; i <= m_options.agents; ++i) {
        auto agent = m_cluster->enrollAgent(QStringLiteral("chaos%1").arg(i));
        if (!agent)
            return fail(agent.error());
        if (auto s = m_cluster->startAgent(*agent, E2eCluster::quickAgentOptions()); !s)
            return s;
    }
    note(QStringLiteral("coordinator on %1, %2 agents, seed %3; chaos for %4 s")
             .arg(m_cluster->url())
             .arg(m_options.agents)
             .arg(m_options.seed)
             .arg(m_options.seconds));
    return submitRound();
}

Status ChaosSoak::submitRound()
{
    QJsonObject spec = m_options.job;
    spec.insert(QStringLiteral("name"),
                QStringLiteral("%1-round%2")
                    .arg(spec.value(QStringLiteral("name")).toString(QStringLiteral("chaos")))
                    .arg(m_jobs.size() + 1));
    auto job = m_cluster->submitJob(spec);
    if (!job)
        return fail(job.error());
    m_jobs << *job;
    m_roundSubmittedMs = m_clock.elapsed();
    m_currentCompleted = false;
    note(QStringLiteral("submitted job %1 (round %2)").arg(*job).arg(m_jobs.size()));
    return {};
}

Status ChaosSoak::watch(int ms, bool nextRounds)
{
    const QDeadlineTimer deadline(ms);
    while (!deadline.hasExpired()) {
        if (m_cluster->coordinatorRunning() && !m_currentCompleted) {
            const QJsonObject status = m_cluster->jobStatus(m_jobs.last());
            const QString state = status.value(QStringLiteral("state")).toString();
            if (state == u"failed" || state == u"cancelled")
                return fail(
                    QStringLiteral("job %1 ended %2: %3").arg(m_jobs.last()).arg(state, compact(status)));
            if (state == u"completed") {
                m_lastSecondsToTarget = double(m_clock.elapsed() - m_roundSubmittedMs) / 1000.0;
                m_currentCompleted = true;
                note(QStringLiteral("job %1 completed after %2 s: %3")
                         .arg(m_jobs.last())
                         .arg(m_lastSecondsToTarget, 0, 'f', 1)
                         .arg(status.value(QStringLiteral("reason")).toString()));
                if (nextRounds)
                    if (auto s = submitRound(); !s)
                        return s;
            }
        }
        QTest::qWait(int(std::clamp<qint64>(deadline.remainingTime(), 0, kPollMs)));
    }
    return {};
}

Status ChaosSoak::restartCoordinator()
{
    Status started;
    for (int attempt = 1; attempt <= kRestartAttempts; ++attempt) {
        started = m_cluster->startCoordinator(60'000);
        if (started)
            return {};
        note(QStringLiteral("the coordinator did not start (attempt %1): %2")
                 .arg(attempt)
                 .arg(started.error()));
        m_cluster->stopCoordinator(SIGKILL);
        QTest::qWait(1'000);
    }
    return fail(QStringLiteral("the coordinator did not start again after %1 attempts: %2")
                    .arg(kRestartAttempts)
                    .arg(started.error()));
}

Status ChaosSoak::killAndRestart()
{
    const bool timeUp = m_clock.elapsed() >= qint64(m_options.seconds) * 1000;
    const bool coordinator =
        timeUp ? m_coordinatorKills < m_options.minCoordinatorKills
               : std::bernoulli_distribution(m_options.coordinatorKillProbability)(m_random);
    const int down = uniform(m_options.downMinMs, m_options.downMaxMs);
    if (coordinator) {
        m_cluster->stopCoordinator(SIGKILL);
        ++m_coordinatorKills;
        note(QStringLiteral("SIGKILL coordinator (kill %1); down %2 ms").arg(m_coordinatorKills).arg(down));
        QTest::qWait(down);
        return restartCoordinator();
    }
    const int agent = uniform(0, m_cluster->agentCount() - 1);
    const qint64 pid = m_cluster->agentPid(agent);
    // Every other agent's end is a preemption's SIGTERM: the agent hands its subtasks back within its grace (25 s)
    // and exits; the others are a power cut's SIGKILL: its leases wait for their deadlines. Alternating draws
    // nothing, so a seed's schedule stays what it was.
    const bool leaves = m_agentKills % 2 == 1;
    const int signal = leaves ? SIGTERM : SIGKILL;
    if (!m_cluster->stopAgent(agent, signal, leaves ? 40'000 : 15'000))
        return fail(QStringLiteral("agent %1 (pid %2) still runs after %3")
                        .arg(m_cluster->agent(agent).name)
                        .arg(pid)
                        .arg(leaves ? QStringLiteral("SIGTERM and its grace period") : QStringLiteral("SIGKILL")));
    ++m_agentKills;
    m_agentLeaves += leaves ? 1 : 0;
    note(QStringLiteral("%1 agent %2 (pid %3, kill %4); down %5 ms")
             .arg(leaves ? QStringLiteral("SIGTERM") : QStringLiteral("SIGKILL"))
             .arg(m_cluster->agent(agent).name)
             .arg(pid)
             .arg(m_agentKills)
             .arg(down));
    if (auto s = watch(down, true); !s)
        return s;
    return m_cluster->restartAgent(agent);
}

Status ChaosSoak::chaos()
{
    const qint64 until = qint64(m_options.seconds) * 1000;
    for (;;) {
        const qint64 now = m_clock.elapsed();
        const bool minima =
            m_agentKills >= m_options.minAgentKills && m_coordinatorKills >= m_options.minCoordinatorKills;
        if (now >= until && minima)
            break;
        if (now >= until + kMaxOvertimeMs)
            return fail(QStringLiteral("%1 agent and %2 coordinator kills in %3 s; %4 and %5 were asked for")
                            .arg(m_agentKills)
                            .arg(m_coordinatorKills)
                            .arg(now / 1000)
                            .arg(m_options.minAgentKills)
                            .arg(m_options.minCoordinatorKills));
        if (auto s = watch(uniform(m_options.killIntervalMinMs, m_options.killIntervalMaxMs), true); !s)
            return s;
        if (auto s = killAndRestart(); !s)
            return s;
    }
    m_chaosSeconds = double(m_clock.elapsed()) / 1000.0;
    note(QStringLiteral("chaos over: %1 agent and %2 coordinator kills; job %3 runs to its end")
             .arg(m_agentKills)
             .arg(m_coordinatorKills)
             .arg(m_jobs.last()));
    return {};
}

Status ChaosSoak::finish()
{
    const QDeadlineTimer deadline(qint64(m_options.finishTimeoutSeconds) * 1000);
    while (!m_currentCompleted) {
        if (deadline.hasExpired())
            return fail(QStringLiteral("job %1 did not complete within %2 s after the chaos; its status: %3")
                            .arg(m_jobs.last())
                            .arg(m_options.finishTimeoutSeconds)
                            .arg(compact(m_cluster->jobStatus(m_jobs.last()))));
        if (auto s = watch(kPollMs, false); !s)
            return s;
    }
    return {};
}

QJsonObject ChaosSoak::audit()
{
    AuditInput input;
    // The agents first, gently: nothing more arrives while the coordinator's view is read.
    for (int i = 0; i < (m_cluster ? m_cluster->agentCount() : 0); ++i)
        if (!m_cluster->stopAgent(i, SIGTERM, 20'000))
            m_cluster->stopAgent(i, SIGKILL);
    const auto readJobs = [&](QHash<qint64, QJsonObject>& into, bool exportWeights) {
        for (const qint64 id : std::as_const(m_jobs)) {
            // On a loaded machine one CLI call may time out; an empty status would read as version -1.
            QJsonObject status;
            for (int attempt = 0; attempt < 3 && status.isEmpty(); ++attempt)
                status = m_cluster->jobStatus(id);
            if (status.isEmpty())
                m_errors << QStringLiteral("`job status %1` did not answer three times").arg(id);
            else
                into.insert(id, status);
            if (!exportWeights)
                continue;
            const QString file = m_root + QStringLiteral("/export-%1.safetensors").arg(id);
            const CliRun exported =
                m_cluster->coordinator({QStringLiteral("job"), QStringLiteral("export"), QString::number(id),
                                        QStringLiteral("--out"), file});
            auto weights = SafeTensors::load(file);
            input.exportedVersion.insert(
                id, exported.exitCode == 0 && weights
                        ? weights->metadata()
                              .value(QStringLiteral("gleaner.version"), QStringLiteral("-1"))
                              .toLongLong()
                        : -1);
        }
    };
    QString database;
    if (m_cluster && m_cluster->coordinatorRunning()) {
        readJobs(input.statusBefore, true);
        m_cluster->stopCoordinator(SIGTERM);
        // The coordinator's view as it left it; then once more after a restart, which must not change it.
        if (test::PostgresServer* postgres = m_cluster->postgres()) {
            // The same on PostgreSQL: a copy of the database, made while no coordinator is connected to it.
            database = postgres->url(QStringLiteral("audit"));
            if (const QString error = postgres->createDatabase(QStringLiteral("audit"), E2eCluster::postgresDatabase());
                !error.isEmpty())
                m_errors << QStringLiteral("cannot copy the coordinator's database: %1").arg(error);
        } else {
            database = m_root + QStringLiteral("/audit.db");
            QFile::remove(database);
            if (!QFile::copy(m_cluster->coordinatorDir() + QStringLiteral("/gleaner.db"), database))
                m_errors << QStringLiteral("cannot copy the coordinator's database to %1").arg(database);
        }
        if (auto s = m_cluster->startCoordinator(60'000); s)
            readJobs(input.statusAfterRestart, false);
        else
            m_errors << QStringLiteral("the coordinator did not start for the audit: %1").arg(s.error());
        m_cluster->stopCoordinator(SIGTERM);
    }
    input.databasePath = database;
    for (int i = 0; i < (m_cluster ? m_cluster->agentCount() : 0); ++i)
        input.acknowledged.read(m_cluster->agent(i).name, m_cluster->agentLog(i));

    const AuditReport report = database.isEmpty() ? AuditReport{} : auditSoak(input);
    QStringList violations = m_errors + report.violations;
    if (database.isEmpty() && m_errors.isEmpty())
        violations << QStringLiteral("the coordinator was not running at the end; nothing could be audited");
    if (m_cluster)
        m_cluster->stopAll();

    QJsonObject figures = report.figures;
    const qint64 last = m_jobs.isEmpty() ? 0 : m_jobs.last();
    const QJsonObject lastStatus = input.statusBefore.value(last);
    figures.insert(QStringLiteral("seed"), qint64(m_options.seed));
    figures.insert(QStringLiteral("agents"), m_options.agents);
    figures.insert(QStringLiteral("chaos_s"), m_chaosSeconds);
    figures.insert(QStringLiteral("agent_kills"), m_agentKills);
    figures.insert(QStringLiteral("agent_sigterms"), m_agentLeaves); // of those, ended by SIGTERM: handed back
    figures.insert(QStringLiteral("coordinator_kills"), m_coordinatorKills);
    figures.insert(QStringLiteral("rounds"), qint64(m_jobs.size()));
    figures.insert(QStringLiteral("updates_accepted"), figures.value(QStringLiteral("updates")));
    figures.insert(QStringLiteral("final_version"), input.exportedVersion.value(last, -1));
    figures.insert(QStringLiteral("final_accuracy"), lastStatus.value(QStringLiteral("accuracy")));
    figures.insert(QStringLiteral("target_reached"),
                   lastStatus.value(QStringLiteral("state")).toString() == u"completed" &&
                       lastStatus.value(QStringLiteral("accuracy")).toDouble() >=
                           lastStatus.value(QStringLiteral("target_accuracy")).toDouble());
    figures.insert(QStringLiteral("seconds_to_target"), m_lastSecondsToTarget);
    figures.insert(QStringLiteral("violations"), QJsonArray::fromStringList(violations));
    figures.insert(QStringLiteral("ok"), violations.isEmpty());
    return figures;
}

} // namespace gleaner::e2e
