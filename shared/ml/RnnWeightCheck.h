#pragma once
// Guards libtorch's recurrent layers (aten::lstm, aten::gru: what nn.LSTM and nn.GRU call) against weights a
// TorchScript program chose. libtorch splits each step's gates into 4 (LSTM) or 3 (GRU) chunks and reads them all
// without checking that the gate weights were tall enough to give that many: a program that passes a 1-row
// weight crashes the process that runs it (the coordinator at submit, every worker). Installed once, before any
// TorchScript program runs, the check refuses such weights with an error and then runs libtorch's own
// implementation, so a correct model computes, and trains, exactly as before.

namespace gleaner::ml {

void installRnnWeightCheck();

} // namespace gleaner::ml
