#pragma once
// Private to gleaner_ml: the torch side of Model, tensor conversion and the local optimizers, shared by the
// library's .cpp files. It uses torch types but does not include torch: every includer is a gleaner_ml .cpp
// file that has <torch/torch.h> from the target's precompiled header and includes it first itself as well.
// Nothing outside shared/ml may include this file.

#include "ml/Model.h"
#include "ml/data/Dataset.h"
#include "spec/AugmentSpec.h"
#include "spec/OptimizerSpec.h"
#include "tensor/TensorBundle.h"

#include <QLoggingCategory>

#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#ifndef TORCH_VERSION_MAJOR
#error "TorchInternals.h is private to gleaner_ml: include <torch/torch.h> first"
#endif

namespace gleaner::ml {

Q_DECLARE_LOGGING_CATEGORY(lcMl)

// Runs `f` and turns every exception into a failed Result. The coordinator and the worker call gleaner_ml
// from plain threads, where an escaped c10::Error would end the whole process through std::terminate; every
// public gleaner_ml function that touches torch runs its body through this. `what` names the operation
// ("training", "evaluation") at the start of the message.
template <typename F> auto guarded(const QString& what, F&& f) -> decltype(f())
{
    static const QString kSmaller = QStringLiteral("; use a smaller model or batch size");
    try {
        return f();
    } catch (const c10::OutOfMemoryError& e) { // the CUDA caching allocator
        return fail(what + u": the device ran out of memory (libtorch: " +
                    QString::fromUtf8(e.what_without_backtrace()).trimmed() + u')' + kSmaller);
    } catch (const std::bad_alloc&) {
        return fail(what + u": out of memory" + kSmaller);
    } catch (const c10::Error& e) {
        const QString message = QString::fromUtf8(e.what_without_backtrace()).trimmed();
        // libtorch's CPU allocator reports a failed allocation as a plain c10::Error.
        const bool memory = message.contains(u"not enough memory") || message.contains(u"out of memory");
        return fail(what + u": libtorch: " + message + (memory ? kSmaller : QString()));
    } catch (const std::exception& e) {
        return fail(what + u": " + QString::fromUtf8(e.what()));
    } catch (...) {
        return fail(what + u": an exception of unknown type was thrown");
    }
}

// For the few public functions whose signature has no room for an error (Model::weights(),
// WeightMath::l2Norm()): logs the failure as critical and returns `fallback`, which the caller documents.
template <typename T, typename F> T guardedOr(const QString& what, T fallback, F&& f)
{
    Result<T> result = guarded(what, [&]() -> Result<T> { return f(); });
    if (result)
        return std::move(*result);
    qCCritical(lcMl).noquote() << result.error();
    return fallback;
}

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What a Model needs from its network, whichever kind it is: a zoo module built in C++ (ModelZoo.cpp) or a
// TorchScript program (ScriptModel.cpp). The Trainer, the Evaluator, checkpoints and weight transfer go through
// this alone, so both kinds train in the same loop.
class Network
{
public:
    virtual ~Network() = default;
    // Logits [B, num_classes] for a batch [B, ...input_shape].
    virtual torch::Tensor forward(const torch::Tensor& input) = 0;
    virtual void train(bool on) = 0;
    virtual bool isTraining() const = 0;
    // Named as PyTorch's state_dict names them, in the module's order.
    virtual NamedTensors parameters() const = 0;
    virtual NamedTensors buffers() const = 0;
    virtual void to(const torch::Device& device) = 0;
    // Whether forward() in training mode may draw from torch's default generator (dropout in a TorchScript
    // program). The Trainer then seeds that generator for each mini-batch, so a resumed run draws what an
    // uninterrupted one would.
    virtual bool drawsRandomness() const { return false; }
    // Writes the network, with its current weights, as a TorchScript archive.
    virtual Status save(const QString& path) const
    {
        return fail(QStringLiteral("%1: only a TorchScript model can be written as a TorchScript archive").arg(path));
    }
};

// torch's default generator is process-wide: whoever seeds it and then draws holds this lock meanwhile.
std::mutex& generatorLock();

struct Model::Impl
{
    ModelSpec spec;
    torch::Device device{torch::kCPU};
    std::unique_ptr<Network> net; // owns parameters and buffers

    torch::Tensor forward(const torch::Tensor& input) { return net->forward(input); }
};

// Builds the network of a spec (ModelZoo.cpp). Initialisation draws from torch's default generator, which the
// caller seeds (under Model::create's lock). Refuses a spec whose parameters would not fit in memory before
// allocating anything.
Result<Model::Impl> buildNetwork(const ModelSpec& spec);

// Loads the TorchScript archive of a spec (ScriptModel.cpp) after checking it: the file must be a TorchScript
// archive, define no code that runs while it loads, and call only operators of the allowlist; a forward pass on a
// zero batch must give [B, num_classes] logits. Every refusal names the archive and the cause.
Result<Model::Impl> loadScript(const ModelSpec& spec);

// Whether `data` can be fed to a model of `spec` (ModelZoo.cpp), checked before any tensor is touched: it
// holds samples; one sample has exactly the shape input_shape (for mlp, which flattens, the same number of
// values); every label is below num_classes. `what` names the data in messages ("the shard", "the dataset").
// Shared by the Trainer and the Evaluator so both refuse the same inputs with the same words.
Status checkModelInput(const ModelSpec& spec, const Dataset& data, const QString& what);

// The model's weights as Model::weights() describes them, or why they could not be read (a CUDA error).
Result<TensorBundle> exportWeights(const Model::Impl& impl);

// Mini-batch `index` of local epoch `epoch` of a run seeded `seed`, augmented as `spec` asks
// (Augmentation.cpp, draws from Augmentation::draws), computed on the batch's own device; the batch itself as
// it is when `spec` is off. `batch` is [B, ...] with B samples of `inputShape` values each; the caller has
// checked spec.checkInput(inputShape). Never writes into `batch`, which may be a read-only view.
torch::Tensor augmentBatch(const torch::Tensor& batch, const AugmentSpec& spec,
                           const QList<qint64>& inputShape, quint64 seed, int epoch, qint64 index);

// Tensor <-> TensorBundle (TensorConvert.cpp).
Result<torch::ScalarType> torchType(DType type);
Result<DType> bundleType(torch::ScalarType type);
// A CPU tensor that owns a copy of the entry's bytes (any alignment).
Result<torch::Tensor> toTensor(const TensorBundle& bundle, const TensorEntry& entry);
// A read-only CPU tensor over the entry's bytes in place: no copy, and the bundle's implicitly shared buffer
// is not detached, so threads that read the same bundle meanwhile are safe. Nothing may write through it (no
// in-place op, no copy_ into it); the bundle must outlive it. Bytes that are misaligned for their type (a
// foreign safetensors file) are copied instead.
Result<torch::Tensor> constView(const TensorBundle& bundle, const TensorEntry& entry);
// A writable CPU tensor over the entry's bytes in place; detaches the bundle's buffer first when it is
// shared, so writing never changes another copy. The bundle must outlive it and gain no tensor meanwhile.
Result<torch::Tensor> viewTensor(TensorBundle& bundle, const TensorEntry& entry);
Status addTensor(TensorBundle& bundle, const QString& name, const torch::Tensor& tensor);

// The named tensors of a network that make up its weights: parameters, then buffers.
NamedTensors namedWeights(const Network& net);

// SGD with momentum and Adam with their state as named tensors, so a checkpoint holds them in the same
// safetensors file as the weights and resumes bit-exactly on libtorch 1.13 and 2.x alike
// (LocalOptimizer.cpp).
class LocalOptimizer
{
public:
    LocalOptimizer(const OptimizerSpec& spec, std::vector<std::pair<std::string, torch::Tensor>> parameters);

    void zeroGrad();
    void step();
    qint64 steps() const { return m_steps; }
    // The rate the next steps take (a schedule's; the state's moments stay as they are).
    void setLearningRate(double lr) { m_spec.lr = lr; }

    // Writes "<prefix><param>.<slot>" tensors and "<prefix>steps".
    Status exportState(TensorBundle& out, const QString& prefix) const;
    Status importState(const TensorBundle& in, const QString& prefix);

private:
    struct Slot
    {
        std::string name;
        torch::Tensor param;
        torch::Tensor first;  // SGD momentum buffer / Adam exp_avg
        torch::Tensor second; // Adam exp_avg_sq
    };
    OptimizerSpec m_spec;
    std::vector<Slot> m_slots;
    qint64 m_steps = 0;
};

} // namespace gleaner::ml
