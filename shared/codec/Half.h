#pragma once
// IEEE 754 binary16 ("half", safetensors' F16) to and from float, in plain integer arithmetic so that every
// machine, compiler and flag gives the same bits: an agent and the coordinator must agree exactly on what an
// encoded update says.

#include <bit>
#include <cstdint>

namespace gleaner::Half {

// Rounds to the nearest half, ties to even; beyond the largest half (65504) gives infinity, NaN stays NaN.
std::uint16_t fromFloat(float value);
// Exact: every half is a float. Inline: a decoder calls it for every value of a model.
inline float toFloat(std::uint16_t half)
{
    const std::uint32_t sign = std::uint32_t(half & 0x8000u) << 16;
    const std::uint32_t exponent = (half >> 10) & 0x1fu;
    std::uint32_t mantissa = half & 0x3ffu;
    if (exponent == 0x1f)
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent != 0)
        return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
    if (mantissa == 0)
        return std::bit_cast<float>(sign);
    // Subnormal: mantissa * 2^-24, normalised around its highest set bit p (0 to 9).
    const int p = 31 - std::countl_zero(mantissa);
    return std::bit_cast<float>(sign | std::uint32_t(103 + p) << 23 | ((mantissa << (23 - p)) & 0x7fffffu));
}

} // namespace gleaner::Half
