#pragma once
// The admin's jobs and their life: submitted (the spec and a TorchScript model checked first), listed, shown,
// paused, resumed, cancelled; validated at each epoch's end and every validate_every_updates updates; and
// ended, when the target accuracy or the epoch budget is reached, when the admin cancels, or when another
// coordinator of the deployment ended it. Taking a job up and importing it is JobTakeUp's. State thread only,
// but for the model check of submit(specText, respond).

#include "http/HttpTypes.h"
#include "jobs/JobState.h"
#include "util/Clock.h"
#include "util/SerialExecutor.h"

#include <QJsonArray>

#include <functional>
#include <map>

namespace gleaner::coordinator {

class AdmissionCache;
class Database;
class DashboardFeed;
class JobRecords;
class JobTakeUp;
class JobViews;
class Scheduler;
class ValidationRunner;
class WeightsKeeper;
struct CoordinatorConfig;

class JobDesk
{
public:
    struct Parts
    {
        std::map<qint64, JobState>& jobs;
        Database& db;
        JobRecords& records;
        JobTakeUp& takeUp;
        Scheduler& scheduler;
        AdmissionCache& admission;
        WeightsKeeper& weights;
        ValidationRunner& validation;
        JobViews& views;
        DashboardFeed& feed;
        SerialExecutor& programs; // TorchScript models loaded and checked off the state thread
        SerialExecutor& state;
    };
    // `doesHousekeeping`: whether this coordinator validates (always alone; among several, the housekeeper).
    JobDesk(Parts parts, const CoordinatorConfig& config, const Clock& clock,
            std::function<bool()> doesHousekeeping);

    JobState* find(qint64 jobId);

    // POST /api/v1/jobs: the spec (JSON) -> 201 with the job's id, its import started.
    HttpResponse submit(const QByteArray& specText);
    // [any thread] The same, with a TorchScript model loaded and checked on the programs thread first (a
    // large archive takes seconds), answering later.
    void submit(const QByteArray& specText, Responder respond);
    HttpResponse list();
    HttpResponse status(qint64 jobId);
    HttpResponse setStatus(qint64 jobId, const QByteArray& action); // "pause", "resume", "cancel"
    // `persist` false: another coordinator of the deployment ended it, and the database says so already.
    void finish(JobState& job, JobStatus status, const QString& reason, bool persist = true);

    // Starts the end-of-epoch validation of every complete epoch that has none recorded or in flight.
    void scheduleValidations(JobState& job);
    // An update of the job's `epoch` was queued for its fold: the end-of-epoch and intermediate validations
    // it makes due, and the next epoch when this one is complete.
    void afterUpdateQueued(JobState& job, int epoch);
    // The validation thread's reports (through the weights thread's listener).
    void validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy, double loss);
    void validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error);

private:
    // submit once the spec's model was checked (JobImporter::checkModel): `tensors` or why not.
    HttpResponse submitChecked(const QByteArray& specText, const Result<QJsonArray>& tensors);
    // Whether every update received for epochs up to `epoch` is folded in (or refused).
    bool epochFolded(const JobState& job, int epoch);

    Parts m_parts;
    const CoordinatorConfig& m_config;
    const Clock& m_clock;
    const std::function<bool()> m_doesHousekeeping;
};

} // namespace gleaner::coordinator
