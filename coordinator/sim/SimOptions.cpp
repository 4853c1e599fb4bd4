#include "sim/SimOptions.h"

#include <QJsonDocument>
#include <QJsonObject>

#include <cmath>
#include <random>

namespace gleaner::coordinator::sim {
namespace {

Result<double> number(const QString& option, const QString& text, double min, double max)
{
    bool ok = false;
    const double value = text.toDouble(&ok);
    if (!ok || !std::isfinite(value) || value < min || value > max)
        return fail(QStringLiteral("%1: expected a number from %2 to %3, got \"%4\"").arg(option).arg(min).arg(max).arg(text));
    return value;
}

// A spec object given on the command line: a bare name takes its defaults (`key` set to the name); JSON gives the
// object as a job spec would. Parsed by Spec::fromJson, its errors named after the option.
template <typename Spec> Result<Spec> parseSpec(const QString& option, const QString& text, const QString& key)
{
    QJsonObject object;
    if (text.trimmed().startsWith(u'{')) {
        QJsonParseError error;
        const QJsonDocument document = QJsonDocument::fromJson(text.toUtf8(), &error);
        if (!document.isObject())
            return fail(QStringLiteral("%1: not a JSON object (%2)").arg(option, error.errorString()));
        object = document.object();
    } else {
        object.insert(key, text);
    }
    return Spec::fromJson(object, option);
}

} // namespace

QString SimOptions::usage()
{
    return QStringLiteral(
        "usage: gleaner-sim JOB.json [--agents C] [--speeds SPEEDS] [--rule RULE] [--upload UPLOAD]\n"
        "                   [--download DENSITY] [--epochs E] [--seed S] [--rate R] [--network SECONDS]\n"
        "                   [--jitter J] [--uplink MBIT] [--preemption P] [--on-preempt WHAT]\n"
        "                   [--churn SECONDS] [--retry SECONDS]\n"
        "                   [--speed-aware on|off] [--publish-interval MS] [--own-update on|off]\n"
        "                   [--carry-optimizer on|off] [--validate-every N] [--threads T] [--ignore-target]\n"
        "                   [--json FILE] [--csv FILE] [--quiet]\n"
        "       gleaner-sim JOB.json --baseline [--epochs E] [--rate R] [--validate-every N] [--json FILE]\n"
        "\n"
        "Simulates C agents training the job with the coordinator's own scheduler and aggregation rules on a\n"
        "simulated clock: every subtask is trained for real, but an agent of speed 1 takes 1/R simulated seconds\n"
        "a sample, so results do not depend on this machine's load. Same seed, same machine: the same output.\n"
        "\n"
        "  --agents C          simulated agents (default 4)\n"
        "  --speeds SPEEDS     relative speeds: a list (1,1,2,4; the last repeats), lognormal:SIGMA (median 1),\n"
        "                      or uniform:LOW:HIGH (default 1)\n"
        "  --rule RULE         vc-asgd, fedasync, fedbuff, delayed-nesterov or adaptive-nesterov with their\n"
        "                      defaults, or a JSON\n"
        "                      object as a job's \"aggregation\" (default: the job's rule); the job's\n"
        "                      ema_decay stays unless the object gives one\n"
        "  --upload UPLOAD     fp32, fp16, int8 or topk with their defaults, or a JSON object as a job's\n"
        "                      \"upload\" (default: the job's): results are encoded, decoded and counted in bytes\n"
        "  --download DENSITY  the share of each tensor's values a publication changes (the job's \"download\";\n"
        "                      below 1 agents fetch patches; needs a pseudo-gradient rule)\n"
        "  --epochs E          the job's max_epochs for this run\n"
        "  --speed-aware on|off  size subtasks to each agent's measured speed (the job's speed_aware)\n"
        "  --seed S            speeds, preemption and churn draws (default 1)\n"
        "  --rate R            samples per simulated second at speed 1 (default 1000)\n"
        "  --network SECONDS   download + upload time of a subtask (default 0)\n"
        "  --jitter J          each subtask takes its time times a factor drawn from 1 - J to 1 + J (default\n"
        "                      0.05): real machines' pace varies, and agents of one speed do not stay in step\n"
        "  --uplink MBIT       agents' uplink in Mbit/s: each upload adds its bytes' time (default: instant)\n"
        "  --preemption P      probability that a subtask is lost part-way (its agent is preempted)\n"
        "  --on-preempt WHAT   what the preempted agent does within its grace period: hand-back (its checkpoint;\n"
        "                      the next agent resumes at that step; default, as agents do), bare (handed back\n"
        "                      without a checkpoint: redone from step 0 at once) or keep (the lease expires at its\n"
        "                      deadline, then the work is redone)\n"
        "  --churn SECONDS     agents leave after a random time of this mean and come back as new agents\n"
        "  --retry SECONDS     an agent without work asks again after this long (default 10, as the coordinator says)\n"
        "  --publish-interval MS  the coordinator's publish_interval_ms (default 250): leases get weights this old\n"
        "  --own-update on|off an agent's next lease holds its own last result, published for it at once (default\n"
        "                      on, as the coordinator's lease_wait_for_own_update_ms does)\n"
        "  --carry-optimizer on|off  an agent starts each subtask of the job with the local optimizer state its\n"
        "                      previous one ended with, as agents do (default on); off: a fresh optimizer each time\n"
        "  --validate-every N  validate every N folded updates as well as at epoch ends (default shards / 5)\n"
        "  --threads T         libtorch threads for training (default 1); validation uses libtorch's default,\n"
        "                      as on the coordinator\n"
        "  --baseline          one process, one persistent optimizer, speed 1, over the same training set\n"
        "  --ignore-target     go on after the job's target accuracy is reached\n"
        "  --json FILE         the result as JSON (- for standard output)\n"
        "  --csv FILE          one line per update: time, agent, staleness, accuracy when validated\n"
        "  --quiet             no progress on standard error\n");
}

Result<SimOptions> SimOptions::parse(const QStringList& arguments)
{
    SimOptions options;
    for (qsizetype i = 0; i < arguments.size(); ++i) {
        const QString& arg = arguments.at(i);
        const auto value = [&]() -> Result<QString> {
            if (i + 1 >= arguments.size())
                return fail(QStringLiteral("%1: expected a value").arg(arg));
            return arguments.at(++i);
        };
        const auto integer = [&](int min, int max) -> Result<int> {
            auto text = value();
            if (!text)
                return fail(text.error());
            bool ok = false;
            const int n = text->toInt(&ok);
            if (!ok || n < min || n > max)
                return fail(QStringLiteral("%1: expected an integer from %2 to %3, got \"%4\"").arg(arg).arg(min).arg(max).arg(*text));
            return n;
        };
        const auto real = [&](double min, double max) -> Result<double> {
            auto text = value();
            if (!text)
                return fail(text.error());
            return number(arg, *text, min, max);
        };
        const auto onOff = [&]() -> Result<bool> {
            auto text = value();
            if (!text)
                return fail(text.error());
            if (*text != u"on" && *text != u"off")
                return fail(QStringLiteral("%1: expected on or off, got \"%2\"").arg(arg, *text));
            return *text == u"on";
        };
        Status status;
        const auto take = [&](auto result, auto& out) {
            if (result)
                out = *result;
            else
                status = fail(result.error());
        };
        if (arg == u"--agents") {
            take(integer(1, 4096), options.agents);
        } else if (arg == u"--speeds") {
            take(value(), options.speedsText);
        } else if (arg == u"--rule") {
            auto text = value();
            if (!text)
                return fail(text.error());
            auto rule = parseSpec<AggregationSpec>(arg, *text, QStringLiteral("rule"));
            if (!rule)
                return fail(rule.error());
            options.rule = *rule;
            options.ruleGivesEmaDecay = text->contains(u"\"ema_decay\"");
        } else if (arg == u"--upload") {
            auto text = value();
            if (!text)
                return fail(text.error());
            auto upload = parseSpec<UploadSpec>(arg, *text, QStringLiteral("encoding"));
            if (!upload)
                return fail(upload.error());
            options.upload = *upload;
        } else if (arg == u"--download") {
            double density = 1.0;
            take(real(1e-4, 1), density);
            options.downloadDensity = density;
        } else if (arg == u"--uplink") {
            take(real(0.001, 1e6), options.uplinkMbit);
        } else if (arg == u"--epochs") {
            take(integer(1, 100000), options.epochs);
        } else if (arg == u"--speed-aware") {
            bool on = false;
            take(onOff(), on);
            options.speedAware = on;
        } else if (arg == u"--carry-optimizer") {
            take(onOff(), options.carryOptimizer);
        } else if (arg == u"--own-update") {
            take(onOff(), options.waitForOwnUpdate);
        } else if (arg == u"--seed") {
            auto text = value();
            if (!text)
                return fail(text.error());
            bool ok = false;
            options.seed = text->toULongLong(&ok);
            if (!ok)
                return fail(QStringLiteral("--seed: expected a non-negative integer, got \"%1\"").arg(*text));
        } else if (arg == u"--rate") {
            take(real(1e-3, 1e12), options.rate);
        } else if (arg == u"--network") {
            take(real(0, 1e6), options.networkSeconds);
        } else if (arg == u"--jitter") {
            take(real(0, 0.9), options.jitter);
        } else if (arg == u"--preemption") {
            take(real(0, 0.95), options.preemption);
        } else if (arg == u"--on-preempt") {
            auto text = value();
            if (!text)
                return fail(text.error());
            if (*text == u"hand-back")
                options.onPreempt = SimOptions::OnPreempt::HandBack;
            else if (*text == u"bare")
                options.onPreempt = SimOptions::OnPreempt::Bare;
            else if (*text == u"keep")
                options.onPreempt = SimOptions::OnPreempt::Keep;
            else
                return fail(QStringLiteral("--on-preempt: expected hand-back, bare or keep, got \"%1\"").arg(*text));
        } else if (arg == u"--churn") {
            take(real(0, 1e9), options.churnSeconds);
        } else if (arg == u"--retry") {
            take(real(0.001, 1e6), options.retrySeconds);
        } else if (arg == u"--publish-interval") {
            take(integer(0, 3600000), options.publishIntervalMs);
        } else if (arg == u"--validate-every") {
            take(integer(0, 1000000), options.validateEvery);
        } else if (arg == u"--threads") {
            take(integer(1, 256), options.threads);
        } else if (arg == u"--baseline") {
            options.baseline = true;
        } else if (arg == u"--ignore-target") {
            options.ignoreTarget = true;
        } else if (arg == u"--json") {
            take(value(), options.jsonPath);
        } else if (arg == u"--csv") {
            take(value(), options.csvPath);
        } else if (arg == u"--quiet") {
            options.quiet = true;
        } else if (arg.startsWith(u"-") && arg != u"-") {
            return fail(QStringLiteral("unknown option %1 (gleaner-sim --help lists them)").arg(arg));
        } else if (options.jobPath.isEmpty()) {
            options.jobPath = arg;
        } else {
            return fail(QStringLiteral("one job file only: %1 and %2").arg(options.jobPath, arg));
        }
        if (!status)
            return fail(status.error());
    }
    if (options.jobPath.isEmpty())
        return fail(QStringLiteral("no job file given (for example resources/jobs/fashion-mnist-cnn.json)"));
    if (auto speeds = options.resolveSpeeds(); !speeds)
        return fail(speeds.error());
    return options;
}

Result<std::vector<double>> SimOptions::resolveSpeeds() const
{
    std::vector<double> speeds;
    const QString text = speedsText.trimmed();
    std::mt19937_64 draw(seed ^ 0x5eedu);
    const auto bad = [&](const QString& why) {
        return fail(QStringLiteral("--speeds \"%1\": %2 (a list such as 1,1,2, lognormal:SIGMA or uniform:LOW:HIGH)")
                        .arg(speedsText, why));
    };
    if (text.startsWith(u"lognormal:")) {
        auto sigma = number(QStringLiteral("--speeds lognormal"), text.mid(10), 0, 5);
        if (!sigma)
            return bad(sigma.error());
        std::normal_distribution<double> normal(0.0, *sigma);
        for (int i = 0; i < agents; ++i)
            speeds.push_back(std::exp(normal(draw)));
        return speeds;
    }
    if (text.startsWith(u"uniform:")) {
        const QStringList parts = text.mid(8).split(u':');
        if (parts.size() != 2)
            return bad(QStringLiteral("uniform takes LOW:HIGH"));
        auto low = number(QStringLiteral("--speeds uniform"), parts[0], 1e-3, 1e6);
        auto high = number(QStringLiteral("--speeds uniform"), parts[1], 1e-3, 1e6);
        if (!low || !high || *low > *high)
            return bad(QStringLiteral("LOW and HIGH must be positive, LOW at most HIGH"));
        std::uniform_real_distribution<double> uniform(*low, *high);
        for (int i = 0; i < agents; ++i)
            speeds.push_back(uniform(draw));
        return speeds;
    }
    const QStringList parts = text.split(u',');
    for (const QString& part : parts) {
        auto speed = number(QStringLiteral("--speeds"), part.trimmed(), 1e-3, 1e6);
        if (!speed)
            return bad(speed.error());
        speeds.push_back(*speed);
    }
    if (int(speeds.size()) > agents)
        return bad(QStringLiteral("%1 speeds for %2 agents").arg(speeds.size()).arg(agents));
    while (int(speeds.size()) < agents)
        speeds.push_back(speeds.back());
    return speeds;
}

} // namespace gleaner::coordinator::sim
