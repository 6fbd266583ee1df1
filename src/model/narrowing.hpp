// float64 arrays read as float32 (what the engine computes in), one rule for every reader (.npy,
// safetensors): each value rounded to nearest, and a finite value past float32's range refused, naming
// its element, instead of becoming an infinity.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace hotpath {

// "[2, 40, 4]".
std::string shape_text(std::span<const int64_t> shape);
// Element `index` of a C-order array of `shape`, as "[s, t, i]".
std::string element_text(uint64_t index, std::span<const int64_t> shape);

// dst[k] = (float) the little-endian float64 at src + 8k, for k in [0, n). The values are elements
// first.. of an array of `shape`; an out-of-range one throws hotpath::Error
// "<what> [s, t, i] is <value>, beyond float32's range (the engine computes in float32)".
void narrow_f64_to_f32(const uint8_t* src, size_t n, float* dst, uint64_t first, std::span<const int64_t> shape,
                       const std::string& what);

}  // namespace hotpath
