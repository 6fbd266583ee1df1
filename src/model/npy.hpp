// A reader of NumPy .npy files (format versions 1.0, 2.0, 3.0): 6-byte magic "\x93NUMPY", version
// bytes, a little-endian header length (2 bytes in 1.0, 4 after), a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (T, I), }, then the raw C-order data. Only what
// hotpath needs is accepted: little-endian float32/float64, C order, 2-D; anything else, and any
// truncated or malformed file, is refused with a hotpath::Error naming the problem (never read out of
// bounds).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hotpath::npy {

inline constexpr uint64_t kMaxHeaderBytes = 1 << 20;  // numpy writes ~128; a larger one is not a real array

struct Array {
  std::vector<int64_t> shape;  // [rows, cols]
  std::string descr;           // "<f4" or "<f8"
  std::vector<double> values;  // rows * cols, row-major, converted exactly
};

Array parse(std::span<const uint8_t> bytes, const std::string& source_name);
Array read_file(const std::string& path);

}  // namespace hotpath::npy
