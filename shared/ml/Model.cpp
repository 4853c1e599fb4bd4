#include <torch/torch.h>

#include "ml/Device.h"
#include "ml/Model.h"
#include "ml/TorchInternals.h"

#include <mutex>

namespace gleaner::ml {

Q_LOGGING_CATEGORY(lcMl, "gleaner.ml")

std::mutex& generatorLock()
{
    static std::mutex lock;
    return lock;
}

Model::Model(std::unique_ptr<Impl> impl) : d(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::create(const ModelSpec& spec, quint64 seed, const QString& device)
{
    const auto create = [&]() -> Result<Model> {
        auto resolved = resolveDevice(device);
        if (!resolved)
            return fail(resolved.error());
        // Initialisation draws from torch's process-wide generator: seeding it and building under one lock
        // keeps "same spec and seed, same weights" while other threads create models too (the coordinator
        // validates on one thread while it sets up a job on another). Building on the CPU before the move
        // gives the same weights on every device.
        auto built = [&] {
            const std::lock_guard lock(generatorLock());
            torch::manual_seed(seed);
            return buildNetwork(spec);
        }();
        if (!built)
            return fail(built.error());
        auto impl = std::make_unique<Impl>(std::move(*built));
        impl->device = torch::Device(resolved->toStdString());
        impl->net->to(impl->device);
        return Model(std::move(impl));
    };
    return guarded(QStringLiteral("building the %1 model").arg(architectureName(spec.arch)), create);
}

const ModelSpec& Model::spec() const
{
    return d->spec;
}

QString Model::device() const
{
    return QString::fromStdString(d->device.str());
}

qint64 Model::parameterCount() const
{
    qint64 total = 0;
    for (const auto& [name, p] : d->net->parameters())
        total += p.numel();
    return total;
}

Result<TensorBundle> exportWeights(const Model::Impl& impl)
{
    return guarded(QStringLiteral("reading the model's weights"), [&]() -> Result<TensorBundle> {
        TensorBundle bundle;
        for (const auto& [name, tensor] : namedWeights(*impl.net))
            if (const Status added = addTensor(bundle, QString::fromStdString(name), tensor); !added)
                return fail(added.error());
        return bundle;
    });
}

TensorBundle Model::weights() const
{
    // Reading weights back from a GPU can fail (a lost device, an earlier asynchronous CUDA error). That must
    // not end the coordinator's process, and the signature has no room for an error: the failure is logged
    // as critical and the bundle is empty, which every consumer refuses (setWeights() lacks every tensor,
    // WeightMath::checkCompatible() counts 0 tensors, the Trainer reports it).
    auto exported = exportWeights(*d);
    if (exported)
        return std::move(*exported);
    qCCritical(lcMl).noquote() << exported.error();
    return {};
}

Status Model::saveTorchScript(const QString& path) const
{
    return guarded(QStringLiteral("writing the TorchScript archive %1").arg(path), [&] { return d->net->save(path); });
}

Status Model::setWeights(const TensorBundle& weights)
{
    const auto load = [&]() -> Status {
        const auto named = namedWeights(*d->net);
        for (const auto& entry : weights.entries()) {
            const std::string key = entry.name.toStdString();
            if (std::none_of(named.begin(), named.end(), [&](const auto& item) { return item.first == key; }))
                return fail(QStringLiteral("tensor \"%1\" is not part of this %2 model")
                                .arg(entry.name, architectureName(d->spec.arch)));
        }
        // Check everything before the first copy, so a refused bundle leaves the model as it was. The sources
        // are read-only views of the bundle: one copy, straight into the model (converting F16/BF16/F64).
        std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
        for (const auto& [name, tensor] : named) {
            const QString qname = QString::fromStdString(name);
            const TensorEntry* entry = weights.find(qname);
            if (!entry)
                return fail(QStringLiteral("the weights lack tensor \"%1\"").arg(qname));
            QList<qint64> expected;
            for (auto dim : tensor.sizes())
                expected.append(qint64(dim));
            if (entry->shape != expected)
                return fail(QStringLiteral("tensor \"%1\" has shape %2; the model needs %3")
                                .arg(qname, shapeToString(entry->shape), shapeToString(expected)));
            const bool floating = tensor.is_floating_point();
            if (floating != dtypeIsFloating(entry->dtype))
                return fail(
                    QStringLiteral("tensor \"%1\" is %2; the model needs a %3 type")
                        .arg(qname, dtypeName(entry->dtype),
                             floating ? QStringLiteral("floating-point") : QStringLiteral("integer")));
            auto source = constView(weights, *entry);
            if (!source)
                return fail(source.error());
            copies.emplace_back(tensor, std::move(*source));
        }
        torch::NoGradGuard noGrad;
        for (auto& [target, source] : copies)
            target.copy_(source);
        return {};
    };
    return guarded(QStringLiteral("loading weights into the %1 model").arg(architectureName(d->spec.arch)),
                   load);
}

} // namespace gleaner::ml
