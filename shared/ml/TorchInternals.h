#pragma once
// Private to gleaner_ml: the torch side of Model, tensor conversion and the local optimizers, shared by the
// library's .cpp files. It uses torch types but does not include torch: every includer is a gleaner_ml .cpp
// file that has <torch/torch.h> from the target's precompiled header and includes it first itself as well.
// Nothing outside shared/ml may include this file.

#include "ml/Model.h"
#include "spec/OptimizerSpec.h"
#include "tensor/TensorBundle.h"

#include <functional>
#include <string>
#include <vector>

#ifndef TORCH_VERSION_MAJOR
#error "TorchInternals.h is private to gleaner_ml: include <torch/torch.h> first"
#endif

namespace gleaner::ml {

struct Model::Impl
{
    ModelSpec spec;
    torch::Device device{torch::kCPU};
    std::shared_ptr<torch::nn::Module> module;                  // owns parameters and buffers
    std::function<torch::Tensor(const torch::Tensor&)> forward; // logits for a batch [B, ...input_shape]
};

// Builds the network of a spec (ModelZoo.cpp). Initialisation draws from torch's default generator, which the
// caller seeds.
Result<Model::Impl> buildNetwork(const ModelSpec& spec);

// Tensor <-> TensorBundle (TensorConvert.cpp).
Result<torch::ScalarType> torchType(DType type);
Result<DType> bundleType(torch::ScalarType type);
// A CPU tensor that owns a copy of the entry's bytes.
Result<torch::Tensor> toTensor(const TensorBundle& bundle, const TensorEntry& entry);
// A CPU tensor viewing the entry's bytes in place (the bundle must outlive it and stay unshared for writes).
Result<torch::Tensor> viewTensor(TensorBundle& bundle, const TensorEntry& entry);
Status addTensor(TensorBundle& bundle, const QString& name, const torch::Tensor& tensor);

// The named tensors of a module that make up its weights: parameters, then buffers.
std::vector<std::pair<std::string, torch::Tensor>> namedWeights(const torch::nn::Module& module);

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
