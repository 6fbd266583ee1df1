// libFuzzer target: the .npy reader (npy::parse, what `hotpath scaler fit --inputs x.npy` runs on a
// file's bytes) on arbitrary bytes. A refusal (hotpath::Error) is the expected answer to bad input; a
// crash, a sanitizer report, a leak, a huge allocation, another exception or a broken promise of an
// Array that parsed is a bug. The promises (model/npy.hpp): 2-D, little-endian float32 or float64, C
// order, the data filling the file exactly after the header, and every value the file's own bits
// (float32 widened exactly).
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

void check(const npy::Array& a, std::span<const uint8_t> bytes) {
  require(a.shape.size() == 2 && a.shape[0] >= 0 && a.shape[1] >= 0);
  const bool f4 = a.descr == "<f4" || a.descr == "=f4";
  require(f4 || a.descr == "<f8" || a.descr == "=f8");
  const size_t item = f4 ? 4 : 8;
  const size_t n = size_t(a.shape[0]) * size_t(a.shape[1]);
  require(a.values.size() == n);
  // Where the data starts: after the magic, the version, the header length (2 bytes in 1.0, 4 after)
  // and the header.
  const size_t len_bytes = bytes[6] == 1 ? 2 : 4;
  uint64_t header_len = 0;
  for (size_t k = len_bytes; k-- > 0;) header_len = (header_len << 8) | bytes[8 + k];
  const size_t start = 8 + len_bytes + size_t(header_len);
  require(start <= bytes.size() && bytes.size() - start == n * item);
  for (size_t k = 0; k < n; ++k) {
    const uint8_t* raw = bytes.data() + start + k * item;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    check(npy::parse(bytes, "fuzz"), bytes);
  } catch (const hotpath::Error&) {
    // bad input, refused: expected
  }
  return 0;
}
