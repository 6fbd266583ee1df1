#include "model/narrowing.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/error.hpp"

namespace hotpath {

std::string shape_text(std::span<const int64_t> shape) {
  std::string s;
  for (auto d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

std::string element_text(uint64_t index, std::span<const int64_t> shape) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t n = uint64_t(shape[d]);
    at[d] = int64_t(n ? index % n : 0);
    index = n ? index / n : 0;
  }
  return shape_text(at);
}

void narrow_f64_to_f32(const uint8_t* src, size_t n, float* dst, uint64_t first, std::span<const int64_t> shape,
                       const std::string& what) {
  for (size_t k = 0; k < n; ++k) {
    double d;
    std::memcpy(&d, src + 8 * k, 8);
    dst[k] = static_cast<float>(d);
    if (std::isinf(dst[k]) && std::isfinite(d)) {
      char v[32];
      std::snprintf(v, sizeof v, "%.17g", d);
      throw Error(what + " " + element_text(first + k, shape) + " is " + v +
                  ", beyond float32's range (the engine computes in float32)");
    }
  }
}

}  // namespace hotpath
