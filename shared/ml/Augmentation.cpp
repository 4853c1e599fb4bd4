#include <torch/torch.h>

#include "ml/Augmentation.h"
#include "ml/Device.h"
#include "ml/TorchInternals.h"

#include <algorithm>

namespace gleaner::ml {
namespace {

// SplitMix64's output function: a bijection that spreads every input bit over the whole word.
quint64 mix(quint64 x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// Sets the augmentation's draws apart from any other use of the same seed.
constexpr quint64 kStream = 0x6175676D656E7400ULL; // "augment"

torch::Tensor int64Tensor(const std::vector<int64_t>& values, const torch::Device& device)
{
    torch::Tensor cpu = torch::empty({int64_t(values.size())}, torch::TensorOptions().dtype(torch::kInt64));
    std::copy(values.begin(), values.end(), cpu.data_ptr<int64_t>());
    return cpu.to(device);
}

} // namespace

std::vector<Augmentation::Draw> Augmentation::draws(const AugmentSpec& spec, quint64 seed, int epoch,
                                                    qint64 batch, qint64 samples)
{
    std::vector<Draw> out(size_t(std::max<qint64>(0, samples)));
    const quint64 key = mix(mix(mix(seed ^ kStream) ^ quint64(qint64(epoch))) ^ quint64(batch));
    const quint64 span = quint64(2 * spec.cropPadding + 1);
    for (size_t i = 0; i < out.size(); ++i) {
        // One word per sample: the low 32 bits place the window's row, the next 31 its column, the top bit
        // decides the flip. The modulo's bias is below 2^-20 for any allowed padding.
        const quint64 r = mix(key + quint64(i));
        out[i].top = int((r & 0xFFFFFFFFULL) % span);
        out[i].left = int(((r >> 32) & 0x7FFFFFFFULL) % span);
        out[i].flip = spec.flip && (r >> 63) != 0;
    }
    return out;
}

torch::Tensor augmentBatch(const torch::Tensor& batch, const AugmentSpec& spec,
                           const QList<qint64>& inputShape, quint64 seed, int epoch, qint64 index)
{
    // int64_t, not qint64 (long long): torch's Scalar takes the one and finds the other ambiguous.
    const int64_t n = batch.size(0);
    if (!spec.enabled() || n == 0)
        return batch;
    const int64_t c = inputShape.at(0), h = inputShape.at(1), w = inputShape.at(2);
    const torch::Device device = batch.device();
    const auto draws = Augmentation::draws(spec, seed, epoch, index, n);
    torch::Tensor images = batch.reshape({n, c, h, w});

    if (spec.cropPadding > 0) {
        // Pad, then gather each sample's window: rows first, then columns, with per-sample offsets.
        const int64_t p = spec.cropPadding;
        std::vector<int64_t> tops(draws.size()), lefts(draws.size());
        for (size_t i = 0; i < draws.size(); ++i) {
            tops[i] = draws[i].top;
            lefts[i] = draws[i].left;
        }
        const auto indices = torch::TensorOptions().dtype(torch::kInt64).device(device);
        const torch::Tensor rows =
            int64Tensor(tops, device).view({n, 1}) + torch::arange(h, indices).view({1, h});
        const torch::Tensor cols =
            int64Tensor(lefts, device).view({n, 1}) + torch::arange(w, indices).view({1, w});
        const torch::Tensor padded = torch::constant_pad_nd(images, {p, p, p, p}, 0);
        const torch::Tensor band = padded.gather(2, rows.view({n, 1, h, 1}).expand({n, c, h, w + 2 * p}));
        images = band.gather(3, cols.view({n, 1, 1, w}).expand({n, c, h, w}));
    }
    if (spec.flip) {
        torch::Tensor mask = torch::empty({n}, torch::TensorOptions().dtype(torch::kBool));
        bool* flips = mask.data_ptr<bool>();
        for (size_t i = 0; i < draws.size(); ++i)
            flips[i] = draws[i].flip;
        images = torch::where(mask.to(device).view({n, 1, 1, 1}), images.flip({3}), images);
    }
    return images.reshape(batch.sizes());
}

Result<Dataset> Augmentation::apply(const AugmentSpec& spec, const QList<qint64>& inputShape,
                                    const Dataset& data, quint64 seed, int epoch, qint64 batch,
                                    const QString& device)
{
    const auto run = [&]() -> Result<Dataset> {
        if (auto s = spec.checkInput(inputShape); !s)
            return fail(s.error());
        qint64 values = 1;
        for (qint64 dim : inputShape)
            values *= dim;
        qint64 stored = 1;
        for (qint64 dim : data.sampleShape())
            stored *= dim;
        if (spec.enabled() && !data.isEmpty() && stored != values)
            return fail(QStringLiteral("the samples hold %1 values each, not the %2 of the input shape")
                            .arg(stored)
                            .arg(values));
        auto resolved = resolveDevice(device);
        if (!resolved)
            return fail(resolved.error());
        auto x = constView(data.bundle(), data.x());
        if (!x)
            return fail(x.error());
        const torch::Tensor out =
            augmentBatch(x->to(torch::Device(resolved->toStdString())), spec, inputShape, seed, epoch, batch);
        TensorBundle bundle;
        if (auto s = addTensor(bundle, QStringLiteral("x"), out); !s)
            return fail(s.error());
        const TensorEntry& y = data.y();
        if (auto s = bundle.add(QStringLiteral("y"), y.dtype, y.shape, data.bundle().data(y)); !s)
            return fail(s.error());
        return Dataset::fromBundle(std::move(bundle), QStringLiteral("the augmented samples"));
    };
    return guarded(QStringLiteral("augmentation"), run);
}

} // namespace gleaner::ml
