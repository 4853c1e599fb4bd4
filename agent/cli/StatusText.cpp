#include "cli/StatusText.h"

#include "util/DurationText.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonValue>
#include <QLocale>
#include <QStringList>

#include <algorithm>
#include <cmath>
#include <optional>

namespace gleaner::agent::cli {
namespace {

std::optional<double> number(const QJsonObject& object, const char* key)
{
    const QJsonValue value = object.value(QLatin1StringView(key));
    if (!value.isDouble() || !std::isfinite(value.toDouble()))
        return std::nullopt;
    return value.toDouble();
}

// A string, or a number written as one (ids are either); empty when absent or null.
QString text(const QJsonObject& object, const char* key)
{
    const QJsonValue value = object.value(QLatin1StringView(key));
    if (value.isString())
        return value.toString();
    if (value.isDouble())
        return QString::number(value.toDouble(), 'g', 15);
    return {};
}

QString integer(double value)
{
    return QString::number(static_cast<qint64>(std::llround(value)));
}

QString loss(double value)
{
    return QString::number(value, 'g', 4);
}

QString speed(double samplesPerSecond)
{
    return (samplesPerSecond >= 100 ? integer(samplesPerSecond) : QString::number(samplesPerSecond, 'f', 1)) +
           QStringLiteral(" samples/s");
}

// "fashion-cnn (job j-1), epoch 3, shard 12", from whatever of these is known.
QString subtaskName(const QJsonObject& subtask)
{
    QStringList parts;
    const QJsonObject job = subtask.value(QStringLiteral("job")).toObject();
    const QString jobName = text(job, "name");
    const QString jobId = text(job, "id");
    if (!jobName.isEmpty())
        parts << (jobId.isEmpty() ? jobName : QStringLiteral("%1 (job %2)").arg(jobName, jobId));
    else if (!jobId.isEmpty())
        parts << QStringLiteral("job %1").arg(jobId);
    else if (const QString lease = text(subtask, "lease_id"); !lease.isEmpty())
        parts << QStringLiteral("lease %1").arg(lease);
    else
        parts << QStringLiteral("subtask");
    if (const auto epoch = number(subtask, "epoch"))
        parts << QStringLiteral("epoch %1").arg(integer(*epoch));
    if (const auto shard = number(subtask, "shard"))
        parts << QStringLiteral("shard %1").arg(integer(*shard));
    return parts.join(QStringLiteral(", "));
}

// "62% (620/1000), loss 0.4123, 512 samples/s, 4 min 10 s left": the progress fields that mean something. An
// agent may send zeros for a subtask that has not started training: no loss before the first step, no speed
// of 0.
QStringList progressParts(const QJsonObject& progress)
{
    QStringList parts;
    const auto step = number(progress, "step");
    const auto of = number(progress, "of");
    if (step && of && *of > 0)
        parts << QStringLiteral("%1% (%2/%3)")
                     .arg(integer(std::floor(std::clamp(*step / *of, 0.0, 1.0) * 100)), integer(*step),
                          integer(*of));
    else if (step && *step > 0)
        parts << QStringLiteral("step %1").arg(integer(*step));
    const bool started = !step || *step > 0;
    if (const auto value = number(progress, "loss"); value && started)
        parts << QStringLiteral("loss %1").arg(loss(*value));
    if (const auto value = number(progress, "samples_per_s"); value && *value > 0)
        parts << speed(*value);
    if (const auto value = number(progress, "eta_seconds"); value && started)
        parts << QStringLiteral("%1 left").arg(formatDuration(*value));
    return parts;
}

QString subtaskLine(const QJsonObject& subtask, qint64 nowMs)
{
    QStringList parts;
    const QString state = text(subtask, "state");
    parts << (state.isEmpty() ? QStringLiteral("state unknown") : state);
    parts << progressParts(subtask);
    if (const auto deadline = number(subtask, "deadline_ms"); deadline && nowMs > 0)
        parts << (*deadline > double(nowMs) ? QStringLiteral("lease ends in %1")
                                                  .arg(formatDuration((*deadline - double(nowMs)) / 1000))
                                            : QStringLiteral("lease expired"));
    return QStringLiteral("  %1: %2\n").arg(subtaskName(subtask), parts.join(QStringLiteral(", ")));
}

QString coordinatorLine(const QJsonObject& coordinator)
{
    QString line = text(coordinator, "url");
    if (line.isEmpty())
        line = QStringLiteral("(not configured)");
    const QJsonValue reachable = coordinator.value(QStringLiteral("reachable"));
    if (reachable.isBool()) {
        line += reachable.toBool() ? QStringLiteral(", reachable") : QStringLiteral(", unreachable");
        if (!reachable.toBool()) {
            if (const QString error = text(coordinator, "last_error"); !error.isEmpty())
                line += QStringLiteral(": ") + error;
            if (const auto next = number(coordinator, "next_try_ms"))
                line += QStringLiteral("; next try in %1").arg(formatDuration(*next / 1000));
        }
    }
    return line;
}

QString totalsLine(const QJsonObject& totals)
{
    QStringList parts;
    if (const auto done = number(totals, "subtasks_done"))
        parts << QStringLiteral("%1 subtasks done").arg(integer(*done));
    if (const auto failed = number(totals, "subtasks_failed"))
        parts << QStringLiteral("%1 failed").arg(integer(*failed));
    if (const auto samples = number(totals, "samples"))
        parts << QStringLiteral("%1 samples").arg(integer(*samples));
    if (const auto seconds = number(totals, "train_seconds"))
        parts << QStringLiteral("%1 of training").arg(formatDuration(*seconds));
    const auto up = number(totals, "uploaded_bytes");
    const auto down = number(totals, "downloaded_bytes");
    if ((up && *up > 0) || (down && *down > 0))
        parts << QStringLiteral("%1 sent, %2 received")
                     .arg(QLocale::c().formattedDataSize(qint64(up.value_or(0)), 1, QLocale::DataSizeSIFormat),
                          QLocale::c().formattedDataSize(qint64(down.value_or(0)), 1, QLocale::DataSizeSIFormat));
    return parts.join(QStringLiteral(", "));
}

} // namespace

QString formatDuration(double seconds)
{
    return durationText(std::llround(seconds));
}

// "desktop: idle 42 s (x11), on mains, other programs 3% CPU", or "dedicated machine".
static QString desktopLine(const QJsonObject& policy)
{
    if (policy.value(QStringLiteral("dedicated")).toBool())
        return QStringLiteral("dedicated machine (no desktop policy)");
    QStringList parts;
    const QString source = text(policy, "idle_source");
    if (const auto idle = number(policy, "idle_seconds"))
        parts << QStringLiteral("user idle %1 s (%2)").arg(integer(*idle), source);
    else
        parts << QStringLiteral("user idle time unknown (no idle source)");
    const QJsonValue battery = policy.value(QStringLiteral("on_battery"));
    if (battery.isBool())
        parts << (battery.toBool() ? QStringLiteral("on battery") : QStringLiteral("on mains power"));
    if (const auto cpu = number(policy, "other_cpu_percent"))
        parts << QStringLiteral("other programs %1% CPU").arg(integer(*cpu));
    if (const QString by = text(policy, "inhibited_by"); !by.isEmpty())
        parts << QStringLiteral("kept awake by %1").arg(by);
    return parts.join(QStringLiteral(", "));
}

// "NVIDIA RTX A2000 (2 GPUs)", "none (the NVIDIA driver sees no GPU)" or the note of why nothing is known.
static QString gpuLine(const QJsonObject& gpu)
{
    const double count = number(gpu, "count").value_or(0);
    if (count >= 1)
        return QStringLiteral("%1 (%2 GPU%3)").arg(text(gpu, "name"), integer(count),
                                                  count < 2 ? QString() : QStringLiteral("s"));
    if (const QString note = text(gpu, "note"); !note.isEmpty())
        return QStringLiteral("none: ") + note;
    return QStringLiteral("none (the NVIDIA driver sees no GPU)");
}

QString formatStatus(const QJsonObject& status, qint64 nowMs)
{
    QString out;
    const QJsonArray subtasks = status.value(QStringLiteral("subtasks")).toArray();

    QString state = text(status, "state");
    if (state.isEmpty())
        state = QStringLiteral("unknown");
    if (const QString reason = text(status, "reason"); !reason.isEmpty())
        state += QStringLiteral(" (%1)").arg(reason);
    out += QStringLiteral("State:        %1\n").arg(state);

    const QString name = text(status, "name");
    const QString agentId = text(status, "agent_id");
    if (!name.isEmpty() || !agentId.isEmpty()) {
        QString agent = name.isEmpty() ? QStringLiteral("agent %1").arg(agentId) : name;
        if (!name.isEmpty() && !agentId.isEmpty())
            agent += QStringLiteral(" (agent %1)").arg(agentId);
        out += QStringLiteral("Agent:        %1\n").arg(agent);
    }
    if (const QString dataDir = text(status, "data_dir"); !dataDir.isEmpty())
        out += QStringLiteral("Data:         %1\n").arg(dataDir);
    const QJsonValue coordinator = status.value(QStringLiteral("coordinator"));
    if (coordinator.isObject())
        out += QStringLiteral("Coordinator:  %1\n").arg(coordinatorLine(coordinator.toObject()));
    if (const QJsonValue policy = status.value(QStringLiteral("policy")); policy.isObject())
        out += QStringLiteral("Desktop:      %1\n").arg(desktopLine(policy.toObject()));
    // The NVIDIA GPUs, or why none is known ("no NVIDIA driver ..." on most machines).
    if (const QJsonValue gpu = status.value(QStringLiteral("gpu")); gpu.isObject())
        out += QStringLiteral("GPU:          %1\n").arg(gpuLine(gpu.toObject()));
    // What the workers' sandbox holds, as the agent summed it up once a worker reported.
    if (const QJsonValue sandbox = status.value(QStringLiteral("sandbox")); sandbox.isObject())
        if (const QString summary = text(sandbox.toObject(), "summary"); !summary.isEmpty())
            out += QStringLiteral("Sandbox:      %1\n").arg(summary);

    QString heading =
        QStringLiteral("Subtasks:     %1")
            .arg(subtasks.isEmpty() ? QStringLiteral("none") : QString::number(subtasks.size()));
    if (const auto maxTasks = number(status, "max_tasks"))
        heading += QStringLiteral(" (at most %1 at once)").arg(integer(*maxTasks));
    out += heading + u'\n';
    for (const QJsonValue& subtask : subtasks)
        out += subtaskLine(subtask.toObject(), nowMs);

    const QJsonValue totals = status.value(QStringLiteral("totals"));
    if (totals.isObject())
        if (const QString line = totalsLine(totals.toObject()); !line.isEmpty())
            out += QStringLiteral("Totals:       %1\n").arg(line);
    return out;
}

QString formatEvent(const QJsonObject& event)
{
    const QString name = text(event, "event");
    if (name == u"hello")
        return QStringLiteral("connected to gleaner-agent %1 (pid %2)")
            .arg(text(event, "agent_version"), text(event, "pid"));
    if (name == u"state") {
        QString line = QStringLiteral("state: %1").arg(text(event, "state"));
        if (const QString reason = text(event, "reason"); !reason.isEmpty())
            line += QStringLiteral(" (%1)").arg(reason);
        return line;
    }
    if (name == u"subtask") {
        QString line = QStringLiteral("subtask %1: %2").arg(subtaskName(event), text(event, "state"));
        if (const QString lease = text(event, "lease_id"); !lease.isEmpty() && event.value(u"job").isObject())
            line += QStringLiteral(" [lease %1]").arg(lease);
        if (const QString error = text(event, "error"); !error.isEmpty())
            line += QStringLiteral(": ") + error;
        return line;
    }
    if (name == u"progress") {
        const QString lease = text(event, "lease_id");
        return QStringLiteral("progress%1: %2")
            .arg(lease.isEmpty() ? QString() : QStringLiteral(" [lease %1]").arg(lease),
                 progressParts(event).join(QStringLiteral(", ")));
    }
    if (name == u"log") {
        QString level = text(event, "level");
        if (level.isEmpty())
            level = QStringLiteral("info");
        return QStringLiteral("%1: %2").arg(level, text(event, "message"));
    }
    if (name == u"coordinator") {
        const QJsonValue reachable = event.value(QStringLiteral("reachable"));
        QString line = QStringLiteral("coordinator: %1")
                           .arg(!reachable.isBool() ? QStringLiteral("state unknown")
                                                    : (reachable.toBool() ? QStringLiteral("reachable")
                                                                          : QStringLiteral("unreachable")));
        if (const QString error = text(event, "last_error"); !error.isEmpty() && !reachable.toBool())
            line += QStringLiteral(" (%1)").arg(error);
        return line;
    }
    // An event this program does not know (a newer agent): shown as it came.
    return QString::fromUtf8(QJsonDocument(event).toJson(QJsonDocument::Compact));
}

} // namespace gleaner::agent::cli
