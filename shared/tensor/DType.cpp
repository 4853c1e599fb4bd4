#include "tensor/DType.h"

#include <array>

namespace gleaner {
namespace {

struct DTypeInfo
{
    DType type;
    const char16_t* name;
    int size;
    bool floating;
};

constexpr std::array<DTypeInfo, 13> kTypes{{
    {DType::Bool, u"BOOL", 1, false},
    {DType::U8, u"U8", 1, false},
    {DType::I8, u"I8", 1, false},
    {DType::I16, u"I16", 2, false},
    {DType::U16, u"U16", 2, false},
    {DType::F16, u"F16", 2, true},
    {DType::BF16, u"BF16", 2, true},
    {DType::I32, u"I32", 4, false},
    {DType::U32, u"U32", 4, false},
    {DType::F32, u"F32", 4, true},
    {DType::F64, u"F64", 8, true},
    {DType::I64, u"I64", 8, false},
    {DType::U64, u"U64", 8, false},
}};

const DTypeInfo& info(DType type)
{
    for (const auto& entry : kTypes)
        if (entry.type == type)
            return entry;
    return kTypes[0]; // unreachable: every enumerator is in the table
}

} // namespace

int dtypeSize(DType type)
{
    return info(type).size;
}

QString dtypeName(DType type)
{
    return QString::fromUtf16(info(type).name);
}

std::optional<DType> dtypeFromName(QStringView name)
{
    for (const auto& entry : kTypes)
        if (name == QStringView(entry.name))
            return entry.type;
    return std::nullopt;
}

bool dtypeIsFloating(DType type)
{
    return info(type).floating;
}

} // namespace gleaner
