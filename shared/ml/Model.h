#pragma once
// A network of Gleaner's model zoo, built from a ModelSpec with seeded, deterministic initialisation, or a
// TorchScript program loaded from its archive after its operators were checked (the spec's "torchscript").
// Its weights go in and out as a TensorBundle named the way torch names them ("stem.conv.weight",
// "stage1.block0.bn1.running_mean"): parameters and buffers alike, so BatchNorm statistics travel with the
// weights on purpose. The header is torch-free (pimpl) so the rest of the tree never compiles torch.

#include "Result.h"
#include "spec/ModelSpec.h"
#include "tensor/TensorBundle.h"

#include <memory>

namespace gleaner::ml {

class Model
{
public:
    // Builds the network on `device` ("cpu", "cuda:0"; see Device.h) with weights drawn from `seed`: the same
    // spec and seed give bit-identical weights, also when several threads create models at once. A spec whose
    // parameters would not fit in memory (more than 2^31 of them) is refused before anything is allocated.
    static Result<Model> create(const ModelSpec& spec, quint64 seed,
                                const QString& device = QStringLiteral("cpu"));

    Model(Model&&) noexcept;
    Model& operator=(Model&&) noexcept;
    ~Model();

    const ModelSpec& spec() const;
    QString device() const;
    // Trainable parameters (the usual "parameter count"); buffers such as BatchNorm statistics are not
    // counted.
    qint64 parameterCount() const;

    // Parameters then buffers, as F32 (I64 for counters), on the CPU. Empty, with a critical log message,
    // when they cannot be read back from the device (a CUDA error): callers treat an empty bundle as a
    // failure.
    TensorBundle weights() const;
    // Every tensor of the model must be present with the same shape; unknown names are refused, so weights of
    // another architecture never load half-way. The bundle's dtypes may be any floating type.
    Status setWeights(const TensorBundle& weights);
    // TorchScript models only: writes the program with the current weights as an archive PyTorch loads with
    // torch.jit.load.
    Status saveTorchScript(const QString& path) const;

    struct Impl; // defined in TorchInternals.h, for gleaner_ml's own .cpp files
    Impl& impl() { return *d; }
    const Impl& impl() const { return *d; }

private:
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> d;
};

} // namespace gleaner::ml
