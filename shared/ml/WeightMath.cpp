#include <torch/torch.h>

#include "ml/TorchInternals.h"
#include "ml/WeightMath.h"

#include <cstring>
#include <limits>

namespace gleaner::ml::WeightMath {
namespace {

// Sum of squares of `a` (or of a - b), accumulated in float64 a chunk at a time: the float64 copies are
// bounded by the chunk, never a whole 5-million-value tensor. Nothing is written through the inputs, which
// are read-only views of bundles other threads may be reading.
double sumOfSquares(const torch::Tensor& a, const torch::Tensor* b)
{
    constexpr std::int64_t kChunk = std::int64_t(1) << 16;
    const torch::Tensor flatA = a.reshape({-1});
    const torch::Tensor flatB = b ? b->reshape({-1}) : torch::Tensor();
    const std::int64_t count = flatA.numel();
    double sum = 0.0;
    for (std::int64_t begin = 0; begin < count; begin += kChunk) {
        const std::int64_t end = std::min(count, begin + kChunk);
        // Out-of-place only: to(kFloat64) of an F64 view is the view itself.
        torch::Tensor chunk = flatA.slice(0, begin, end).to(torch::kFloat64);
        if (b)
            chunk = chunk - flatB.slice(0, begin, end).to(torch::kFloat64);
        sum += chunk.dot(chunk).item<double>();
    }
    return sum;
}

// The same for F32 values read straight from the bundles' bytes, in one pass: no float64 copies, no
// temporaries. Four float64 accumulators break the dependency chain of the sum, so the loop runs at memory
// speed; a NaN or an infinity in either input makes the sum non-finite.
double sumOfSquaresF32(QByteArrayView a, QByteArrayView b)
{
    const qsizetype count = a.size() / 4;
    const bool pair = !b.isNull();
    double lanes[4] = {0.0, 0.0, 0.0, 0.0};
    qsizetype i = 0;
    auto at = [](QByteArrayView bytes, qsizetype index) {
        float value;
        std::memcpy(&value, bytes.data() + 4 * index, 4);
        return double(value);
    };
    for (; i + 4 <= count; i += 4)
        for (int lane = 0; lane < 4; ++lane) {
            const double d = at(a, i + lane) - (pair ? at(b, i + lane) : 0.0);
            lanes[lane] += d * d;
        }
    for (; i < count; ++i) {
        const double d = at(a, i) - (pair ? at(b, i) : 0.0);
        lanes[0] += d * d;
    }
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// An F32 value is NaN or infinite exactly when its exponent bits are all ones. One pass over the raw bits,
// which the compiler vectorises; libtorch 1.13's isfinite() composes four passes and three temporary tensors,
// eight times slower on a 5 M-parameter model.
bool allFiniteF32(QByteArrayView bytes)
{
    const qsizetype count = bytes.size() / 4;
    quint32 nonFinite = 0;
    for (qsizetype i = 0; i < count; ++i) {
        quint32 bits;
        std::memcpy(&bits, bytes.data() + 4 * i, 4);
        nonFinite |= quint32((bits & 0x7f800000u) == 0x7f800000u);
    }
    return nonFinite == 0;
}

} // namespace

Status checkCompatible(const TensorBundle& reference, const TensorBundle& other)
{
    if (reference.size() != other.size())
        return fail(QStringLiteral("expected %1 tensors, got %2").arg(reference.size()).arg(other.size()));
    for (const auto& entry : reference.entries()) {
        const TensorEntry* match = other.find(entry.name);
        if (!match)
            return fail(QStringLiteral("tensor \"%1\" is missing").arg(entry.name));
        if (match->dtype != entry.dtype)
            return fail(QStringLiteral("tensor \"%1\" is %2, expected %3")
                            .arg(entry.name, dtypeName(match->dtype), dtypeName(entry.dtype)));
        if (match->shape != entry.shape)
            return fail(QStringLiteral("tensor \"%1\" has shape %2, expected %3")
                            .arg(entry.name, shapeToString(match->shape), shapeToString(entry.shape)));
    }
    return {};
}

Status blend(TensorBundle& server, const TensorBundle& client, double alpha)
{
    return guarded(QStringLiteral("blending weights"), [&]() -> Status {
        if (!(alpha >= 0.0 && alpha <= 1.0))
            return fail(QStringLiteral("alpha must lie in [0, 1], got %1").arg(alpha));
        for (const auto& entry : server.entries())
            if (entry.dtype == DType::U16 || entry.dtype == DType::U32 || entry.dtype == DType::U64)
                return fail(QStringLiteral("tensor \"%1\": %2 weights are not supported")
                                .arg(entry.name, dtypeName(entry.dtype)));
        if (auto s = checkCompatible(server, client); !s)
            return s;
        // Views first, so an unsupported dtype is refused before the first write. The server's buffer
        // detaches here when it is shared (a snapshot handed out keeps its values); the client's never does.
        std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs;
        for (const auto& entry : server.entries()) {
            auto update = constView(client, *client.find(entry.name));
            if (!update)
                return fail(update.error());
            pairs.emplace_back(torch::Tensor(), std::move(*update));
        }
        for (qsizetype i = 0; i < server.size(); ++i) {
            auto target = viewTensor(server, server.entries().at(i));
            if (!target)
                return fail(target.error());
            pairs[size_t(i)].first = std::move(*target);
        }
        torch::NoGradGuard noGrad;
        for (auto& [target, update] : pairs) {
            if (target.is_floating_point())
                target.mul_(alpha).add_(update, 1.0 - alpha);
            else
                torch::maximum_out(target, target, update);
        }
        return {};
    });
}

bool isRunningStatistic(QStringView name)
{
    return name.endsWith(u"running_mean") || name.endsWith(u"running_var");
}

namespace {

bool selected(const TensorEntry& entry, Part part)
{
    if (!dtypeIsFloating(entry.dtype))
        return false;
    switch (part) {
    case Part::Parameters: return !isRunningStatistic(entry.name);
    case Part::Statistics: return isRunningStatistic(entry.name);
    case Part::Floating: return true;
    }
    return false;
}

// Writable views of `target`'s chosen tensors, each with read-only views of the same tensor in `inputs`:
// everything is checked and viewed before the first write, so a failure changes nothing.
template <typename Select>
Result<std::vector<std::vector<torch::Tensor>>> viewsFor(TensorBundle& target,
                                                       std::initializer_list<const TensorBundle*> inputs,
                                                       Select select)
{
    for (const TensorBundle* input : inputs)
        if (auto s = checkCompatible(target, *input); !s)
            return fail(s.error());
    std::vector<std::vector<torch::Tensor>> rows;
    std::vector<const TensorEntry*> chosen;
    for (const auto& entry : target.entries()) {
        if (!select(entry))
            continue;
        std::vector<torch::Tensor> row(1);
        for (const TensorBundle* input : inputs) {
            auto view = constView(*input, *input->find(entry.name));
            if (!view)
                return fail(view.error());
            row.push_back(std::move(*view));
        }
        rows.push_back(std::move(row));
        chosen.push_back(&entry);
    }
    // Names, not entry pointers, from here: mutable views may detach the target's buffer.
    QStringList names;
    for (const TensorEntry* entry : chosen)
        names << entry->name;
    for (qsizetype i = 0; i < names.size(); ++i) {
        auto view = viewTensor(target, *target.find(names.at(i)));
        if (!view)
            return fail(view.error());
        rows[size_t(i)][0] = std::move(*view);
    }
    return rows;
}

} // namespace

Status addScaledDifference(TensorBundle& target, const TensorBundle& a, const TensorBundle& b, double scale, Part part)
{
    return guarded(QStringLiteral("adding a weight difference"), [&]() -> Status {
        auto rows = viewsFor(target, {&a, &b}, [&](const TensorEntry& e) { return selected(e, part); });
        if (!rows)
            return fail(rows.error());
        torch::NoGradGuard noGrad;
        for (auto& row : *rows)
            row[0].add_(row[1] - row[2], scale);
        return {};
    });
}

Status scaleAdd(TensorBundle& y, double alpha, const TensorBundle& x, double beta, Part part)
{
    return guarded(QStringLiteral("combining weights"), [&]() -> Status {
        auto rows = viewsFor(y, {&x}, [&](const TensorEntry& e) { return selected(e, part); });
        if (!rows)
            return fail(rows.error());
        torch::NoGradGuard noGrad;
        for (auto& row : *rows)
            row[0].mul_(alpha).add_(row[1], beta);
        return {};
    });
}

Status takeLargerCounters(TensorBundle& target, const TensorBundle& other)
{
    return guarded(QStringLiteral("merging counters"), [&]() -> Status {
        auto rows = viewsFor(target, {&other}, [](const TensorEntry& e) { return !dtypeIsFloating(e.dtype); });
        if (!rows)
            return fail(rows.error());
        torch::NoGradGuard noGrad;
        for (auto& row : *rows)
            torch::maximum_out(row[0], row[0], row[1]);
        return {};
    });
}

TensorBundle zerosLike(const TensorBundle& like)
{
    TensorBundle zeros;
    for (const auto& entry : like.entries())
        zeros.addZeroed(entry.name, entry.dtype, entry.shape);
    return zeros;
}

bool allFinite(const TensorBundle& weights, QString* where)
{
    const TensorEntry* failed = nullptr; // the first offending tensor, or the one where the check failed
    const bool finite = guardedOr(QStringLiteral("checking weights for NaN and infinity"), false, [&] {
        for (const auto& entry : weights.entries()) {
            if (!dtypeIsFloating(entry.dtype) || entry.byteSize == 0)
                continue;
            failed = &entry;
            if (entry.dtype == DType::F32) {
                if (!allFiniteF32(weights.data(entry)))
                    return false;
                continue;
            }
            auto view = constView(weights, entry);
            if (!view || !torch::isfinite(*view).all().item<bool>())
                return false;
        }
        return true;
    });
    if (!finite && where)
        *where = failed ? failed->name : QString();
    return finite;
}

double l2Norm(const TensorBundle& weights, Part part)
{
    return guardedOr(QStringLiteral("the L2 norm of weights"), std::numeric_limits<double>::quiet_NaN(), [&] {
        double sum = 0.0;
        for (const auto& entry : weights.entries()) {
            if (!selected(entry, part) || entry.byteSize == 0)
                continue;
            if (entry.dtype == DType::F32) {
                sum += sumOfSquaresF32(weights.data(entry), QByteArrayView());
                continue;
            }
            auto view = constView(weights, entry);
            if (!view)
                return std::numeric_limits<double>::quiet_NaN();
            sum += sumOfSquares(*view, nullptr);
        }
        return std::sqrt(sum);
    });
}

Result<double> l2Distance(const TensorBundle& a, const TensorBundle& b, Part part)
{
    if (auto s = checkCompatible(a, b); !s)
        return fail(s.error());
    return guarded(QStringLiteral("the L2 distance of weights"), [&]() -> Result<double> {
        double sum = 0.0;
        for (const auto& entry : a.entries()) {
            if (!selected(entry, part) || entry.byteSize == 0)
                continue;
            const TensorEntry& other = *b.find(entry.name);
            if (entry.dtype == DType::F32) {
                sum += sumOfSquaresF32(a.data(entry), b.data(other));
                continue;
            }
            auto viewA = constView(a, entry);
            auto viewB = constView(b, other);
            if (!viewA || !viewB)
                return fail(viewA ? viewB.error() : viewA.error());
            sum += sumOfSquares(*viewA, &*viewB);
        }
        return std::sqrt(sum);
    });
}

} // namespace gleaner::ml::WeightMath
