// The .npy reader (src/model/npy): what numpy.save writes is read exactly; every corrupt or unsupported
// file is refused with a named error, never read out of bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/npy.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

// What numpy.save writes (format 1.0): magic, version, header length, the dict padded with spaces to a
// multiple of 64 bytes ending in '\n', then the data.
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<uint8_t>& data, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  const uint32_t n = uint32_t(header.size());
  b.push_back(uint8_t(n & 0xff));
  b.push_back(uint8_t(n >> 8));
  if (major != 1) {
    b.push_back(uint8_t(n >> 16));
    b.push_back(uint8_t(n >> 24));
  }
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    npy::parse(bytes, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_REFUSED(bytes, words)                                \
  do {                                                              \
    const std::string e_ = error_of(bytes);                         \
    EXPECT_NE(e_.find(words), std::string::npos) << e_;             \
    EXPECT_EQ(e_.find('\n'), std::string::npos) << "not one line: " << e_; \
  } while (0)

const std::string kF4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST(Npy, Float32AndFloat64ReadExactly) {
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 1e-30f, 7.0f, -0.0f};
  const npy::Array a = npy::parse(npy_bytes(kF4, raw(f)), "x.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.values.size(), 6u);
  for (size_t k = 0; k < 6; ++k) EXPECT_EQ(a.values[k], double(f[k]));
  const std::vector<double> d = {0.1, 1e300, -5, 2, 3, 4};
  for (int major : {1, 2, 3}) {
    const npy::Array b =
        npy::parse(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", raw(d), major), "x.npy");
    EXPECT_EQ(b.shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(b.values, d);
  }
}

TEST(Npy, BadMagicAndVersion) {
  auto b = npy_bytes(kF4, raw(std::vector<float>(6)));
  b[1] = 'X';
  EXPECT_REFUSED(b, "not a .npy file");
  EXPECT_REFUSED((std::vector<uint8_t>{0x93, 'N', 'U'}), "not a .npy file");
  b = npy_bytes(kF4, raw(std::vector<float>(6)));
  b[6] = 9;
  EXPECT_REFUSED(b, "format version 9.0 is not supported");
}

TEST(Npy, BadHeaders) {
  const auto data = raw(std::vector<float>(6));
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, }", data), "no 'shape' key");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'shape': (2, 3), }", data), "no 'fortran_order' key");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", data), "bad .npy header");
  EXPECT_REFUSED(npy_bytes("['descr', '<f4']", data), "bad .npy header");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", data), "bad .npy header");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", data), "fortran_order");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk", data), "after the closing");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data),
                 "appears twice");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 3), }", data),
                 "too large");
  // A header length past the end of the file.
  auto b = npy_bytes(kF4, data);
  b[8] = 0xff;
  b[9] = 0xff;
  EXPECT_REFUSED(b, "truncated .npy file");
  b = npy_bytes(kF4, data, 2);
  b[11] = 0x7f;  // 2 GB header
  EXPECT_REFUSED(b, "over the");
}

TEST(Npy, WrongDtypeFortranOrderAndDimensions) {
  const auto data = raw(std::vector<float>(6));
  for (const char* d : {"<i4", ">f4", "<f2", "|u1", "<c8"})
    EXPECT_REFUSED(npy_bytes(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (2, 3), }", data),
                   "is not supported");
  EXPECT_REFUSED(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", data), "bad .npy header");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data), "Fortran");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data), "1 dimensions, expected 2");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3), }", data), "3 dimensions");
}

TEST(Npy, TruncatedOrOverlongData) {
  EXPECT_REFUSED(npy_bytes(kF4, raw(std::vector<float>(5))), "truncated .npy data");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
                           raw(std::vector<float>(6))),
                 "bad .npy header");  // a dimension over the limit
  EXPECT_REFUSED(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }",
                           raw(std::vector<float>(6))),
                 "truncated .npy data");
  EXPECT_REFUSED(npy_bytes(kF4, raw(std::vector<float>(7))), "holds 28 bytes");
}

TEST(Npy, MissingFileNamed) {
  try {
    npy::read_file("/nonexistent/dir/x.npy");
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotpath
