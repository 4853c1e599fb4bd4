#include <torch/torch.h>

#include "ml/RnnWeightCheck.h"

#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <vector>

namespace gleaner::ml {
namespace {

// The flat weights of a stacked recurrent layer, as nn.LSTM and nn.GRU hold them: per layer and direction
// w_ih, w_hh, then b_ih and b_hh with biases, then w_hr for an LSTM with projections. Every gate matrix and bias
// must be gates x hidden tall, so that each step's gates split into exactly `gates` chunks.
void checkWeights(const char* op, int64_t gates, int64_t hidden, at::TensorList params, bool hasBiases,
                  int64_t layers, bool bidirectional)
{
    const int64_t groups = layers * (bidirectional ? 2 : 1);
    TORCH_CHECK(layers > 0 && params.size() > 0 && int64_t(params.size()) % groups == 0, op, ": ",
                params.size(), " weights for ", groups, " layers and directions");
    const size_t per = params.size() / size_t(groups);
    const size_t plain = hasBiases ? 4 : 2;
    TORCH_CHECK(per == plain || (gates == 4 && per == plain + 1), op, ": ", per,
                " weights per layer and direction; expected ", plain);
    const int64_t height = gates * hidden;
    for (size_t group = 0; group < size_t(groups); ++group)
        for (size_t i = 0; i < plain; ++i) {
            const at::Tensor& w = params[group * per + i];
            const int64_t dims = i < 2 ? 2 : 1; // gate matrices, then biases
            TORCH_CHECK(w.dim() == dims && w.size(0) == height, op, ": weight ", group * per + i, " has shape ",
                        w.sizes(), "; a layer of hidden size ", hidden, " needs ", height,
                        i < 2 ? " rows" : " elements");
        }
}

int64_t hiddenOf(const char* op, const at::Tensor& state)
{
    TORCH_CHECK(state.dim() >= 1 && state.size(-1) > 0, op, ": a hidden state of shape ", state.sizes());
    return state.size(-1);
}

int64_t lstmHidden(at::TensorList hx)
{
    TORCH_CHECK(hx.size() == 2, "aten::lstm: ", hx.size(), " hidden states; expected h and c");
    return hiddenOf("aten::lstm", hx[1]); // c: the hidden size even with projections
}

std::tuple<at::Tensor, at::Tensor> gruInput(const at::Tensor& input, const at::Tensor& hx, at::TensorList params,
                                            bool hasBiases, int64_t layers, double dropout, bool train,
                                            bool bidirectional, bool batchFirst)
{
    checkWeights("aten::gru", 3, hiddenOf("aten::gru", hx), params, hasBiases, layers, bidirectional);
    return at::native::gru(input, hx, params, hasBiases, layers, dropout, train, bidirectional, batchFirst);
}

std::tuple<at::Tensor, at::Tensor> gruData(const at::Tensor& data, const at::Tensor& batchSizes,
                                           const at::Tensor& hx, at::TensorList params, bool hasBiases,
                                           int64_t layers, double dropout, bool train, bool bidirectional)
{
    checkWeights("aten::gru", 3, hiddenOf("aten::gru", hx), params, hasBiases, layers, bidirectional);
    return at::native::gru(data, batchSizes, hx, params, hasBiases, layers, dropout, train, bidirectional);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmInput(const at::Tensor& input, at::TensorList hx,
                                                         at::TensorList params, bool hasBiases, int64_t layers,
                                                         double dropout, bool train, bool bidirectional,
                                                         bool batchFirst)
{
    checkWeights("aten::lstm", 4, lstmHidden(hx), params, hasBiases, layers, bidirectional);
    return at::native::lstm(input, hx, params, hasBiases, layers, dropout, train, bidirectional, batchFirst);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmData(const at::Tensor& data, const at::Tensor& batchSizes,
                                                        at::TensorList hx, at::TensorList params, bool hasBiases,
                                                        int64_t layers, double dropout, bool train,
                                                        bool bidirectional)
{
    checkWeights("aten::lstm", 4, lstmHidden(hx), params, hasBiases, layers, bidirectional);
    return at::native::lstm(data, batchSizes, hx, params, hasBiases, layers, dropout, train, bidirectional);
}

} // namespace

void installRnnWeightCheck()
{
    static std::once_flag once;
    std::call_once(once, [] {
        // libtorch implements these for every backend at once (CompositeImplicitAutograd). A kernel registered
        // directly for a backend and its autograd key takes precedence there; calling the composite
        // implementation from it keeps autograd recording the operators inside, as before. Never unregistered.
        static auto* libraries = new std::vector<std::unique_ptr<torch::Library>>;
        for (const c10::DispatchKey key : {c10::DispatchKey::CPU, c10::DispatchKey::AutogradCPU,
                                           c10::DispatchKey::CUDA, c10::DispatchKey::AutogradCUDA}) {
            auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
            library->impl("gru.input", TORCH_FN(gruInput));
            library->impl("gru.data", TORCH_FN(gruData));
            library->impl("lstm.input", TORCH_FN(lstmInput));
            library->impl("lstm.data", TORCH_FN(lstmData));
            libraries->push_back(std::move(library));
        }
    });
}

} // namespace gleaner::ml
