// The safetensors format, validated field by field before anything is read. Deviations from the Rust
// reference implementation, all deliberate:
// - the data section may hold bytes after the last tensor, and gaps between tensors (the reference
//   refuses both); nothing outside a tensor's own range is ever read, so they are harmless. Overlapping
//   tensors are refused.
// - unknown fields inside a tensor entry are ignored, as serde does.
// - a key repeated inside any JSON object of the header is refused (serde would keep one silently).
// - dtypes outside the enum (F8_*, F4, ...) are refused as unknown.
#include "model/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/half.hpp"

namespace hotpath::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "the byte decoding below assumes a little-endian host");

using nlohmann::json;

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},     {DType::I8, "I8", 1},   {DType::U16, "U16", 2},
    {DType::I16, "I16", 2},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4},
    {DType::I32, "I32", 4},   {DType::F32, "F32", 4},   {DType::U64, "U64", 8}, {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},
};

const DTypeEntry* dtype_by_name(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return &e;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// A short excerpt of a JSON value for error messages. Hostile headers can be huge or nested a million
// levels deep, and dump() recurses, so only flat values are dumped.
std::string excerpt(const json& j) {
  auto flat = [](const json& v) { return !v.is_structured(); };
  std::string s;
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
  if (j.is_array() && (j.size() > 8 || !std::all_of(j.begin(), j.end(), flat)))
    return "an array of " + std::to_string(j.size()) + " elements";
  try {
    s = j.dump(-1, ' ', true, json::error_handler_t::replace);
  } catch (...) {
    s = "?";
  }
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// A JSON number that is an integer >= 0 (floats like 4.0 are refused, as serde refuses them for usize).
bool as_u64(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const auto v = j.get<int64_t>();
    if (v < 0) return false;
    out = uint64_t(v);
    return true;
  }
  return false;
}

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void store(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

// double -> float rounding to odd: the result keeps a sticky bit, so a second rounding to a narrower
// format (fp16, bf16: at least two bits shorter) is exactly round-to-nearest-even of the double. A
// plain double -> float -> fp16 would round twice and can land on the wrong side of a tie.
float to_float_round_to_odd(double d) {
  if (!std::isfinite(d)) return static_cast<float>(d);
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return f;
  if (std::isinf(f)) f = std::copysign(std::numeric_limits<float>::max(), f);  // beyond float: still beyond
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate
  uint32_t u = std::bit_cast<uint32_t>(f) | 1u;
  return std::bit_cast<float>(u);
}

// Integer conversion for the non-float dtypes of make_tensor: exact values only.
template <typename T>
T to_integer(double v, const std::string& name, DType dtype, size_t index) {
  if (!(v == std::floor(v)) || v < static_cast<double>(std::numeric_limits<T>::lowest()) ||
      v > static_cast<double>(std::numeric_limits<T>::max()) ||
      (sizeof(T) == 8 && v >= std::ldexp(1.0, std::numeric_limits<T>::digits)))
    throw Error("tensor " + quote_key(name) + ": value " + std::to_string(v) + " at index " + std::to_string(index) +
                " is not representable as " + dtype_name(dtype));
  return static_cast<T>(v);
}

}  // namespace

std::string quote_key(std::string_view key) {
  std::string s = "'";
  size_t n = 0;
  for (char c : key) {
    if (++n > 120) {
      s += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      s += buf;
    } else {
      s += c;
    }
  }
  return s + "'";
}


const char* dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.size;
  return 0;
}

bool is_float(DType d) { return d == DType::F64 || d == DType::F32 || d == DType::F16 || d == DType::BF16; }

uint64_t TensorInfo::element_count() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);  // validated at parse time not to overflow
  return n;
}

File File::open(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw Error(path + ": no such file");
  if (std::filesystem::is_directory(st)) throw Error(path + ": is a directory, not a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error(path + ": cannot determine the file size");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw Error(path + ": file of " + std::to_string(size) + " bytes does not fit in memory");
  }
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error(path + ": read failed after " + std::to_string(in.gcount()) + " of " + std::to_string(size) + " bytes");
  return parse(std::move(bytes), path);
}

File File::parse(std::vector<uint8_t> bytes, const std::string& source_name) {
  const std::string& src = source_name;
  auto fail = [&](const std::string& what) -> Error { return Error(src + ": " + what); };

  if (bytes.empty()) throw fail("file is empty (not a safetensors file)");
  if (bytes.size() < 8)
    throw fail("file is " + std::to_string(bytes.size()) +
               " bytes, shorter than the 8-byte header length of a safetensors file");
  const uint64_t n = read_le_u64(bytes.data());
  const uint64_t avail = bytes.size() - 8;
  if (n == 0) throw fail("header length is 0 (not a safetensors file)");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " bytes exceeds the limit of " +
               std::to_string(kMaxHeaderBytes) + " bytes (corrupt or not a safetensors file)");
  if (n > avail)
    throw fail("header length " + std::to_string(n) + " bytes runs past the end of the file (" +
               std::to_string(bytes.size()) + " bytes; truncated or not a safetensors file)");

  // Parse with a callback that records the first key repeated within one object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() && duplicate.empty() &&
            !open_objects.back().insert(parsed.get_ref<const std::string&>()).second)
          duplicate = parsed.get_ref<const std::string&>();
        break;
      default: break;
    }
    return true;
  };
  const char* hb = reinterpret_cast<const char*>(bytes.data() + 8);
  json header;
  try {
    header = json::parse(hb, hb + n, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    if (msg.size() > 200) msg = msg.substr(0, 197) + "...";
    for (char& c : msg)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    throw fail("header is not valid JSON: " + msg);
  } catch (const std::bad_alloc&) {
    throw fail("header JSON too large to parse");
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  if (!duplicate.empty()) throw fail("header repeats the key " + quote_key(duplicate));

  File f;
  f.source_ = src;
  const uint64_t data_size = avail - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not a JSON object (" + excerpt(v) + ")");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw fail("__metadata__ value of " + quote_key(m.key()) + " is not a string (" + excerpt(m.value()) + ")");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tname = "tensor " + quote_key(key);
    if (!v.is_object()) throw fail(tname + " entry is not a JSON object (" + excerpt(v) + ")");
    TensorInfo t;
    t.name = key;

    const auto dt = v.find("dtype");
    if (dt == v.end()) throw fail(tname + " has no dtype");
    if (!dt->is_string()) throw fail(tname + " dtype is not a string (" + excerpt(*dt) + ")");
    const DTypeEntry* de = dtype_by_name(dt->get_ref<const std::string&>());
    if (!de) throw fail(tname + " has unknown dtype " + quote_key(dt->get_ref<const std::string&>()));
    t.dtype = de->dtype;

    const auto sh = v.find("shape");
    if (sh == v.end()) throw fail(tname + " has no shape");
    if (!sh->is_array()) throw fail(tname + " shape is not an array (" + excerpt(*sh) + ")");
    uint64_t count = 1;
    bool count_overflow = false;
    for (const json& d : *sh) {
      uint64_t u;
      if (!as_u64(d, u) || u > uint64_t(std::numeric_limits<int64_t>::max()))
        throw fail(tname + " shape " + excerpt(*sh) + " holds " + excerpt(d) + ", not a non-negative integer");
      t.shape.push_back(int64_t(u));
      if (u != 0 && count > std::numeric_limits<uint64_t>::max() / u) count_overflow = true;
      else count *= u;
    }
    // A zero dimension makes the product 0 whatever overflowed before it.
    if (count_overflow && std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end())
      throw fail(tname + " shape " + shape_str(t.shape) + " has an element count that overflows 64 bits");
    if (count_overflow) count = 0;
    if (count > std::numeric_limits<uint64_t>::max() / de->size)
      throw fail(tname + " shape " + shape_str(t.shape) + " has a byte count that overflows 64 bits");
    const uint64_t nbytes = count * de->size;

    const auto off = v.find("data_offsets");
    if (off == v.end()) throw fail(tname + " has no data_offsets");
    if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], t.begin) || !as_u64((*off)[1], t.end))
      throw fail(tname + " data_offsets " + excerpt(*off) + " are not two non-negative integers");
    const std::string offs = "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.begin > t.end) throw fail(tname + " " + offs + " begin after they end");
    if (t.end - t.begin != nbytes)
      throw fail(tname + " " + offs + " span " + std::to_string(t.end - t.begin) + " bytes but " + de->name +
                 " shape " + shape_str(t.shape) + " needs " + std::to_string(nbytes));
    if (t.end > data_size)
      throw fail(tname + " " + offs + " run past the end of the data section (" + std::to_string(data_size) +
                 " bytes)");
    f.tensors_.push_back(std::move(t));
  }

  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  // Empty tensors occupy no bytes and cannot overlap anything.
  const TensorInfo* last = nullptr;
  for (const auto& t : f.tensors_) {
    if (t.begin == t.end) continue;
    if (last && last->end > t.begin)
      throw fail("tensors " + quote_key(last->name) + " [" + std::to_string(last->begin) + ", " +
                 std::to_string(last->end) + "] and " + quote_key(t.name) + " [" + std::to_string(t.begin) + ", " +
                 std::to_string(t.end) + "] overlap");
    last = &t;
  }

  f.bytes_ = std::move(bytes);
  f.data_start_ = size_t(8 + n);
  return f;
}

const TensorInfo* File::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& File::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw Error(source_ + ": no tensor named " + quote_key(name));
}

std::span<const uint8_t> File::raw(const TensorInfo& t) const {
  // Re-checked so that a TensorInfo from another File cannot read out of bounds.
  const uint64_t data_size = bytes_.size() - data_start_;
  if (t.begin > t.end || t.end > data_size)
    throw Error(source_ + ": tensor " + quote_key(t.name) + " does not belong to this file");
  return {bytes_.data() + data_start_ + t.begin, size_t(t.end - t.begin)};
}

std::vector<double> File::read_f64(const TensorInfo& t) const {
  const auto r = raw(t);
  const size_t size = dtype_size(t.dtype);
  const size_t n = size ? r.size() / size : 0;
  std::vector<double> out(n);
  const uint8_t* p = r.data();
  switch (t.dtype) {
    case DType::F64:
      for (size_t i = 0; i < n; ++i) out[i] = load<double>(p + 8 * i);
      break;
    case DType::F32:
      for (size_t i = 0; i < n; ++i) out[i] = load<float>(p + 4 * i);
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(load<uint16_t>(p + 2 * i));
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load<uint16_t>(p + 2 * i));
      break;
    default:
      throw Error(source_ + ": tensor " + quote_key(t.name) + " has dtype " + dtype_name(t.dtype) +
                  ", not a float dtype (F64, F32, F16, BF16)");
  }
  return out;
}

std::vector<float> File::read_f32(const TensorInfo& t) const {
  if (t.dtype == DType::F32) {
    const auto r = raw(t);
    std::vector<float> out(r.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), r.data(), r.size());
    return out;
  }
  const auto d = read_f64(t);
  std::vector<float> out(d.size());
  for (size_t i = 0; i < d.size(); ++i) out[i] = static_cast<float>(d[i]);
  return out;
}

OutTensor make_f32(std::string name, std::vector<int64_t> shape, std::span<const float> values) {
  OutTensor t{std::move(name), DType::F32, std::move(shape), {}};
  t.bytes.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

OutTensor make_f64(std::string name, std::vector<int64_t> shape, std::span<const double> values) {
  OutTensor t{std::move(name), DType::F64, std::move(shape), {}};
  t.bytes.resize(values.size() * 8);
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

OutTensor make_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const double> values) {
  OutTensor t{std::move(name), dtype, std::move(shape), {}};
  const size_t n = values.size();
  t.bytes.resize(n * dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    const double v = values[i];
    switch (dtype) {
      case DType::F64: store(t.bytes, i, v); break;
      case DType::F32: store(t.bytes, i, static_cast<float>(v)); break;
      case DType::F16: store(t.bytes, i, float_to_fp16(to_float_round_to_odd(v))); break;
      case DType::BF16: store(t.bytes, i, float_to_bf16(to_float_round_to_odd(v))); break;
      case DType::BOOL:
        if (v != 0.0 && v != 1.0)
          throw Error("tensor " + quote_key(t.name) + ": value " + std::to_string(v) + " at index " +
                      std::to_string(i) + " is not a BOOL (0 or 1)");
        store(t.bytes, i, uint8_t(v));
        break;
      case DType::U8: store(t.bytes, i, to_integer<uint8_t>(v, t.name, dtype, i)); break;
      case DType::I8: store(t.bytes, i, to_integer<int8_t>(v, t.name, dtype, i)); break;
      case DType::U16: store(t.bytes, i, to_integer<uint16_t>(v, t.name, dtype, i)); break;
      case DType::I16: store(t.bytes, i, to_integer<int16_t>(v, t.name, dtype, i)); break;
      case DType::U32: store(t.bytes, i, to_integer<uint32_t>(v, t.name, dtype, i)); break;
      case DType::I32: store(t.bytes, i, to_integer<int32_t>(v, t.name, dtype, i)); break;
      case DType::U64: store(t.bytes, i, to_integer<uint64_t>(v, t.name, dtype, i)); break;
      case DType::I64: store(t.bytes, i, to_integer<int64_t>(v, t.name, dtype, i)); break;
    }
  }
  return t;
}

std::vector<uint8_t> serialize(const std::vector<OutTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the given tensor order; the reference writes __metadata__ first.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throw Error("cannot write a tensor named '__metadata__'");
    if (!names.insert(t.name).second) throw Error("cannot write two tensors named " + quote_key(t.name));
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error("tensor " + quote_key(t.name) + " has a negative dimension in " + shape_str(t.shape));
      if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d))
        throw Error("tensor " + quote_key(t.name) + " shape " + shape_str(t.shape) + " overflows");
      count *= uint64_t(d);
    }
    if (count > std::numeric_limits<uint64_t>::max() / dtype_size(t.dtype) || count * dtype_size(t.dtype) != t.bytes.size())
      throw Error("tensor " + quote_key(t.name) + ": " + std::to_string(t.bytes.size()) + " bytes do not match " +
                  dtype_name(t.dtype) + " shape " + shape_str(t.shape));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h;
  try {
    h = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(std::string("cannot encode the safetensors header: ") + e.what());
  }
  h.append((8 - h.size() % 8) % 8, ' ');  // as the reference does: the data section starts 8-aligned
  std::vector<uint8_t> out(8 + h.size() + offset);
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  uint8_t* p = out.data() + 8 + h.size();
  for (const auto& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(p, t.bytes.data(), t.bytes.size());
    p += t.bytes.size();
  }
  return out;
}

void write_file(const std::string& path, const std::vector<OutTensor>& tensors,
                const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = serialize(tensors, metadata);
  const std::string tmp = path + ".tmp";
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) throw Error(path + ": cannot open '" + tmp + "' for writing (" + std::strerror(errno) + ")");
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), fp) == bytes.size();
  const int werr = errno;
  const bool closed = std::fclose(fp) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    throw Error(path + ": write failed (" + std::strerror(wrote ? errno : werr) + ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename '" + tmp + "' into place (" + ec.message() + ")");
  }
}

}  // namespace hotpath::safetensors
