#pragma once
// Encodes a subtask's result as a small update and rebuilds the full weights from it (docs/protocol.md,
// section 10.4). The agent's worker encodes, the coordinator decodes before it runs the checks every upload
// passes, and gleaner-sim does both, so the bytes measured in the lab are the bytes agents send.
//
// An encoded upload is a safetensors file whose "gleaner.encoding" metadata names the encoding; for every F32
// tensor X of the model it holds the update U = trained - base (plus the agent's residual, below):
//   fp16:  X (F16, X's shape)                         U in half precision
//   int8:  X (I8, X's shape), X#scale (F32, [ceil(n / 256)])
//                                                     U[i] = X[i] * X#scale[i / 256]
//   topk:  X#index (I32, [k]), X#value (I8, [k]), X#scale (F32, [ceil(k / 256)])
//                                                     the k largest |U| values: X#index holds their positions
//                                                     in the flattened tensor as gaps (the first position,
//                                                     then each one's distance from the one before, >= 1),
//                                                     X#value and X#scale their values as int8 does
// Tensors of other dtypes (BatchNorm's counters) are sent as their full values under their own names.
//
// Error feedback: what an encoding leaves out of U (rounding, the values top-k does not send) is the
// residual; the agent keeps it per job and adds it to its next update, so every part of every update reaches
// the server, some of it one subtask later.
//
// The whole file may then be compressed with zstd (the body starts with zstd's magic number instead of
// safetensors' header length, which can never be that large).

#include "Result.h"
#include "spec/UploadSpec.h"
#include "tensor/TensorBundle.h"

#include <QByteArray>

namespace gleaner::UpdateCodec {

inline constexpr qint64 kChunk = 256; // values that share one int8 scale
inline const QString kEncodingKey = QStringLiteral("gleaner.encoding");

// The update of `trained` against `base` (the same tensors), encoded as `spec` says, with `trained`'s
// metadata. `residual` (error feedback) is read and replaced: empty or one F32 tensor per F32 tensor of the
// model; it is cleared when the spec asks for no error feedback. An fp32 spec returns `trained` itself.
Result<TensorBundle> encode(const TensorBundle& trained, const TensorBundle& base, const UploadSpec& spec,
                            TensorBundle* residual);

// The encoding an upload names: Fp32 when it names none, an error when it names one this build does not know.
Result<UploadSpec::Encoding> encodingOf(const TensorBundle& upload);

// The full weights an encoded upload stands for, base + its update, with its metadata (less
// gleaner.encoding). Refuses, naming the tensor, anything that is not exactly the layout above for `base`'s
// tensors: a missing or extra tensor, a wrong dtype or shape, a scale that is negative or not finite, a
// position outside its tensor or out of order. An upload that names no encoding is returned as it is.
Result<TensorBundle> decode(const TensorBundle& upload, const TensorBundle& base);

// The bytes of the file: safetensors, compressed with zstd when `zstd` is set.
QByteArray pack(const TensorBundle& bundle, bool zstd);
// Whether `bytes` start with zstd's magic number.
bool isZstd(QByteArrayView bytes);
// Reads a file `pack` made: decompresses zstd frames (refusing output beyond `maxBytes`, so a small bomb
// cannot fill memory), then parses the safetensors file.
Result<TensorBundle> unpack(QByteArray bytes, qint64 maxBytes);

} // namespace gleaner::UpdateCodec
