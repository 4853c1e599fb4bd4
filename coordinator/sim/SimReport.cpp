// What a gleaner-sim run reports: the JSON summary and the CSV of updates (Simulation.h).
#include "sim/Simulation.h"

#include <QJsonArray>

#include <algorithm>

namespace gleaner::coordinator::sim {

double SimReport::bestAccuracy() const
{
    double best = 0.0;
    for (const SimPoint& point : points)
        best = std::max(best, point.accuracy);
    return best;
}

QJsonObject SimReport::toJson(const SimOptions& options) const
{
    QJsonArray speedList;
    for (double speed : speeds)
        speedList.append(speed);
    QJsonArray epochs;
    QJsonArray validations;
    for (const SimPoint& point : points) {
        QJsonObject json{{QStringLiteral("epoch"), point.epoch},
                         {QStringLiteral("sim_seconds"), point.seconds},
                         {QStringLiteral("samples"), point.samples},
                         {QStringLiteral("accuracy"), point.accuracy},
                         {QStringLiteral("loss"), point.loss}};
        if (point.epochEnd)
            epochs.append(json);
        json.insert(QStringLiteral("version"), point.version);
        json.insert(QStringLiteral("epoch_end"), point.epochEnd);
        validations.append(json);
    }
    qint64 folded = 0;
    qint64 stalenessSum = 0;
    qint64 uploadBytes = 0;
    for (const SimUpdate& update : updates) {
        folded += update.folded;
        stalenessSum += update.staleness;
        uploadBytes += update.uploadBytes;
    }
    // What a lease's download cost by how far behind the agent's newest usable file was ("behind" 0: it held none).
    const auto fetchesJson = [&] {
        QJsonArray rows;
        for (const auto& [behind, fetches] : fetchesBehind) {
            const double perLease = double(fetches.bytes) / double(fetches.leases);
            rows.append(QJsonObject{{QStringLiteral("behind"), behind},
                                    {QStringLiteral("leases"), fetches.leases},
                                    {QStringLiteral("bytes_per_lease"), qRound64(perLease)},
                                    {QStringLiteral("ratio"), perLease > 0 ? double(weightsBytes) / perLease : 0.0}});
        }
        return rows;
    };
    const double perUpdate = updates.empty() ? 0.0 : double(uploadBytes) / double(updates.size());
    return QJsonObject{
        {QStringLiteral("job"), options.jobPath},
        {QStringLiteral("rule"), rule},
        {QStringLiteral("aggregation"), aggregation},
        {QStringLiteral("agents"), agents},
        {QStringLiteral("speeds"), speedList},
        {QStringLiteral("seed"), QString::number(options.seed)},
        {QStringLiteral("rate"), options.rate},
        {QStringLiteral("jitter"), options.jitter},
        {QStringLiteral("epochs"), epochs},
        {QStringLiteral("validations"), validations},
        {QStringLiteral("best_accuracy"), bestAccuracy()},
        {QStringLiteral("updates"), qint64(updates.size())},
        {QStringLiteral("folded"), folded},
        {QStringLiteral("mean_staleness"),
         updates.empty() ? 0.0 : double(stalenessSum) / double(updates.size())},
        {QStringLiteral("upload"), upload},
        {QStringLiteral("upload_bytes_per_update"), qRound64(perUpdate)},
        {QStringLiteral("weights_bytes"), weightsBytes},
        {QStringLiteral("upload_ratio"), perUpdate > 0 ? double(weightsBytes) / perUpdate : 0.0},
        {QStringLiteral("download"), download},
        {QStringLiteral("download_bytes_per_subtask"),
         leases > 0 ? qRound64(double(downloadBytes) / double(leases)) : 0},
        {QStringLiteral("download_ratio"),
         downloadBytes > 0 ? double(weightsBytes) * double(leases) / double(downloadBytes) : 0.0},
        {QStringLiteral("downloads_by_distance"), fetchesJson()},
        {QStringLiteral("preempted"), preempted},
        {QStringLiteral("on_preempt"),
         options.onPreempt == SimOptions::OnPreempt::HandBack ? QStringLiteral("hand-back")
         : options.onPreempt == SimOptions::OnPreempt::Bare   ? QStringLiteral("bare")
                                                              : QStringLiteral("keep")},
        {QStringLiteral("handed_back"), handedBack},
        {QStringLiteral("resumed_leases"), resumedLeases},
        {QStringLiteral("lost_train_seconds"), lostTrainSeconds},
        {QStringLiteral("ended"), ended},
        {QStringLiteral("width"), width},
    };
}

QByteArray SimReport::toCsv() const
{
    QByteArray csv = "sim_seconds,agent,staleness,folded,accuracy,upload_bytes\n";
    for (const SimUpdate& update : updates)
        csv += QStringLiteral("%1,%2,%3,%4,%5,%6\n")
                   .arg(update.seconds, 0, 'f', 3)
                   .arg(update.agent)
                   .arg(update.staleness)
                   .arg(update.folded ? 1 : 0)
                   .arg(update.accuracy ? QString::number(*update.accuracy, 'f', 4) : QString())
                   .arg(update.uploadBytes)
                   .toUtf8();
    return csv;
}

} // namespace gleaner::coordinator::sim
