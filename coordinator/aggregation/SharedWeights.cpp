#include "aggregation/SharedWeights.h"

#include "aggregation/UpdateBound.h"
#include "aggregation/WeightsKeeper.h"
#include "format/SafeTensors.h"

#include <QDeadlineTimer>
#include <QRandomGenerator>

#include <chrono>
#include <cstring>
#include <thread>

namespace gleaner::coordinator {
namespace {

using Meta = std::map<QByteArray, QByteArray>;

QByteArray field(const Meta& meta, const char* name)
{
    auto it = meta.find(QByteArray(name));
    return it == meta.end() ? QByteArray() : it->second;
}

qint64 number(const Meta& meta, const char* name)
{
    return field(meta, name).toLongLong();
}

QByteArray encodeSteps(const std::vector<double>& steps)
{
    QByteArray text;
    for (double step : steps) {
        if (!text.isEmpty())
            text += ' ';
        text += QByteArray::number(step, 'g', 17); // exact: the bound sees the same doubles in every process
    }
    return text;
}

Result<std::vector<double>> decodeSteps(const QByteArray& text)
{
    std::vector<double> steps;
    for (const QByteArray& word : text.split(' ')) {
        if (word.isEmpty())
            continue;
        bool ok = false;
        steps.push_back(word.toDouble(&ok));
        if (!ok)
            return fail(QStringLiteral("the fold steps in Redis are not numbers"));
    }
    return steps;
}

QByteArray newGeneration()
{
    const quint64 a = QRandomGenerator::system()->generate64();
    const quint64 b = QRandomGenerator::system()->generate64();
    return QByteArray::number(a, 16) + QByteArray::number(b, 16);
}

} // namespace

SharedWeights::SharedWeights(RedisConnection& redis, QString prefix)
    : m_redis(redis), m_prefix(prefix.toUtf8())
{
}

QByteArray SharedWeights::key(qint64 jobId, const char* what) const
{
    // The job in braces is a Redis Cluster hash tag: every key of one job lives on one node, which MULTI
    // needs.
    return m_prefix + ":{job:" + QByteArray::number(jobId) + "}:" + what;
}

QByteArray SharedWeights::chunkKey(qint64 jobId, char kind, int index) const
{
    return key(jobId, kind == 'w' ? "w:" : "s:") + QByteArray::number(index);
}

Result<std::map<QByteArray, QByteArray>> SharedWeights::watchMeta(qint64 jobId, QByteArray* lockHolder)
{
    const QByteArray metaKey = key(jobId, "meta");
    if (lockHolder)
        m_redis.queue({"WATCH", metaKey, key(jobId, "lock")});
    else
        m_redis.queue({"WATCH", metaKey});
    m_redis.queue({"HGETALL", metaKey});
    if (lockHolder)
        m_redis.queue({"GET", key(jobId, "lock")});
    auto replies = m_redis.replies();
    if (!replies)
        return fail(replies.error());
    for (const RedisReply& reply : *replies)
        if (reply.type == RedisReply::Type::Error)
            return fail(QStringLiteral("Redis answered: %1").arg(QString::fromUtf8(reply.text)));
    if (lockHolder)
        *lockHolder = replies->back().text;
    Meta meta;
    const auto& pairs = (*replies)[1].elements;
    for (size_t i = 0; i + 1 < pairs.size(); i += 2)
        meta[pairs[i].text] = pairs[i + 1].text;
    return meta;
}

Status SharedWeights::load(qint64 jobId, const Meta& meta)
{
    const QByteArray generation = field(meta, "generation");
    const qint64 version = number(meta, "version");
    if (auto it = m_cache.find(jobId);
        it != m_cache.end() && it->second.generation == generation && it->second.state.version == version)
        return {};
    m_cache.erase(jobId);

    // The meta decides how much is read: it must describe whole files of a size a job can have, in the chunks
    // this code writes, before a single chunk is asked for.
    const qint64 weightBytes64 = number(meta, "weights_bytes");
    const qint64 stateBytes64 = number(meta, "state_bytes");
    const auto chunksFor = [](qint64 bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; };
    if (weightBytes64 <= 0 || weightBytes64 > kMaxFileBytes || stateBytes64 < 0 ||
        stateBytes64 > kMaxFileBytes || number(meta, "weights_chunks") != chunksFor(weightBytes64) ||
        number(meta, "state_chunks") != chunksFor(stateBytes64))
        return fail(
            QStringLiteral("job %1's meta in Redis (%2) does not describe weights this coordinator wrote")
                .arg(jobId)
                .arg(QString::fromUtf8(key(jobId, "meta"))));
    const int weightChunks = int(chunksFor(weightBytes64));
    const int stateChunks = int(chunksFor(stateBytes64));
    for (int i = 0; i < weightChunks; ++i)
        m_redis.queue({"GET", chunkKey(jobId, 'w', i)});
    for (int i = 0; i < stateChunks; ++i)
        m_redis.queue({"GET", chunkKey(jobId, 's', i)});
    auto replies = m_redis.replies();
    if (!replies)
        return fail(replies.error());
    QByteArray weightBytes;
    QByteArray stateBytes;
    weightBytes.reserve(weightBytes64);
    stateBytes.reserve(stateBytes64);
    for (int i = 0; i < int(replies->size()); ++i) {
        const RedisReply& reply = (*replies)[size_t(i)];
        if (reply.type != RedisReply::Type::String)
            return fail(
                QStringLiteral("job %1's weights in Redis miss a chunk (%2)")
                    .arg(jobId)
                    .arg(QString::fromUtf8(i < weightChunks ? chunkKey(jobId, 'w', i)
                                                            : chunkKey(jobId, 's', i - weightChunks))));
        (i < weightChunks ? weightBytes : stateBytes) += reply.text;
    }
    if (weightBytes.size() != weightBytes64 || stateBytes.size() != stateBytes64)
        return fail(QStringLiteral("job %1's weights in Redis are not the size their meta says").arg(jobId));

    Cached cached;
    cached.generation = generation;
    cached.state.version = version;
    cached.weightFile = weightBytes;
    cached.stateFile = stateBytes;
    auto weights = SafeTensors::parse(std::move(weightBytes));
    if (!weights)
        return fail(
            QStringLiteral("job %1's weights in Redis cannot be read: %2").arg(jobId).arg(weights.error()));
    cached.state.weights = std::move(*weights);
    if (stateChunks > 0) {
        auto state = SafeTensors::parse(std::move(stateBytes));
        if (!state)
            return fail(QStringLiteral("job %1's rule state in Redis cannot be read: %2")
                            .arg(jobId)
                            .arg(state.error()));
        cached.state.ruleState = std::move(*state);
    }
    auto steps = decodeSteps(field(meta, "steps"));
    if (!steps)
        return fail(steps.error());
    cached.state.steps = std::move(*steps);
    m_cache[jobId] = std::move(cached);
    return {};
}

void SharedWeights::queueState(qint64 jobId, const SharedFoldState& state, const Meta* oldMeta,
                               const QByteArray& generation, const Cached* previous, Cached& written)
{
    // The chunks point into the serialized file (fromRawData): queue() copies them into hiredis's buffer.
    const QByteArray weightFile = SafeTensors::serialize(state.weights);
    const QByteArray stateFile =
        state.ruleState.isEmpty() ? QByteArray() : SafeTensors::serialize(state.ruleState);
    auto writeChunks = [&](char kind, const QByteArray& file, const char* countField) {
        const int count = int((file.size() + kChunkBytes - 1) / kChunkBytes);
        const QByteArray* before =
            previous ? (kind == 'w' ? &previous->weightFile : &previous->stateFile) : nullptr;
        for (int i = 0; i < count; ++i) {
            const qint64 at = qint64(i) * kChunkBytes;
            const qint64 length = std::min<qint64>(kChunkBytes, file.size() - at);
            // Serialization is deterministic: equal bytes at the same place are the same chunk.
            if (before && before->size() == file.size() &&
                std::memcmp(before->constData() + at, file.constData() + at, size_t(length)) == 0)
                continue;
            m_redis.queue({"SET", chunkKey(jobId, kind, i),
                           QByteArray::fromRawData(file.constData() + at, qsizetype(length))});
        }
        // Chunks beyond the new file go, as many as the old meta names: no more than the largest file has, so
        // that a damaged meta cannot make this a billion commands.
        const qint64 oldCount =
            oldMeta ? std::min(number(*oldMeta, countField), kMaxFileBytes / kChunkBytes) : 0;
        std::vector<QByteArray> stale{"DEL"};
        for (qint64 i = count; i < oldCount; ++i)
            stale.push_back(chunkKey(jobId, kind, int(i)));
        if (stale.size() > 1)
            m_redis.queue(stale);
        return count;
    };
    const int weightChunks = writeChunks('w', weightFile, "weights_chunks");
    const int stateChunks = writeChunks('s', stateFile, "state_chunks");
    m_redis.queue({"HSET", key(jobId, "meta"), "generation", generation, "version",
                   QByteArray::number(state.version), "weights_chunks", QByteArray::number(weightChunks),
                   "weights_bytes", QByteArray::number(weightFile.size()), "state_chunks",
                   QByteArray::number(stateChunks), "state_bytes", QByteArray::number(stateFile.size()),
                   "steps", encodeSteps(state.steps)});
    written.weightFile = weightFile;
    written.stateFile = stateFile;
}

Result<bool> SharedWeights::put(qint64 jobId, const SharedFoldState& state, Put when)
{
    for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
        auto meta = watchMeta(jobId);
        if (!meta)
            return fail(meta.error());
        const bool leave =
            when == Put::IfAbsent || (when == Put::IfOlder && number(*meta, "version") >= state.version);
        if (!meta->empty() && leave) {
            (void)m_redis.command({"UNWATCH"});
            return false;
        }
        const QByteArray generation = newGeneration();
        Cached written{generation, state, {}, {}, {}, {}};
        m_redis.queue({"MULTI"});
        queueState(jobId, state, &*meta, generation, nullptr, written);
        m_redis.queue({"DEL", key(jobId, "order"), key(jobId, "folded")});
        m_redis.queue({"EXEC"});
        auto replies = m_redis.replies();
        if (!replies)
            return fail(replies.error());
        if (replies->back().isNil()) {
            ++m_conflicts;
            continue;
        }
        if (replies->back().type != RedisReply::Type::Array)
            return fail(QStringLiteral("Redis refused to store job %1's weights: %2")
                            .arg(jobId)
                            .arg(QString::fromUtf8(replies->back().text)));
        m_cache[jobId] = std::move(written);
        return true;
    }
    return fail(QStringLiteral("job %1's weights in Redis kept changing while they were put").arg(jobId));
}

Result<std::optional<SharedFoldState>> SharedWeights::read(qint64 jobId)
{
    for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
        auto meta = watchMeta(jobId);
        if (!meta)
            return fail(meta.error());
        if (meta->empty()) {
            (void)m_redis.command({"UNWATCH"});
            return std::optional<SharedFoldState>();
        }
        auto loaded = load(jobId, *meta);
        // A read is consistent when the meta did not move while the chunks were read: an empty transaction
        // commits only then.
        m_redis.queue({"MULTI"});
        m_redis.queue({"EXEC"});
        auto replies = m_redis.replies();
        if (!replies)
            return fail(replies.error());
        if (replies->back().isNil()) {
            m_cache.erase(jobId);
            continue;
        }
        if (!loaded)
            return fail(loaded.error());
        return std::optional<SharedFoldState>(m_cache[jobId].state);
    }
    return fail(QStringLiteral("job %1's weights in Redis kept changing while they were read").arg(jobId));
}

void SharedWeights::releaseLock(qint64 jobId, const QByteArray& token)
{
    // Only while it is still ours: after its expiry another folder may hold it.
    (void)m_redis.command(
        {"EVAL",
         "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
         "return 0",
         "1", key(jobId, "lock"), token});
}

Result<SharedWeights::Folded> SharedWeights::fold(qint64 jobId, qint64 seq, const Step& step)
{
    const QByteArray seqText = QByteArray::number(seq);
    const QByteArray token = newGeneration();
    bool holding = false;
    int lost = 0;
    auto giveUp = [&](Error error) -> Error {
        if (holding)
            releaseLock(jobId, token);
        return error;
    };
    const QDeadlineTimer deadline(kFoldGiveUpMs);
    for (int attempt = 1; !deadline.hasExpired(); ++attempt) {
        QByteArray lockHolder;
        auto meta = watchMeta(jobId, &lockHolder);
        if (!meta)
            return giveUp(fail(meta.error()));
        if (meta->empty()) {
            (void)m_redis.command({"UNWATCH"});
            return giveUp(fail(QStringLiteral("job %1 has no weights in Redis (%2)")
                                   .arg(jobId)
                                   .arg(QString::fromUtf8(key(jobId, "meta")))));
        }
        if (!lockHolder.isEmpty() && lockHolder != token) {
            // Another folder lost too many races and goes first.
            (void)m_redis.command({"UNWATCH"});
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
        }
        if (!holding && lost >= kRacesBeforeLock) {
            (void)m_redis.command({"UNWATCH"});
            auto taken =
                m_redis.command({"SET", key(jobId, "lock"), token, "NX", "PX", QByteArray::number(kLockMs)});
            if (!taken)
                return fail(taken.error());
            holding = taken->type == RedisReply::Type::Status; // OK; nil when another took it first
            continue;
        }
        auto before = m_redis.command({"HGET", key(jobId, "folded"), seqText});
        if (!before)
            return giveUp(fail(before.error()));
        if (!before->isNil()) {
            (void)m_redis.command({"UNWATCH"});
            auto version =
                RedisConnection::toInteger(*before, QStringLiteral("the version of update %1").arg(seq));
            if (!version)
                return giveUp(fail(version.error()));
            if (holding)
                releaseLock(jobId, token);
            Folded folded;
            folded.version = *version;
            folded.attempts = attempt;
            folded.alreadyFolded = true;
            return folded;
        }
        if (auto s = load(jobId, *meta); !s) {
            // Chunks read while another fold committed do not fit together: that is a conflict, not damage.
            // An empty transaction tells them apart (it fails when the meta moved since the WATCH).
            m_redis.queue({"MULTI"});
            m_redis.queue({"EXEC"});
            auto replies = m_redis.replies();
            if (!replies)
                return giveUp(fail(replies.error()));
            m_cache.erase(jobId);
            if (replies->back().isNil()) {
                ++m_conflicts;
                ++lost;
                continue;
            }
            return giveUp(fail(s.error()));
        }
        Cached& cached = m_cache[jobId];
        SharedFoldState next = cached.state; // shares the buffers; the step writes into copies
        m_foldedRule.reset();
        if (auto s = step(next); !s) {
            (void)m_redis.command({"UNWATCH"});
            if (holding)
                releaseLock(jobId, token);
            Folded refused;
            refused.version = cached.state.version;
            refused.attempts = attempt;
            refused.refused = s.error();
            return refused;
        }
        next.version = cached.state.version + 1;
        m_redis.queue({"MULTI"});
        Cached written{cached.generation, {}, {}, {}, {}, {}};
        queueState(jobId, next, &*meta, cached.generation, &cached, written);
        m_redis.queue({"RPUSH", key(jobId, "order"), seqText});
        m_redis.queue({"HSET", key(jobId, "folded"), seqText, QByteArray::number(next.version)});
        if (holding)
            m_redis.queue({"DEL", key(jobId, "lock")}); // released with the commit
        m_redis.queue({"EXEC"});
        auto replies = m_redis.replies();
        if (!replies) {
            // Whether EXEC ran is unknown: the next read finds out (and a retry of this update finds it
            // folded). A lock it held expires.
            m_cache.erase(jobId);
            return fail(replies.error());
        }
        if (replies->back().isNil()) {
            // Another fold committed first (or took the lock): fold again onto its result, after a short
            // pause that spreads the retries of several losers.
            ++m_conflicts;
            ++lost;
            std::this_thread::sleep_for(
                std::chrono::microseconds(QRandomGenerator::global()->bounded(200 * std::min(attempt, 10))));
            continue;
        }
        holding = false;
        if (replies->back().type != RedisReply::Type::Array)
            return fail(QStringLiteral("Redis refused job %1's fold of update %2: %3")
                            .arg(jobId)
                            .arg(seq)
                            .arg(QString::fromUtf8(replies->back().text)));
        for (const RedisReply& reply : replies->back().elements)
            if (reply.type == RedisReply::Type::Error) {
                // A transaction's commands run even when one of them fails: the state is no longer whole.
                m_cache.erase(jobId);
                return fail(QStringLiteral("Redis failed part of job %1's fold of update %2: %3")
                                .arg(jobId)
                                .arg(seq)
                                .arg(QString::fromUtf8(reply.text)));
            }
        cached.state = std::move(next);
        cached.weightFile = std::move(written.weightFile);
        cached.stateFile = std::move(written.stateFile);
        cached.rule = std::move(m_foldedRule); // null after a step of its own (fold())
        cached.ruleSpec = m_foldedSpec;
        Folded folded;
        folded.version = cached.state.version;
        folded.attempts = attempt;
        return folded;
    }
    return giveUp(fail(QStringLiteral("update %1 of job %2 was not folded in within %3 s: other folds kept "
                                      "committing first; it is tried again later")
                           .arg(seq)
                           .arg(jobId)
                           .arg(kFoldGiveUpMs / 1000)));
}

Result<SharedWeights::Folded> SharedWeights::foldUpdate(qint64 jobId, qint64 seq, const AggregationSpec& spec,
                                                        const TensorBundle& update, UpdateContext context,
                                                        bool checked)
{
    return fold(jobId, seq, [&](SharedFoldState& state) -> Status {
        std::unique_ptr<AggregationRule> rule;
        if (const Cached& cached = m_cache[jobId];
            cached.rule && cached.ruleSpec == spec && cached.state.version == state.version) {
            rule = cached.rule->clone(); // this process made this version: its rule holds exactly that state
        } else {
            rule = AggregationRule::create(spec);
            if (auto s = rule->loadState(state.ruleState, state.weights); !s)
                return fail(
                    QStringLiteral("the rule's state in Redis does not fit the weights: %1").arg(s.error()));
        }
        UpdateBound steps = UpdateBound::fromWindow(state.steps);
        context.serverVersion = state.version;
        if (auto s = WeightsKeeper::fold(state.weights, rule, steps, update, context, checked); !s)
            return s;
        state.ruleState = rule->saveState();
        state.steps = steps.window();
        m_foldedRule = std::move(rule);
        m_foldedSpec = spec;
        return {};
    });
}

const SharedFoldState* SharedWeights::held(qint64 jobId) const
{
    auto it = m_cache.find(jobId);
    return it == m_cache.end() ? nullptr : &it->second.state;
}

Result<std::optional<qint64>> SharedWeights::foldedAt(qint64 jobId, qint64 seq)
{
    auto reply = m_redis.command({"HGET", key(jobId, "folded"), QByteArray::number(seq)});
    if (!reply)
        return fail(reply.error());
    if (reply->isNil())
        return std::optional<qint64>();
    auto version = RedisConnection::toInteger(*reply, QStringLiteral("the version of update %1").arg(seq));
    if (!version)
        return fail(version.error());
    return std::optional<qint64>(*version);
}

Result<std::vector<qint64>> SharedWeights::foldOrder(qint64 jobId)
{
    auto reply = m_redis.command({"LRANGE", key(jobId, "order"), "0", "-1"});
    if (!reply)
        return fail(reply.error());
    std::vector<qint64> order;
    order.reserve(reply->elements.size());
    for (const RedisReply& element : reply->elements) {
        auto seq =
            RedisConnection::toInteger(element, QStringLiteral("an entry of job %1's fold order").arg(jobId));
        if (!seq)
            return fail(seq.error());
        order.push_back(*seq);
    }
    return order;
}

Status SharedWeights::remove(qint64 jobId)
{
    auto meta = watchMeta(jobId);
    if (!meta)
        return fail(meta.error());
    (void)m_redis.command({"UNWATCH"});
    std::vector<QByteArray> words{"DEL", key(jobId, "meta"), key(jobId, "order"), key(jobId, "folded"),
                                  key(jobId, "lock")};
    const qint64 most = kMaxFileBytes / kChunkBytes; // as in queueState: a damaged meta cannot make this huge
    for (qint64 i = 0; i < std::min(number(*meta, "weights_chunks"), most); ++i)
        words.push_back(chunkKey(jobId, 'w', int(i)));
    for (qint64 i = 0; i < std::min(number(*meta, "state_chunks"), most); ++i)
        words.push_back(chunkKey(jobId, 's', int(i)));
    m_cache.erase(jobId);
    auto reply = m_redis.command(words);
    return reply ? Status() : fail(reply.error());
}

} // namespace gleaner::coordinator
