#include "codec/Half.h"

#include <bit>

namespace gleaner::Half {

std::uint16_t fromFloat(float value)
{
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint16_t sign = std::uint16_t((bits >> 16) & 0x8000u);
    const std::uint32_t exponent = (bits >> 23) & 0xffu;
    std::uint32_t mantissa = bits & 0x7fffffu;

    if (exponent == 0xff) // infinity, or NaN (kept a quiet NaN)
        return std::uint16_t(sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0u));
    const int e = int(exponent) - 127 + 15; // the half's biased exponent
    if (e >= 0x1f)
        return std::uint16_t(sign | 0x7c00u); // too large: infinity
    if (e <= 0) {
        // A subnormal half, or zero: shift the mantissa (with its implicit leading one) into place, rounding.
        if (e < -10)
            return sign; // below half the smallest subnormal: zero
        mantissa |= 0x800000u;
        const int shift = 14 - e;
        const std::uint32_t half = mantissa >> shift;
        const std::uint32_t rest = mantissa & ((1u << shift) - 1);
        const std::uint32_t midpoint = 1u << (shift - 1);
        const std::uint32_t rounded =
            half + ((rest > midpoint || (rest == midpoint && (half & 1u))) ? 1u : 0u);
        return std::uint16_t(sign |
                             rounded); // a carry into the exponent field gives the smallest normal: right
    }
    const std::uint32_t half = (std::uint32_t(e) << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    // A carry out of the mantissa steps the exponent up, and from the largest finite value to infinity:
    // right.
    const std::uint32_t rounded = half + ((rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ? 1u : 0u);
    return std::uint16_t(sign | rounded);
}

float toFloat(std::uint16_t half)
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
    // Subnormal: normalise it.
    int e = -1;
    do {
        ++e;
        mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    return std::bit_cast<float>(sign | std::uint32_t(127 - 15 - e) << 23 | ((mantissa & 0x3ffu) << 13));
}

} // namespace gleaner::Half
