#include <torch/torch.h>

#include "ml/Device.h"
#include "ml/Model.h"
#include "ml/TorchInternals.h"

namespace gleaner::ml {

Model::Model(std::unique_ptr<Impl> impl) : d(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::create(const ModelSpec& spec, quint64 seed, const QString& device)
{
    auto resolved = resolveDevice(device);
    if (!resolved)
        return fail(resolved.error());
    // Initialisation draws from torch's global generator; seeding it here, and building on the CPU before the
    // move, gives the same weights on every device.
    torch::manual_seed(seed);
    auto built = buildNetwork(spec);
    if (!built)
        return fail(built.error());
    auto impl = std::make_unique<Impl>(std::move(*built));
    impl->device = torch::Device(resolved->toStdString());
    impl->module->to(impl->device);
    return Model(std::move(impl));
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
    for (const auto& p : d->module->parameters())
        total += p.numel();
    return total;
}

TensorBundle Model::weights() const
{
    TensorBundle bundle;
    for (const auto& [name, tensor] : namedWeights(*d->module)) {
        // Model tensors are always float or int64, which the bundle stores; a failure here is a programming
        // error.
        if (const Status added = addTensor(bundle, QString::fromStdString(name), tensor); !added)
            qFatal("%s", qPrintable(added.error()));
    }
    return bundle;
}

Status Model::setWeights(const TensorBundle& weights)
{
    const auto named = namedWeights(*d->module);
    for (const auto& entry : weights.entries()) {
        const std::string key = entry.name.toStdString();
        if (std::none_of(named.begin(), named.end(), [&](const auto& item) { return item.first == key; }))
            return fail(QStringLiteral("tensor \"%1\" is not part of this %2 model")
                            .arg(entry.name, architectureName(d->spec.arch)));
    }
    // Check everything before the first copy, so a refused bundle leaves the model as it was.
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
            return fail(QStringLiteral("tensor \"%1\" is %2; the model needs a %3 type")
                            .arg(qname, dtypeName(entry->dtype),
                                 floating ? QStringLiteral("floating-point") : QStringLiteral("integer")));
        auto source = toTensor(weights, *entry);
        if (!source)
            return fail(source.error());
        copies.emplace_back(tensor, std::move(*source));
    }
    torch::NoGradGuard noGrad;
    for (auto& [target, source] : copies)
        target.copy_(source);
    return {};
}

} // namespace gleaner::ml
