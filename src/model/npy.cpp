#include "model/npy.hpp"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "model/safetensors.hpp"
#include "util/error.hpp"

namespace hotpath::npy {
namespace {

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

}  // namespace

Array parse(std::span<const uint8_t> bytes, const std::string& source) {
  static constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    throw Error(source + ": not a .npy file (no \\x93NUMPY magic at the start)");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    throw Error(source + ": .npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
                " is not supported (1.0, 2.0 and 3.0 are)");
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t start = 8 + size_t(len_bytes);
  if (bytes.size() < start) throw Error(source + ": truncated .npy file (the header length is cut off)");
  const uint64_t header_len = le(bytes.data() + 8, len_bytes);
  if (header_len > kMaxHeaderBytes)
    throw Error(source + ": .npy header of " + std::to_string(header_len) + " bytes is over the " +
                std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (header_len > bytes.size() - start)
    throw Error(source + ": truncated .npy file (header of " + std::to_string(header_len) + " bytes, " +
                std::to_string(bytes.size() - start) + " left)");
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + start), size_t(header_len));
  HeaderParser p(header, source);
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

  Array a;
  a.descr = descr.text;
  size_t item = 0;
  if (a.descr == "<f4" || a.descr == "=f4") item = 4;
  else if (a.descr == "<f8" || a.descr == "=f8") item = 8;
  else
    throw Error(source + ": .npy dtype " + safetensors::quote_key(a.descr) +
                " is not supported (little-endian float32 '<f4' or float64 '<f8')");
  if (fortran.text == "True")
    throw Error(source + ": .npy array is in Fortran (column-major) order; save it in C order "
                "(numpy.ascontiguousarray)");
  if (shape.tuple.size() != 2)
    throw Error(source + ": .npy array has " + std::to_string(shape.tuple.size()) + " dimensions, expected 2 ([T, I])");
  a.shape = shape.tuple;
  const uint64_t rows = uint64_t(a.shape[0]), cols = uint64_t(a.shape[1]);
  const uint64_t data_start = start + header_len;
  const uint64_t have = bytes.size() - data_start;
  if (cols != 0 && rows > have / cols / item)
    throw Error(source + ": truncated .npy data (shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] of " + a.descr + " needs more than the " + std::to_string(have) + " bytes present)");
  const size_t n = size_t(rows * cols);
  if (have != n * item)
    throw Error(source + ": .npy data holds " + std::to_string(have) + " bytes, shape [" + std::to_string(rows) +
                ", " + std::to_string(cols) + "] needs " + std::to_string(n * item));
  a.values.resize(n);
  const uint8_t* d = bytes.data() + data_start;
  for (size_t k = 0; k < n; ++k) {
    if (item == 4) {
      float f;
      std::memcpy(&f, d + 4 * k, 4);
      a.values[k] = f;
    } else {
      std::memcpy(&a.values[k], d + 8 * k, 8);
    }
  }
  return a;
}

Array read_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw Error(path + ": no such file");
  if (std::filesystem::is_directory(st)) throw Error(path + ": is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(path + ": read failed");
  return parse(bytes, path);
}

}  // namespace hotpath::npy
