#include <torch/torch.h>

#include "ml/TorchInternals.h"

namespace gleaner::ml {

Result<torch::ScalarType> torchType(DType type)
{
    switch (type) {
    case DType::F32:
        return torch::kFloat32;
    case DType::F16:
        return torch::kFloat16;
    case DType::BF16:
        return torch::kBFloat16;
    case DType::F64:
        return torch::kFloat64;
    case DType::I64:
        return torch::kInt64;
    case DType::I32:
        return torch::kInt32;
    case DType::I16:
        return torch::kInt16;
    case DType::I8:
        return torch::kInt8;
    case DType::U8:
        return torch::kUInt8;
    case DType::Bool:
        return torch::kBool;
    case DType::U16:
    case DType::U32:
    case DType::U64:
        break;
    }
    return fail(QStringLiteral("dtype %1 has no libtorch equivalent").arg(dtypeName(type)));
}

Result<DType> bundleType(torch::ScalarType type)
{
    switch (type) {
    case torch::kFloat32:
        return DType::F32;
    case torch::kFloat16:
        return DType::F16;
    case torch::kBFloat16:
        return DType::BF16;
    case torch::kFloat64:
        return DType::F64;
    case torch::kInt64:
        return DType::I64;
    case torch::kInt32:
        return DType::I32;
    case torch::kInt16:
        return DType::I16;
    case torch::kInt8:
        return DType::I8;
    case torch::kUInt8:
        return DType::U8;
    case torch::kBool:
        return DType::Bool;
    default:
        break;
    }
    return fail(
        QStringLiteral("torch type %1 cannot be stored").arg(QString::fromLatin1(c10::toString(type))));
}

namespace {

std::vector<std::int64_t> sizesOf(const TensorEntry& entry)
{
    return {entry.shape.begin(), entry.shape.end()};
}

// The torch type of an entry whose byte size agrees with its shape, so no tensor over it reads past its bytes
// (TensorBundle::fromBuffer trusts its caller).
Result<torch::ScalarType> checkedType(const TensorEntry& entry)
{
    auto type = torchType(entry.dtype);
    if (!type)
        return fail(QStringLiteral("tensor \"%1\": %2").arg(entry.name, type.error()));
    if (TensorBundle::byteSizeFor(entry.dtype, entry.shape) != entry.byteSize)
        return fail(QStringLiteral("tensor \"%1\": shape %2 of %3 does not match its %4 bytes")
                        .arg(entry.name, shapeToString(entry.shape), dtypeName(entry.dtype))
                        .arg(entry.byteSize));
    return type;
}

} // namespace

Result<torch::Tensor> viewTensor(TensorBundle& bundle, const TensorEntry& entry)
{
    auto type = checkedType(entry);
    if (!type)
        return fail(type.error());
    return torch::from_blob(bundle.mutableData(entry), sizesOf(entry), torch::TensorOptions().dtype(*type));
}

Result<torch::Tensor> constView(const TensorBundle& bundle, const TensorEntry& entry)
{
    auto type = checkedType(entry);
    if (!type)
        return fail(type.error());
    const char* bytes = bundle.data(entry).data();
    if (quintptr(bytes) % quintptr(dtypeSize(entry.dtype)) != 0)
        return toTensor(bundle, entry);
    // data() does not detach; from_blob wants a non-const pointer but nothing writes through this tensor.
    return torch::from_blob(const_cast<char*>(bytes), sizesOf(entry), torch::TensorOptions().dtype(*type));
}

Result<torch::Tensor> toTensor(const TensorBundle& bundle, const TensorEntry& entry)
{
    auto type = checkedType(entry);
    if (!type)
        return fail(type.error());
    // A fresh tensor and memcpy: correct for bytes at any alignment, which from_blob + clone is not.
    torch::Tensor tensor = torch::empty(sizesOf(entry), torch::TensorOptions().dtype(*type));
    const QByteArrayView bytes = bundle.data(entry);
    if (!bytes.isEmpty())
        std::memcpy(tensor.data_ptr(), bytes.data(), size_t(bytes.size()));
    return tensor;
}

Status addTensor(TensorBundle& bundle, const QString& name, const torch::Tensor& tensor)
{
    auto type = bundleType(tensor.scalar_type());
    if (!type)
        return fail(QStringLiteral("tensor \"%1\": %2").arg(name, type.error()));
    const torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    QList<qint64> shape;
    for (auto d : cpu.sizes())
        shape.append(qint64(d));
    char* target = bundle.addZeroed(name, *type, shape);
    if (!target)
        return fail(QStringLiteral("tensor \"%1\" is already in the bundle").arg(name));
    if (cpu.nbytes() > 0)
        std::memcpy(target, cpu.data_ptr(), cpu.nbytes());
    return {};
}

NamedTensors namedWeights(const Network& net)
{
    NamedTensors out = net.parameters();
    NamedTensors buffers = net.buffers();
    out.insert(out.end(), std::make_move_iterator(buffers.begin()), std::make_move_iterator(buffers.end()));
    return out;
}

} // namespace gleaner::ml
