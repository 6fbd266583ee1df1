// libFuzzer target: the .npy reader (npy::parse and npy::parse_f32, what `hotpath scaler fit` and
// `hotpath run --inputs x.npy` run on a file's bytes) on arbitrary bytes. A refusal (hotpath::Error) is
// the expected answer to bad input; a crash, a sanitizer report, a leak, a huge allocation, another
// exception or a broken promise of an array that parsed is a bug. The promises (model/npy.hpp): 2-D or
// 3-D, little-endian float32 or float64, C order, the data filling the file exactly after the header;
// parse gives every value's own bits (float32 widened exactly), parse_f32 float32 as stored and float64
// rounded to nearest, refusing only a finite float64 beyond float32's range.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "model/npy.hpp"
#include "util/error.hpp"

namespace npy = hotpath::npy;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Where the data starts: after the magic, the version, the header length (2 bytes in 1.0, 4 after)
// and the header.
size_t data_start(std::span<const uint8_t> bytes) {
  const size_t len_bytes = bytes[6] == 1 ? 2 : 4;
  uint64_t header_len = 0;
  for (size_t k = len_bytes; k-- > 0;) header_len = (header_len << 8) | bytes[8 + k];
  return 8 + len_bytes + size_t(header_len);
}

template <class T>
size_t check_shape(const npy::Values<T>& a, std::span<const uint8_t> bytes, bool* f4) {
  require(a.shape.size() == 2 || a.shape.size() == 3);
  size_t n = 1;
  for (auto d : a.shape) {
    require(d >= 0);
    n *= size_t(d);
  }
  *f4 = a.descr == "<f4" || a.descr == "=f4";
  require(*f4 || a.descr == "<f8" || a.descr == "=f8");
  require(a.values.size() == n);
  const size_t start = data_start(bytes);
  require(start <= bytes.size() && bytes.size() - start == n * (*f4 ? 4 : 8));
  return start;
}

void check(const npy::Array& a, std::span<const uint8_t> bytes) {
  bool f4 = false;
  const size_t start = check_shape(a, bytes, &f4);
  for (size_t k = 0; k < a.values.size(); ++k) {
    const uint8_t* raw = bytes.data() + start + k * (f4 ? 4 : 8);
    if (f4) {
      float f;
      std::memcpy(&f, raw, 4);
      const double widened = f;
      require(std::memcmp(&widened, &a.values[k], 8) == 0);  // bit for bit (NaN payloads included)
    } else {
      require(std::memcmp(raw, &a.values[k], 8) == 0);
    }
  }
}

void check_f32(const npy::FloatArray& a, const npy::Array& wide, std::span<const uint8_t> bytes) {
  bool f4 = false;
  check_shape(a, bytes, &f4);
  require(a.shape == wide.shape && a.descr == wide.descr);
  for (size_t k = 0; k < a.values.size(); ++k) {
    const float expected = static_cast<float>(wide.values[k]);
    if (std::isnan(expected)) require(std::isnan(a.values[k]));
    else require(std::memcmp(&expected, &a.values[k], 4) == 0);
    if (f4 && !std::isnan(expected)) require(double(a.values[k]) == wide.values[k]);  // as stored
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  npy::Array wide;
  try {
    wide = npy::parse(bytes, "fuzz");
    check(wide, bytes);
  } catch (const hotpath::Error&) {
    // bad input, refused: expected; then the float32 reader refuses it too
    try {
      npy::parse_f32(bytes, "fuzz");
      require(false);
    } catch (const hotpath::Error&) {
    }
    return 0;
  }
  bool beyond = false;  // a finite float64 that float32 cannot hold: the only extra refusal
  for (double v : wide.values) beyond = beyond || (std::isfinite(v) && std::isinf(static_cast<float>(v)));
  try {
    check_f32(npy::parse_f32(bytes, "fuzz"), wide, bytes);
    require(!beyond);
  } catch (const hotpath::Error&) {
    require(beyond);
  }
  return 0;
}
