// NumPy .npy files (format versions 1.0, 2.0, 3.0): 6-byte magic "\x93NUMPY", version bytes, a
// little-endian header length (2 bytes in 1.0, 4 after), a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (T, I), }, then the raw C-order data.
//
// Reading accepts only what hotpath needs: little-endian float32/float64, C order, 2-D ([T, I]) or 3-D
// ([S, T, I]); anything else, and any truncated or malformed file, is refused with a hotpath::Error
// naming the problem (never read out of bounds). Writing makes format 1.0 as numpy.save does.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hotpath::util {
class AtomicFile;
}

namespace hotpath::npy {

inline constexpr uint64_t kMaxHeaderBytes = 1 << 20;  // numpy writes ~128; a larger one is not a real array

// What a header says, checked against the file's size: the data fills the rest of the file exactly.
struct Header {
  std::vector<int64_t> shape;  // 2 or 3 dimensions
  std::string descr;           // "<f4" or "<f8" (or numpy's native-order spellings "=f4", "=f8")
  size_t item = 0;             // bytes per value: 4 or 8
  uint64_t data_offset = 0;    // where the data starts
  uint64_t count = 0;          // values: the product of the shape
};
// `bytes`: the start of a file of `file_size` bytes, at least through its header (or all of the file).
Header parse_header(std::span<const uint8_t> bytes, uint64_t file_size, const std::string& source_name);

template <class T>
struct Values {
  std::vector<int64_t> shape;
  std::string descr;
  std::vector<T> values;  // row-major
};
// Every value exactly as stored (float32 widened exactly).
using Array = Values<double>;
// float32 as stored; float64 rounded to nearest, a finite value beyond float32's range refused naming
// its element (it would otherwise become an infinity).
using FloatArray = Values<float>;

Array parse(std::span<const uint8_t> bytes, const std::string& source_name);
FloatArray parse_f32(std::span<const uint8_t> bytes, const std::string& source_name);
Array read_file(const std::string& path);
// Reads the data straight into the floats: no copy of the file is held beside them.
FloatArray read_file_f32(const std::string& path);

// The bytes before the data of a C-order '<f4' or '<f8' array of `shape`, as numpy.save writes them
// (format 1.0, the header padded with spaces and a '\n' so that the data starts 64-byte aligned).
std::string header(std::span<const int64_t> shape, bool f64);
// Header and data into `out` (not committed: the caller commits when everything is written).
void write(util::AtomicFile& out, std::span<const int64_t> shape, std::span<const float> values);
void write(util::AtomicFile& out, std::span<const int64_t> shape, std::span<const double> values);
// A whole file, atomically (util/atomic_file.hpp); throws hotpath::Error naming the path.
void write_file(const std::string& path, std::span<const int64_t> shape, std::span<const float> values);
void write_file(const std::string& path, std::span<const int64_t> shape, std::span<const double> values);

}  // namespace hotpath::npy
