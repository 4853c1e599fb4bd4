// SGD (momentum, Nesterov, L2) and Adam with the update rules of torch.optim, written out with in-place
// tensor ops so that their state is ours to checkpoint by name.
#include <torch/torch.h>

#include "ml/TorchInternals.h"

#include <cmath>
#include <cstring>

namespace gleaner::ml {

LocalOptimizer::LocalOptimizer(const OptimizerSpec& spec,
                               std::vector<std::pair<std::string, torch::Tensor>> parameters)
    : m_spec(spec)
{
    for (auto& [name, param] : parameters)
        m_slots.push_back(Slot{name, param, torch::zeros_like(param), torch::zeros_like(param)});
}

void LocalOptimizer::zeroGrad()
{
    for (auto& slot : m_slots) {
        auto& grad = slot.param.mutable_grad();
        if (grad.defined()) {
            grad.detach_();
            grad.zero_();
        }
    }
}

void LocalOptimizer::step()
{
    torch::NoGradGuard noGrad;
    ++m_steps;
    const bool adam = m_spec.kind == OptimizerSpec::Kind::Adam;
    const double biasCorrection1 = adam ? 1.0 - std::pow(m_spec.beta1, double(m_steps)) : 1.0;
    const double biasCorrection2 = adam ? 1.0 - std::pow(m_spec.beta2, double(m_steps)) : 1.0;

    for (auto& slot : m_slots) {
        const torch::Tensor& grad0 = slot.param.grad();
        if (!grad0.defined())
            continue;
        torch::Tensor grad = m_spec.weightDecay != 0.0 ? grad0.add(slot.param, m_spec.weightDecay) : grad0;

        if (adam) {
            slot.first.mul_(m_spec.beta1).add_(grad, 1.0 - m_spec.beta1);
            slot.second.mul_(m_spec.beta2).addcmul_(grad, grad, 1.0 - m_spec.beta2);
            const torch::Tensor denom = (slot.second.sqrt() / std::sqrt(biasCorrection2)).add_(m_spec.eps);
            slot.param.addcdiv_(slot.first, denom, -m_spec.lr / biasCorrection1);
            continue;
        }
        if (m_spec.momentum != 0.0) {
            // torch.optim.SGD starts the buffer at the first gradient, not at zero.
            if (m_steps == 1)
                slot.first.copy_(grad);
            else
                slot.first.mul_(m_spec.momentum).add_(grad);
            grad = m_spec.nesterov ? grad.add(slot.first, m_spec.momentum) : slot.first;
        }
        slot.param.add_(grad, -m_spec.lr);
    }
}

Status LocalOptimizer::exportState(TensorBundle& out, const QString& prefix) const
{
    const bool adam = m_spec.kind == OptimizerSpec::Kind::Adam;
    for (const auto& slot : m_slots) {
        const QString base = prefix + QString::fromStdString(slot.name);
        if (auto s = addTensor(out, base + (adam ? u".exp_avg" : u".momentum"), slot.first); !s)
            return s;
        if (adam)
            if (auto s = addTensor(out, base + u".exp_avg_sq", slot.second); !s)
                return s;
    }
    const std::array<qint64, 1> steps{m_steps};
    return out.addValues<qint64>(prefix + u"steps", DType::I64, {}, steps);
}

Status LocalOptimizer::importState(const TensorBundle& in, const QString& prefix)
{
    const bool adam = m_spec.kind == OptimizerSpec::Kind::Adam;
    const TensorEntry* steps = in.find(QString(prefix + u"steps"));
    if (!steps || steps->dtype != DType::I64 || steps->elementCount() != 1 || steps->byteSize != 8)
        return fail(
            QStringLiteral("optimizer state lacks its step count (%1steps, one I64 value)").arg(prefix));
    // memcpy, not values<qint64>(): a file's tensor need not be aligned for its type.
    qint64 stepCount = 0;
    std::memcpy(&stepCount, in.data(*steps).data(), sizeof stepCount);
    if (stepCount < 0)
        return fail(QStringLiteral("optimizer state has a negative step count (%1steps = %2)")
                        .arg(prefix)
                        .arg(stepCount));

    std::vector<std::pair<torch::Tensor*, torch::Tensor>> loaded;
    for (auto& slot : m_slots) {
        const QString base = prefix + QString::fromStdString(slot.name);
        const auto load = [&](const QString& name, torch::Tensor& target) -> Status {
            const TensorEntry* entry = in.find(name);
            if (!entry)
                return fail(QStringLiteral("optimizer state lacks \"%1\"").arg(name));
            auto tensor = toTensor(in, *entry);
            if (!tensor)
                return fail(tensor.error());
            if (tensor->sizes() != target.sizes() || tensor->scalar_type() != target.scalar_type())
                return fail(QStringLiteral("optimizer state \"%1\" does not match its parameter").arg(name));
            loaded.emplace_back(&target, std::move(*tensor));
            return {};
        };
        if (auto s = load(base + (adam ? u".exp_avg" : u".momentum"), slot.first); !s)
            return s;
        if (adam)
            if (auto s = load(base + u".exp_avg_sq", slot.second); !s)
                return s;
    }
    torch::NoGradGuard noGrad;
    for (auto& [target, value] : loaded)
        target->copy_(value);
    m_steps = stepCount;
    return {};
}

} // namespace gleaner::ml
