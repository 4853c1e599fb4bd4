// Fuzzes the job spec parsers (shared/spec: JobSpec and the ModelSpec, OptimizerSpec, DatasetSpec,
// AggregationSpec and AugmentSpec it holds, all read through JsonFields): what an admin submits, and what every task manifest
// carries to agents. The same JSON object is also given to each nested parser directly, so their own rules
// are reached without a whole valid job around them. Promises checked: a refusal has a message; an accepted
// spec survives toJson() and the JSON text the coordinator stores (fromJson(toJson(x)) == x, as the headers
// promise).

#include "FuzzSupport.h"

#include "spec/JobSpec.h"

#include <QJsonDocument>

using namespace gleaner;

namespace {

template <typename Spec> void checkRoundTrip(const Result<Spec>& spec, const char* what)
{
    if (!spec) {
        fuzz::check(!spec.error().isEmpty(), "a refused spec has a message", QString::fromLatin1(what));
        return;
    }
    const QJsonObject json = spec->toJson();
    const Result<Spec> again = Spec::fromJson(json);
    fuzz::check(again && *again == *spec, "fromJson(toJson(x)) == x",
                QString::fromLatin1(what) + u": " +
                    (again ? QString::fromUtf8(QJsonDocument(json).toJson()) : again.error()));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    fuzz::silenceQtMessages();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray text = fuzz::bytes(data, size);
    const Result<JobSpec> job = JobSpec::fromJsonText(text);
    checkRoundTrip(job, "job");
    if (job) {
        // The text the coordinator keeps, read back as an admin's submission would be.
        const QByteArray stored = QJsonDocument(job->toJson()).toJson(QJsonDocument::Compact);
        const Result<JobSpec> reread = JobSpec::fromJsonText(stored);
        fuzz::check(reread && *reread == *job, "a job reads back from its stored text",
                    QString::fromUtf8(stored));
    }

    const QJsonDocument document = QJsonDocument::fromJson(text);
    if (!document.isObject())
        return 0;
    const QJsonObject object = document.object();
    checkRoundTrip(ModelSpec::fromJson(object), "model");
    checkRoundTrip(OptimizerSpec::fromJson(object), "optimizer");
    checkRoundTrip(DatasetSpec::fromJson(object), "dataset");
    checkRoundTrip(AggregationSpec::fromJson(object), "aggregation");
    const Result<AugmentSpec> augment = AugmentSpec::fromJson(object);
    checkRoundTrip(augment, "augment");
    if (augment) // whatever the shape, a fit is answered with a value and a refusal with a message
        if (auto fits = augment->checkInput({3, 32, 32}); !fits)
            fuzz::check(!fits.error().isEmpty(), "a refused augmentation has a message", QString());
    return 0;
}
