#include "model/npy.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "model/narrowing.hpp"
#include "model/safetensors.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/regular_file.hpp"

namespace hotpath::npy {
namespace {

// The data are read and written as the host holds them.
static_assert(std::endian::native == std::endian::little, "the .npy data are little-endian");

// The header's Python literal: a dict of string keys whose values are strings, True/False or tuples of
// non-negative integers. Nothing else appears in a numpy header.
struct Value {
  std::string text;              // a string, or "True"/"False"
  std::vector<int64_t> tuple;
  bool is_tuple = false;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& source) : s_(s), source_(source) {}

  std::map<std::string, Value> dict() {
    std::map<std::string, Value> d;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      const std::string key = string();
      expect(':');
      skip();
      Value v;
      if (peek() == '\'' || peek() == '"') v.text = string();
      else if (peek() == '(') v = tuple();
      else v.text = word();
      if (!d.emplace(key, std::move(v)).second) throw bad("key " + safetensors::quote_key(key) + " appears twice");
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') throw bad("expected ',' or '}' at byte " + std::to_string(i_));
    }
    ++i_;
    skip();
    if (i_ != s_.size()) throw bad("text after the closing '}'");
    return d;
  }

  Error bad(const std::string& what) const { return Error(source_ + ": bad .npy header: " + what); }

 private:
  char peek() const {
    if (i_ >= s_.size()) throw bad("ends early");
    return s_[i_];
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip();
    if (peek() != c) throw bad(std::string("expected '") + c + "' at byte " + std::to_string(i_));
    ++i_;
  }
  std::string string() {
    skip();
    const char q = peek();
    if (q != '\'' && q != '"') throw bad("expected a quoted key at byte " + std::to_string(i_));
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) throw bad("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  std::string word() {
    const size_t b = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (b == i_) throw bad("unexpected character at byte " + std::to_string(b));
    return std::string(s_.substr(b, i_ - b));
  }
  Value tuple() {
    Value v;
    v.is_tuple = true;
    expect('(');
    for (;;) {
      skip();
      if (peek() == ')') break;
      const size_t b = i_;
      int64_t n = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (n > (int64_t(1) << 50)) throw bad("a dimension of the shape is too large");
        n = n * 10 + (s_[i_++] - '0');
      }
      if (b == i_) throw bad("a shape holds something other than non-negative integers");
      if (v.tuple.size() >= 32) throw bad("the shape has more than 32 dimensions");
      v.tuple.push_back(n);
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') throw bad("expected ',' or ')' in the shape");
    }
    ++i_;
    return v;
  }

  std::string_view s_;
  const std::string& source_;
  size_t i_ = 0;
};

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

// The bytes before the data (magic, version, header length, header), checked against the file's size.
// `bytes`: the file's first 12 bytes, or all of a shorter file.
uint64_t preamble_size(std::span<const uint8_t> bytes, uint64_t file_size, const std::string& source) {
  static constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (file_size < 10 || bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    throw Error(source + ": not a .npy file (no \\x93NUMPY magic at the start)");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    throw Error(source + ": .npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
                " is not supported (1.0, 2.0 and 3.0 are)");
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t start = 8 + size_t(len_bytes);
  if (file_size < start || bytes.size() < start)
    throw Error(source + ": truncated .npy file (the header length is cut off)");
  const uint64_t header_len = le(bytes.data() + 8, len_bytes);
  if (header_len > kMaxHeaderBytes)
    throw Error(source + ": .npy header of " + std::to_string(header_len) + " bytes is over the " +
                std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (header_len > file_size - start)
    throw Error(source + ": truncated .npy file (header of " + std::to_string(header_len) + " bytes, " +
                std::to_string(file_size - start) + " left)");
  return start + header_len;
}

// `n` stored values from `src` into `dst`, element `first` on: widened exactly, or narrowed to float
// (rounded to nearest; a finite value past float's range is refused, naming it).
template <class T>
void convert(const uint8_t* src, size_t n, const Header& h, T* dst, uint64_t first, const std::string& source) {
  if (h.item == sizeof(T)) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  if constexpr (sizeof(T) == 8) {
    for (size_t k = 0; k < n; ++k) {
      float f;
      std::memcpy(&f, src + 4 * k, 4);
      dst[k] = f;
    }
  } else {
    narrow_f64_to_f32(src, n, dst, first, h.shape, source + ": element");
  }
}

template <class T>
Values<T> parse_values(std::span<const uint8_t> bytes, const std::string& source) {
  const Header h = parse_header(bytes, bytes.size(), source);
  Values<T> a{h.shape, h.descr, std::vector<T>(size_t(h.count))};
  convert(bytes.data() + h.data_offset, size_t(h.count), h, a.values.data(), 0, source);
  return a;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

template <class T>
Values<T> read_values(const std::string& path) {
  util::require_regular_file(path, "a .npy file");
  const std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat info {};
  if (::fstat(::fileno(f.get()), &info) != 0) throw Error(path + ": cannot read (" + std::strerror(errno) + ")");
  const uint64_t size = uint64_t(info.st_size);
  auto read = [&](void* dst, size_t n) {
    if (std::fread(dst, 1, n, f.get()) != n)
      throw Error(path + (std::ferror(f.get()) ? ": read failed (" + std::string(std::strerror(errno)) + ")"
                                               : std::string(": the file shrank while it was read")));
  };
  std::vector<uint8_t> pre(size_t(std::min<uint64_t>(size, 12)));
  read(pre.data(), pre.size());
  const uint64_t preamble = preamble_size(pre, size, path);
  const size_t have = pre.size();
  pre.resize(size_t(preamble));
  if (preamble > have) read(pre.data() + have, size_t(preamble - have));
  const Header h = parse_header(pre, size, path);
  Values<T> a{h.shape, h.descr, std::vector<T>(size_t(h.count))};
  if (h.item == sizeof(T)) {
    read(a.values.data(), a.values.size() * sizeof(T));  // straight into the result
  } else {
    constexpr size_t kChunk = 1 << 16;  // values converted at a time: a small buffer, not a second copy
    std::vector<uint8_t> buf(kChunk * h.item);
    for (uint64_t done = 0; done < h.count;) {
      const size_t n = size_t(std::min<uint64_t>(kChunk, h.count - done));
      read(buf.data(), n * h.item);
      convert(buf.data(), n, h, a.values.data() + done, done, path);
      done += n;
    }
  }
  return a;
}

template <class T>
void write_values(util::AtomicFile& out, std::span<const int64_t> shape, std::span<const T> values) {
  uint64_t count = 1;
  for (auto d : shape) count *= uint64_t(d);  // header() refuses negative dimensions first
  const std::string h = header(shape, sizeof(T) == 8);
  if (count != values.size())
    throw Error(out.path() + ": " + std::to_string(values.size()) + " values do not fill shape " +
                shape_text({shape.begin(), shape.end()}));
  out.write(h.data(), h.size());
  out.write(values.data(), values.size() * sizeof(T));
}

}  // namespace

Header parse_header(std::span<const uint8_t> bytes, uint64_t file_size, const std::string& source) {
  const uint64_t data_start = preamble_size(bytes, file_size, source);
  if (bytes.size() < data_start) throw Error(source + ": truncated .npy file (the header is cut off)");
  const size_t start = bytes[6] == 1 ? 10 : 12;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + start), size_t(data_start - start));
  HeaderParser p(text, source);
  const auto dict = p.dict();
  auto field = [&](const char* key) -> const Value& {
    const auto it = dict.find(key);
    if (it == dict.end()) throw p.bad(std::string("no '") + key + "' key");
    return it->second;
  };
  const Value& descr = field("descr");
  const Value& fortran = field("fortran_order");
  const Value& shape = field("shape");
  if (descr.is_tuple) throw p.bad("'descr' is not a string (structured arrays are not supported)");
  if (!shape.is_tuple) throw p.bad("'shape' is not a tuple");
  if (fortran.text != "False" && fortran.text != "True") throw p.bad("'fortran_order' is not True or False");

  Header h;
  h.descr = descr.text;
  if (h.descr == "<f4" || h.descr == "=f4") h.item = 4;
  else if (h.descr == "<f8" || h.descr == "=f8") h.item = 8;
  else
    throw Error(source + ": .npy dtype " + safetensors::quote_key(h.descr) +
                " is not supported (little-endian float32 '<f4' or float64 '<f8')");
  if (fortran.text == "True")
    throw Error(source + ": .npy array is in Fortran (column-major) order; save it in C order "
                "(numpy.ascontiguousarray)");
  if (shape.tuple.size() != 2 && shape.tuple.size() != 3)
    throw Error(source + ": .npy array has " + std::to_string(shape.tuple.size()) +
                " dimensions, expected 2 ([T, I]) or 3 ([S, T, I])");
  h.shape = shape.tuple;
  h.data_offset = data_start;
  // The product is bounded by the bytes present before it is formed: no overflow, no huge allocation.
  const uint64_t have = file_size - data_start;
  const uint64_t fits = have / h.item;
  const bool empty = std::find(h.shape.begin(), h.shape.end(), 0) != h.shape.end();
  uint64_t count = 1;
  for (auto d : h.shape) {
    if (!empty && count > fits / uint64_t(d))
      throw Error(source + ": truncated .npy data (shape " + shape_text(h.shape) + " of " + h.descr +
                  " needs more than the " + std::to_string(have) + " bytes present)");
    count = empty ? 0 : count * uint64_t(d);
  }
  if (have != count * h.item)
    throw Error(source + ": .npy data holds " + std::to_string(have) + " bytes, shape " + shape_text(h.shape) +
                " needs " + std::to_string(count * h.item));
  h.count = count;
  return h;
}

Array parse(std::span<const uint8_t> bytes, const std::string& source) { return parse_values<double>(bytes, source); }
FloatArray parse_f32(std::span<const uint8_t> bytes, const std::string& source) {
  return parse_values<float>(bytes, source);
}
Array read_file(const std::string& path) { return read_values<double>(path); }
FloatArray read_file_f32(const std::string& path) { return read_values<float>(path); }

std::string header(std::span<const int64_t> shape, bool f64) {
  std::string dims;
  for (auto d : shape) {
    if (d < 0) throw Error("cannot write a .npy array of shape " + shape_text({shape.begin(), shape.end()}));
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  }
  if (shape.size() == 1) dims += ",";  // Python's one-element tuple
  std::string dict = std::string("{'descr': '") + (f64 ? "<f8" : "<f4") + "', 'fortran_order': False, 'shape': (" +
                     dims + "), }";
  // Byte for byte what numpy.save writes: room for the first dimension to grow to 21 digits, then
  // padding so that magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64 (at least
  // one space, as numpy's padding is 64 - remainder).
  if (!shape.empty()) dict.append(21 - std::min<size_t>(21, std::to_string(shape[0]).size()), ' ');
  dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) throw Error("cannot write a .npy header of " + std::to_string(dict.size()) + " bytes");
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(dict.size() & 0xff);
  out += char(dict.size() >> 8);
  return out + dict;
}

void write(util::AtomicFile& out, std::span<const int64_t> shape, std::span<const float> values) {
  write_values(out, shape, values);
}
void write(util::AtomicFile& out, std::span<const int64_t> shape, std::span<const double> values) {
  write_values(out, shape, values);
}

void write_file(const std::string& path, std::span<const int64_t> shape, std::span<const float> values) {
  util::AtomicFile out(path);
  write(out, shape, values);
  out.commit();
}
void write_file(const std::string& path, std::span<const int64_t> shape, std::span<const double> values) {
  util::AtomicFile out(path);
  write(out, shape, values);
  out.commit();
}

}  // namespace hotpath::npy
