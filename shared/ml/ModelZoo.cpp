// The built-in architectures. Modules follow pytorch/examples' C++ style (XImpl + TORCH_MODULE); submodules
// are registered under stable, readable names because those names are the safetensors keys users see.
#include <torch/torch.h>

#include "ml/TorchInternals.h"

namespace gleaner::ml {
namespace {

namespace nn = torch::nn;

std::int64_t product(const QList<qint64>& shape)
{
    std::int64_t n = 1;
    for (qint64 d : shape)
        n *= d;
    return n;
}

// Flatten, then Linear + ReLU per hidden width, then the classifier.
struct MlpImpl : nn::Module
{
    MlpImpl(std::int64_t inputs, const QList<int>& hidden, std::int64_t classes)
    {
        std::int64_t width = inputs;
        for (int i = 0; i < hidden.size(); ++i) {
            layers.push_back(register_module("fc" + std::to_string(i), nn::Linear(width, hidden[i])));
            width = hidden[i];
        }
        classifier = register_module("classifier", nn::Linear(width, classes));
    }

    torch::Tensor forward(torch::Tensor x)
    {
        x = x.flatten(1);
        for (auto& layer : layers)
            x = torch::relu(layer->forward(x));
        return classifier->forward(x);
    }

    std::vector<nn::Linear> layers;
    nn::Linear classifier{nullptr};
};
TORCH_MODULE(Mlp);

// Two stages of 3x3 conv (padding 1) + ReLU + 2x2 max-pool, then the MLP head: a small, fast net for 28x28
// (Fashion-MNIST) and 32x32 (CIFAR-10) images.
struct CnnImpl : nn::Module
{
    CnnImpl(const QList<qint64>& input, const QList<int>& channels, const QList<int>& hidden,
            std::int64_t classes)
    {
        conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(input[0], channels[0], 3).padding(1)));
        conv2 =
            register_module("conv2", nn::Conv2d(nn::Conv2dOptions(channels[0], channels[1], 3).padding(1)));
        const std::int64_t flat = std::int64_t(channels[1]) * (input[1] / 4) * (input[2] / 4);
        head = register_module("head", Mlp(flat, hidden, classes));
    }

    torch::Tensor forward(torch::Tensor x)
    {
        x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
        x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
        return head->forward(x);
    }

    nn::Conv2d conv1{nullptr}, conv2{nullptr};
    Mlp head{nullptr};
};
TORCH_MODULE(Cnn);

nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride = 1)
{
    return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Pre-activation bottleneck (He et al., "Identity Mappings in Deep Residual Networks"): BN-ReLU before each
// of 1x1, 3x3 (carrying the stride), 1x1 convolutions; the first block of a stage projects the shortcut from
// the pre-activated input. The network's very first block skips its pre-activation: the stem has just applied
// it.
struct BottleneckImpl : nn::Module
{
    BottleneckImpl(std::int64_t in, std::int64_t width, std::int64_t out, std::int64_t stride,
                   bool preActivate)
        : preActivate(preActivate)
    {
        if (preActivate)
            bn0 = register_module("bn0", nn::BatchNorm2d(in));
        conv1 = register_module("conv1", conv(in, width, 1));
        bn1 = register_module("bn1", nn::BatchNorm2d(width));
        conv2 = register_module("conv2", conv(width, width, 3, stride));
        bn2 = register_module("bn2", nn::BatchNorm2d(width));
        conv3 = register_module("conv3", conv(width, out, 1));
        if (stride != 1 || in != out)
            shortcut = register_module("shortcut", conv(in, out, 1, stride));
    }

    torch::Tensor forward(const torch::Tensor& x)
    {
        const torch::Tensor pre = preActivate ? torch::relu(bn0->forward(x)) : x;
        torch::Tensor y = conv1->forward(pre);
        y = conv2->forward(torch::relu(bn1->forward(y)));
        y = conv3->forward(torch::relu(bn2->forward(y)));
        return y + (shortcut ? shortcut->forward(pre) : x);
    }

    bool preActivate;
    nn::BatchNorm2d bn0{nullptr}, bn1{nullptr}, bn2{nullptr};
    nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, shortcut{nullptr};
};
TORCH_MODULE(Bottleneck);

// Pre-activation ResNet v2: 3x3 stem + BN-ReLU, three stages of n = (depth - 2) / 9 bottleneck blocks with
// widths w, 2w, 4w (outputs 4x that), strides 1, 2, 2; final BN-ReLU, global average pool, classifier.
struct PreActResNetImpl : nn::Module
{
    PreActResNetImpl(const QList<qint64>& input, int depth, int width, std::int64_t classes)
    {
        const int blocks = (depth - 2) / 9;
        stem = register_module("stem", conv(input[0], width, 3));
        stemBn = register_module("stem_bn", nn::BatchNorm2d(width));
        std::int64_t in = width;
        for (int stage = 0; stage < 3; ++stage) {
            const std::int64_t w = std::int64_t(width) << stage;
            nn::Sequential seq;
            for (int b = 0; b < blocks; ++b) {
                const std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
                seq->push_back("block" + std::to_string(b),
                               Bottleneck(in, w, 4 * w, stride, !(stage == 0 && b == 0)));
                in = 4 * w;
            }
            stages.push_back(register_module("stage" + std::to_string(stage + 1), seq));
        }
        finalBn = register_module("final_bn", nn::BatchNorm2d(in));
        classifier = register_module("classifier", nn::Linear(in, classes));
    }

    torch::Tensor forward(torch::Tensor x)
    {
        x = torch::relu(stemBn->forward(stem->forward(x)));
        for (auto& stage : stages)
            x = stage->forward(x);
        x = torch::relu(finalBn->forward(x));
        x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
        return classifier->forward(x);
    }

    nn::Conv2d stem{nullptr};
    nn::BatchNorm2d stemBn{nullptr}, finalBn{nullptr};
    std::vector<nn::Sequential> stages;
    nn::Linear classifier{nullptr};
};
TORCH_MODULE(PreActResNet);

// The most parameters Gleaner builds: 8 GiB as F32, far beyond what a volunteer's machine trains (the paper's
// ResNet has 5 million), yet every spec that passes ModelSpec's validation could still ask for terabytes.
constexpr double kMaxParameters = double(qint64(1) << 31);

// The parameter count of the network buildNetwork() would build, counted in double so that no size
// overflows, following the modules above layer by layer.
double plannedParameters(const ModelSpec& spec)
{
    const auto linear = [](double in, double out) { return in * out + out; };
    const auto mlp = [&](double inputs, const QList<int>& hidden) {
        double total = 0.0;
        for (int width : hidden) {
            total += linear(inputs, width);
            inputs = width;
        }
        return total + linear(inputs, spec.numClasses);
    };
    const QList<qint64>& in = spec.inputShape;
    switch (spec.arch) {
    case Architecture::Mlp: {
        double inputs = 1.0;
        for (qint64 d : in)
            inputs *= double(d);
        return mlp(inputs, spec.hidden);
    }
    case Architecture::Cnn: {
        const double c0 = spec.channels[0], c1 = spec.channels[1];
        const double flat = c1 * double(in[1] / 4) * double(in[2] / 4);
        return (double(in[0]) * c0 * 9 + c0) + (c0 * c1 * 9 + c1) + mlp(flat, spec.hidden);
    }
    case Architecture::ResNet: {
        const int blocks = (spec.depth - 2) / 9;
        double total = double(in[0]) * spec.width * 9 + 2.0 * spec.width; // stem conv (no bias), stem BN
        double channels = spec.width;
        for (int stage = 0; stage < 3; ++stage) {
            const double w = double(spec.width) * double(1 << stage);
            for (int b = 0; b < blocks; ++b) {
                if (!(stage == 0 && b == 0))
                    total += 2.0 * channels; // bn0
                total += channels * w + 2.0 * w + w * w * 9 + 2.0 * w + w * 4 * w;
                if ((stage > 0 && b == 0) || channels != 4 * w)
                    total += channels * 4 * w; // projected shortcut
                channels = 4 * w;
            }
        }
        return total + 2.0 * channels + linear(channels, spec.numClasses);
    }
    case Architecture::TorchScript: // its size is in the archive, which loadScript() bounds
        return 0.0;
    }
    return 0.0;
}

// A network of the zoo: a C++ module and its forward function.
class ZooNetwork final : public Network
{
public:
    template <typename Net>
    explicit ZooNetwork(Net net) : m_module(net.ptr()), m_forward([net](const torch::Tensor& x) mutable { return net->forward(x); })
    {
    }
    torch::Tensor forward(const torch::Tensor& input) override { return m_forward(input); }
    void train(bool on) override { m_module->train(on); }
    bool isTraining() const override { return m_module->is_training(); }
    NamedTensors parameters() const override
    {
        NamedTensors out;
        for (const auto& item : m_module->named_parameters(/*recurse=*/true))
            out.emplace_back(item.key(), item.value());
        return out;
    }
    NamedTensors buffers() const override
    {
        NamedTensors out;
        for (const auto& item : m_module->named_buffers(/*recurse=*/true))
            out.emplace_back(item.key(), item.value());
        return out;
    }
    void to(const torch::Device& device) override { m_module->to(device); }

private:
    std::shared_ptr<torch::nn::Module> m_module;
    std::function<torch::Tensor(const torch::Tensor&)> m_forward;
};

} // namespace

Result<Model::Impl> buildNetwork(const ModelSpec& spec)
{
    const QString arch = architectureName(spec.arch);
    for (qint64 d : spec.inputShape)
        if (d < 1)
            return fail(QStringLiteral("%1: input_shape %2 has a dimension below 1; every dimension must be "
                                       "at least 1")
                            .arg(arch, shapeToString(spec.inputShape)));
    if (spec.arch == Architecture::Cnn && (spec.inputShape.size() != 3 || spec.channels.size() != 2))
        return fail(QStringLiteral("cnn needs input_shape [C, H, W] and two channel counts"));
    if (spec.arch == Architecture::ResNet &&
        (spec.inputShape.size() != 3 || spec.depth < 11 || (spec.depth - 2) % 9 != 0))
        return fail(QStringLiteral("resnet needs input_shape [C, H, W] and depth 9n + 2"));
    // Checked before anything is allocated: a model of terabytes must be an error, not an allocation that
    // fails (or succeeds through overcommit and brings the OOM killer).
    if (const double planned = plannedParameters(spec); planned > kMaxParameters)
        return fail(QStringLiteral("%1 with input_shape %2 would have %3 parameters (%4 GB as F32); Gleaner "
                                   "builds at most %5; use a smaller input_shape, fewer hidden units or "
                                   "channels, or a smaller depth or width")
                        .arg(arch, shapeToString(spec.inputShape), QString::number(planned, 'g', 3),
                             QString::number(planned * 4 / 1e9, 'f', 0))
                        .arg(qint64(kMaxParameters)));

    Model::Impl impl;
    impl.spec = spec;
    switch (spec.arch) {
    case Architecture::Mlp: {
        Mlp net(product(spec.inputShape), spec.hidden, spec.numClasses);
        impl.net = std::make_unique<ZooNetwork>(net);
        return impl;
    }
    case Architecture::Cnn: {
        Cnn net(spec.inputShape, spec.channels, spec.hidden, spec.numClasses);
        impl.net = std::make_unique<ZooNetwork>(net);
        return impl;
    }
    case Architecture::ResNet: {
        PreActResNet net(spec.inputShape, spec.depth, spec.width, spec.numClasses);
        impl.net = std::make_unique<ZooNetwork>(net);
        return impl;
    }
    case Architecture::TorchScript:
        return loadScript(spec);
    }
    return fail(QStringLiteral("unknown architecture"));
}

Status checkModelInput(const ModelSpec& spec, const Dataset& data, const QString& what)
{
    if (data.isEmpty())
        return fail(QStringLiteral("%1 holds no samples; it needs at least one").arg(what));
    const QList<qint64> shape = data.sampleShape();
    const QString arch = architectureName(spec.arch);
    if (spec.arch == Architecture::Mlp) {
        // The mlp flattens each sample: only the number of values must agree.
        const auto have = shapeElementCount(shape);
        const auto want = shapeElementCount(spec.inputShape);
        if (!have || !want || *have != *want)
            return fail(QStringLiteral("%1's samples have shape %2 (%3 values) but the mlp model expects "
                                       "input_shape %4 (%5 values); the mlp flattens each sample, so the "
                                       "counts must agree: set model.input_shape to %2")
                            .arg(what, shapeToString(shape))
                            .arg(have.value_or(-1))
                            .arg(shapeToString(spec.inputShape))
                            .arg(want.value_or(-1)));
    } else if (shape != spec.inputShape) {
        return fail(QStringLiteral("%1's samples have shape %2 but the %3 model expects input_shape %4; set "
                                   "model.input_shape to %2 or use data of shape %4")
                        .arg(what, shapeToString(shape), arch, shapeToString(spec.inputShape)));
    }
    if (const qint64 bound = data.labelBound(); bound > spec.numClasses)
        return fail(QStringLiteral("%1 has label %2 but the model has %3 classes (labels 0..%4); set "
                                   "model.num_classes to at least %5 or fix the labels")
                        .arg(what)
                        .arg(bound - 1)
                        .arg(spec.numClasses)
                        .arg(spec.numClasses - 1)
                        .arg(bound));
    return {};
}

} // namespace gleaner::ml
