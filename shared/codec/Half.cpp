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

} // namespace gleaner::Half
