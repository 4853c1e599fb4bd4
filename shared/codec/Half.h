#pragma once
// IEEE 754 binary16 ("half", safetensors' F16) to and from float, in plain integer arithmetic so that every
// machine, compiler and flag gives the same bits: an agent and the coordinator must agree exactly on what an
// encoded update says.

#include <cstdint>

namespace gleaner::Half {

// Rounds to the nearest half, ties to even; beyond the largest half (65504) gives infinity, NaN stays NaN.
std::uint16_t fromFloat(float value);
// Exact: every half is a float.
float toFloat(std::uint16_t half);

} // namespace gleaner::Half
