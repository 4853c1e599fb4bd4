#include <torch/torch.h>

#include "ml/Evaluator.h"
#include "ml/TorchInternals.h"

namespace gleaner::ml {

Result<Evaluation> Evaluator::evaluate(Model& model, const Dataset& data, int batchSize)
{
    if (data.isEmpty())
        return fail(QStringLiteral("cannot evaluate on an empty dataset"));
    if (batchSize < 1)
        return fail(QStringLiteral("evaluation batch size must be at least 1"));
    Model::Impl& net = model.impl();
    if (data.labelBound() > net.spec.numClasses)
        return fail(QStringLiteral("the dataset has label %1 but the model has %2 classes")
                        .arg(data.labelBound() - 1)
                        .arg(net.spec.numClasses));
    auto x = toTensor(data.bundle(), data.x());
    auto y = toTensor(data.bundle(), data.y());
    if (!x || !y)
        return fail(x ? y.error() : x.error());

    torch::NoGradGuard noGrad;
    const bool wasTraining = net.module->is_training();
    net.module->eval(); // BatchNorm uses its running statistics, as the served model will
    Evaluation result;
    double lossSum = 0.0;
    const qint64 count = data.size();
    for (qint64 begin = 0; begin < count; begin += batchSize) {
        const qint64 end = std::min(count, begin + batchSize);
        torch::Tensor input = x->slice(0, begin, end).to(net.device);
        if (input.scalar_type() == torch::kUInt8)
            input = input.to(torch::kFloat32).div_(255.0);
        const torch::Tensor target = y->slice(0, begin, end).to(net.device);
        const torch::Tensor logits = net.forward(input);
        lossSum +=
            torch::nn::functional::cross_entropy(
                logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
        result.correct += qint64(logits.argmax(1).eq(target).sum().item<std::int64_t>());
    }
    net.module->train(wasTraining);
    result.samples = count;
    result.accuracy = double(result.correct) / double(count);
    result.meanLoss = lossSum / double(count);
    return result;
}

Result<Evaluation> Evaluator::evaluate(const ModelSpec& spec, const TensorBundle& weights,
                                       const Dataset& data, int batchSize, const QString& device)
{
    auto model = Model::create(spec, 0, device);
    if (!model)
        return fail(model.error());
    if (auto s = model->setWeights(weights); !s)
        return fail(s.error());
    return evaluate(*model, data, batchSize);
}

} // namespace gleaner::ml
