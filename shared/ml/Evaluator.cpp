#include <torch/torch.h>

#include "ml/Evaluator.h"
#include "ml/TorchInternals.h"

namespace gleaner::ml {
namespace {

// Eval mode for the guard's lifetime (BatchNorm uses its running statistics, as the served model will), then
// the mode the module had, also when evaluation fails part-way.
class EvalMode
{
public:
    explicit EvalMode(Network& net) : m_net(net), m_wasTraining(net.isTraining())
    {
        m_net.train(false);
    }
    EvalMode(const EvalMode&) = delete;
    EvalMode& operator=(const EvalMode&) = delete;
    ~EvalMode() { m_net.train(m_wasTraining); }

private:
    Network& m_net;
    bool m_wasTraining;
};

} // namespace

Result<Evaluation> Evaluator::evaluate(Model& model, const Dataset& data, int batchSize)
{
    const auto evaluate = [&]() -> Result<Evaluation> {
        if (batchSize < 1)
            return fail(
                QStringLiteral("the evaluation batch size is %1; it must be at least 1").arg(batchSize));
        Model::Impl& net = model.impl();
        if (auto s = checkModelInput(net.spec, data, QStringLiteral("the dataset")); !s)
            return fail(s.error());
        // Read-only views: the dataset may be shared with other threads, and batches are copied to the
        // device.
        auto x = constView(data.bundle(), data.x());
        auto y = constView(data.bundle(), data.y());
        if (!x || !y)
            return fail(x ? y.error() : x.error());

        torch::NoGradGuard noGrad;
        const EvalMode evalMode(*net.net);
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
        result.samples = count;
        result.accuracy = double(result.correct) / double(count);
        result.meanLoss = lossSum / double(count);
        return result;
    };
    return guarded(QStringLiteral("evaluation"), evaluate);
}

Result<Evaluation> Evaluator::evaluate(const ModelSpec& spec, const TensorBundle& weights,
                                       const Dataset& data, int batchSize, const QString& device)
{
    const auto evaluate = [&]() -> Result<Evaluation> {
        auto model = Model::create(spec, 0, device);
        if (!model)
            return fail(model.error());
        if (auto s = model->setWeights(weights); !s)
            return fail(s.error());
        return Evaluator::evaluate(*model, data, batchSize);
    };
    return guarded(QStringLiteral("evaluation"), evaluate);
}

} // namespace gleaner::ml
