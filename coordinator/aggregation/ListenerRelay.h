#pragma once
// A WeightsListener that hands each report to another thread (`post`) and makes it there to its target: the
// weights and validation threads report to the state thread in the order they made the reports. The target is
// set once the state thread's owners exist, and read only on that thread; a report made while none is set is
// dropped (none is: no job is loaded before).

#include "aggregation/WeightsListener.h"

#include <functional>
#include <utility>

namespace gleaner::coordinator {

class ListenerRelay final : public WeightsListener
{
public:
    using Post = std::function<void(std::function<void()>)>;
    explicit ListenerRelay(Post post) : m_post(std::move(post)) {}

    // On the thread `post` hands to.
    void setTarget(WeightsListener* target) { m_target = target; }

    void applied(qint64 jobId, qint64 seq, qint64 version) override
    {
        relay([=](WeightsListener& t) { t.applied(jobId, seq, version); });
    }
    void foldRefused(qint64 jobId, qint64 seq, const QString& reason, bool agentsFault) override
    {
        relay([=](WeightsListener& t) { t.foldRefused(jobId, seq, reason, agentsFault); });
    }
    void published(qint64 jobId, std::optional<PublishedWeights> published, bool forParked) override
    {
        relay([=, published = std::move(published)](WeightsListener& t) {
            t.published(jobId, published, forParked);
        });
    }
    void snapshotWritten(qint64 jobId, qint64 version, qint64 lastSeq, const QString& sha,
                         const QString& ruleSha) override
    {
        relay([=](WeightsListener& t) { t.snapshotWritten(jobId, version, lastSeq, sha, ruleSha); });
    }
    void validated(qint64 jobId, int epoch, bool epochEnd, qint64 version, double accuracy,
                   double loss) override
    {
        relay([=](WeightsListener& t) { t.validated(jobId, epoch, epochEnd, version, accuracy, loss); });
    }
    void validationFailed(qint64 jobId, int epoch, bool epochEnd, const QString& error) override
    {
        relay([=](WeightsListener& t) { t.validationFailed(jobId, epoch, epochEnd, error); });
    }
    void widthMeasured(qint64 jobId, qint64 version, double noiseScale) override
    {
        relay([=](WeightsListener& t) { t.widthMeasured(jobId, version, noiseScale); });
    }

private:
    template <typename Call> void relay(Call call)
    {
        m_post([this, call = std::move(call)] {
            if (m_target)
                call(*m_target);
        });
    }

    const Post m_post;
    WeightsListener* m_target = nullptr;
};

} // namespace gleaner::coordinator
