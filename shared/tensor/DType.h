#pragma once
// Element types of Gleaner's tensors, named as the safetensors format names them. Weights are F32 (F16 and
// BF16 for compact transfers), dataset images U8, labels and counters I64.

#include <QString>

#include <optional>

namespace gleaner {

enum class DType
{
    Bool,
    U8,
    I8,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64,
};

// Bytes per element.
int dtypeSize(DType type);
// "F32", "BF16", ...: the safetensors spelling.
QString dtypeName(DType type);
// Parses the safetensors spelling; nullopt for anything else.
std::optional<DType> dtypeFromName(QStringView name);
bool dtypeIsFloating(DType type);

} // namespace gleaner
