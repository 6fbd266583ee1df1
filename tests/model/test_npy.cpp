// The .npy reader (src/model/npy): what numpy.save writes is read exactly; every corrupt or unsupported
// file is refused with a named error, never read out of bounds.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "model/npy.hpp"
#include "util/atomic_file.hpp"
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
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data),
                 "1 dimensions, expected 2 ([T, I]) or 3 ([S, T, I])");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data), "0 dimensions");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 3), }", data), "4 dimensions");
  // Fortran order is refused in 3-D too (its data would be read transposed).
  EXPECT_REFUSED(npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (1, 1, 3), }", raw(std::vector<double>(3))),
                 "Fortran");
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

TEST(Npy, ThreeDimensionsReadExactly) {
  std::vector<double> d(2 * 3 * 4);
  for (size_t k = 0; k < d.size(); ++k) d[k] = 0.1 * double(k) - 1.0;
  const auto bytes = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }", raw(d));
  const npy::Array a = npy::parse(bytes, "x.npy");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.values, d);
  // As float32: float64 rounded to nearest, float32 as stored.
  const npy::FloatArray f = npy::parse_f32(bytes, "x.npy");
  EXPECT_EQ(f.shape, a.shape);
  ASSERT_EQ(f.values.size(), d.size());
  for (size_t k = 0; k < d.size(); ++k) EXPECT_EQ(f.values[k], static_cast<float>(d[k])) << k;
  std::vector<float> g(d.begin(), d.end());
  g[5] = std::nanf("");
  g[6] = -std::numeric_limits<float>::infinity();  // NaN/Inf are read as they are: the engine names them
  const npy::FloatArray h =
      npy::parse_f32(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", raw(g)), "x.npy");
  EXPECT_EQ(h.shape, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(std::memcmp(h.values.data(), g.data(), g.size() * 4), 0);
}

TEST(Npy, EmptyDimensionsHoldNoData) {
  for (const auto& [text, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"(0, 3)", {0, 3}}, {"(0, 5, 3)", {0, 5, 3}}, {"(2, 0, 3)", {2, 0, 3}}, {"(2, 5, 0)", {2, 5, 0}},
           {"(0, 1125899906842624, 3)", {0, int64_t(1) << 50, 3}}}) {
    const npy::FloatArray a =
        npy::parse_f32(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + text + ", }", {}), "x.npy");
    EXPECT_TRUE(a.values.empty()) << text;
    EXPECT_EQ(a.shape, shape) << text;
  }
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5, 3), }", raw(std::vector<float>(1))),
                 "holds 4 bytes, shape [0, 5, 3] needs 0");
}

TEST(Npy, HugeThreeDimensionalShapesAreTruncationNotOverflow) {
  // 2^40 cubed overflows 64 bits: the product is bounded by the bytes present before it is formed.
  EXPECT_REFUSED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, "
                           "1099511627776), }",
                           raw(std::vector<float>(6))),
                 "truncated .npy data");
  EXPECT_REFUSED(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 1), }", raw(std::vector<float>(6))),
                 "truncated .npy data (shape [2, 3, 1] of <f8");
}

TEST(Npy, Float64BeyondFloat32RangeIsNamed) {
  std::vector<double> d(2 * 2 * 3, 1.0);
  d[1 * 6 + 0 * 3 + 2] = 1e300;
  const auto bytes = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 3), }", raw(d));
  EXPECT_EQ(npy::parse(bytes, "x.npy").values[8], 1e300);  // float64 reading keeps it
  try {
    npy::parse_f32(bytes, "x.npy");
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element [1, 0, 2] is 1.0000000000000001e+300, beyond float32's range"),
              std::string::npos)
        << e.what();
  }
  d[8] = 3.4028235e38;  // just above FLT_MAX, rounds to it: in range
  EXPECT_EQ(npy::parse_f32(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 3), }", raw(d)), "x.npy")
                .values[8],
            std::numeric_limits<float>::max());
}

class NpyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hotpath_npy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& p, const std::vector<uint8_t>& b) const {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::filesystem::path dir_;
};

// A file is read the way its bytes are parsed, the float64 one across the reader's chunk boundaries.
TEST_F(NpyFile, ReadFileMatchesParse) {
  const size_t S = 3, T = 30001, I = 2;  // 180006 values: three chunks of 65536 and a partial one
  std::vector<double> d(S * T * I);
  for (size_t k = 0; k < d.size(); ++k) d[k] = std::sin(double(k)) * 1e3;
  const auto b8 = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 30001, 2), }", raw(d));
  write(path("d.npy"), b8);
  const npy::FloatArray f = npy::read_file_f32(path("d.npy"));
  EXPECT_EQ(f.shape, (std::vector<int64_t>{3, 30001, 2}));
  EXPECT_EQ(f.values, npy::parse_f32(b8, "d.npy").values);
  EXPECT_EQ(npy::read_file(path("d.npy")).values, d);
  std::vector<float> g(d.begin(), d.end());
  const auto b4 = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (90003, 2), }", raw(g), 2);
  write(path("g.npy"), b4);
  EXPECT_EQ(npy::read_file_f32(path("g.npy")).values, g);
  // A truncated file is refused by the file reader as by the parser.
  write(path("cut.npy"), std::vector<uint8_t>(b4.begin(), b4.end() - 3));
  try {
    npy::read_file_f32(path("cut.npy"));
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated .npy data"), std::string::npos) << e.what();
  }
  for (const char* tiny : {"", "\x93NUM", "\x93NUMPY\x01"}) {
    write(path("tiny.npy"), std::vector<uint8_t>(tiny, tiny + std::strlen(tiny)));
    EXPECT_THROW(npy::read_file_f32(path("tiny.npy")), Error) << tiny;
  }
  try {
    npy::read_file_f32(dir_.string());
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// What numpy 2.4 writes for these arrays (np.save into a BytesIO), byte for byte: the writer's header
// must be the same, including numpy's room for the first dimension to grow.
TEST(NpyWriter, HeaderIsWhatNumpyWrites) {
  const std::string pad38(38, ' '), pad34(34, ' ');
  const std::vector<int64_t> s23 = {2, 3}, s3404 = {3, 40, 4};
  EXPECT_EQ(npy::header(s23, false),
            std::string("\x93NUMPY\x01\x00v\x00", 10) + "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                std::string(20, ' ') + pad38 + "\n");
  EXPECT_EQ(npy::header(s3404, true),
            std::string("\x93NUMPY\x01\x00v\x00", 10) + "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 40, 4), }" +
                std::string(20, ' ') + pad34 + "\n");
  for (const auto& shape : std::vector<std::vector<int64_t>>{{0, 5}, {7}, {123456789012, 1, 1}, {1, 2, 3}})
    for (bool f64 : {false, true}) EXPECT_EQ(npy::header(shape, f64).size() % 64, 0u) << shape.size();
}

TEST_F(NpyFile, WrittenFilesReadBackExactly) {
  std::vector<double> d = {0.1, -2.5, 1e300, 3.0, 5e-324, -0.0};
  const std::vector<int64_t> s3 = {1, 3, 2}, s2 = {3, 2};
  npy::write_file(path("d.npy"), s3, std::span<const double>(d));
  const npy::Array a = npy::read_file(path("d.npy"));
  EXPECT_EQ(a.shape, s3);
  EXPECT_EQ(a.descr, "<f8");
  EXPECT_EQ(std::memcmp(a.values.data(), d.data(), d.size() * 8), 0);
  const std::vector<float> f = {1.5f, std::nanf(""), -3.0f, 1e-40f, 7.0f, 0.0f};
  npy::write_file(path("f.npy"), s2, std::span<const float>(f));
  const npy::FloatArray b = npy::read_file_f32(path("f.npy"));
  EXPECT_EQ(b.shape, s2);
  EXPECT_EQ(b.descr, "<f4");
  EXPECT_EQ(std::memcmp(b.values.data(), f.data(), f.size() * 4), 0);
  EXPECT_EQ(files(), (std::vector<std::string>{"d.npy", "f.npy"})) << "a temporary file is left";
  // Values that do not fill the shape: refused, and the file before it stays as it was.
  EXPECT_THROW(npy::write_file(path("f.npy"), s3, std::span<const float>(f.data(), 5)), Error);
  EXPECT_EQ(npy::read_file_f32(path("f.npy")).shape, s2);
  EXPECT_EQ(files(), (std::vector<std::string>{"d.npy", "f.npy"}));
  try {
    npy::write_file(path("no_such_dir/x.npy"), s2, std::span<const float>(f));
    FAIL() << "written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/x.npy: cannot create a file there"), std::string::npos) << e.what();
  }
}

TEST(Npy, FifoIsNotARegularFile) {
  const std::string p =
      (std::filesystem::temp_directory_path() / ("hotpath_npy_fifo_" + std::to_string(::getpid()) + ".npy")).string();
  std::filesystem::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << std::strerror(errno);
  // Held open for writing, so that a reader's open does not block: it then read as an empty file,
  // "not a .npy file (no magic)".
  const int writer = ::open(p.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(writer, 0) << std::strerror(errno);
  for (int f32 = 0; f32 < 2; ++f32) {
    try {
      if (f32) npy::read_file_f32(p);
      else npy::read_file(p);
      ADD_FAILURE() << "a FIFO was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p + ": is a FIFO (named pipe), not a regular file"), std::string::npos)
          << e.what();
    }
  }
  ::close(writer);
  std::filesystem::remove(p);
}

TEST(Npy, MissingFileNamed) {
  try {
    npy::read_file("/nonexistent/dir/x.npy");
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(npy::read_file_f32("/nonexistent/dir/x.npy"), Error);
}

}  // namespace
}  // namespace hotpath
