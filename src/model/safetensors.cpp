// The safetensors format, validated field by field before anything is read. Deviations from the Rust
// reference implementation, all deliberate:
// - the data section may hold bytes after the last tensor, and gaps between tensors (the reference
//   refuses both); nothing outside a tensor's own range is ever read, so they are harmless. Overlapping
//   tensors are refused.
// - unknown fields inside a tensor entry are ignored, as serde does.
// - a key repeated inside any JSON object of the header is refused (serde would keep one silently).
// - the header's JSON nests at most 3 levels, and holds at most kMaxTensors entries, arrays of at most
//   kMaxArrayElements and objects of at most kMaxObjectMembers keys (safetensors.hpp says why).
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
#include <functional>
#include <limits>
#include <set>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "model/narrowing.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/regular_file.hpp"
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

std::string foreign_format(std::span<const uint8_t> b) {
  const auto at = [&](size_t i) { return i < b.size() ? int(b[i]) : -1; };
  if (at(0) == 'P' && at(1) == 'K' && at(2) == 3 && at(3) == 4)
    return "is a PyTorch pickle (a torch.save zip archive), not safetensors: save the state_dict with "
           "safetensors.torch.save_file";
  if (at(0) == 0x80 && at(1) >= 2 && at(1) <= 5)  // PROTO opcode: torch.save's legacy format, or pickle.dump
    return "is a PyTorch pickle (torch.save's legacy format), not safetensors: save the state_dict with "
           "safetensors.torch.save_file";
  // ONNX's ModelProto opens with field 1 (ir_version, a small varint), then another of its fields.
  static constexpr int kModelProtoTags[] = {0x12, 0x1a, 0x22, 0x28, 0x32, 0x3a, 0x42, 0x72};
  if (at(0) == 0x08 && at(1) >= 1 && at(1) < 0x80 &&
      std::find(std::begin(kModelProtoTags), std::end(kModelProtoTags), at(2)) != std::end(kModelProtoTags))
    return kOnnxNotSafetensors;
  if (b.size() >= 6 && std::memcmp(b.data(), "\x93NUMPY", 6) == 0)
    return "is a NumPy .npy file, not safetensors";
  return {};
}

namespace {

// The checks on the 8-byte header length, from the file's size alone: File::open makes them before it
// reads more than those 8 bytes. `first` holds min(8, file_size) bytes.
uint64_t checked_header_length(const uint8_t* first, uint64_t file_size, const std::string& src) {
  const std::string foreign = foreign_format({first, size_t(std::min<uint64_t>(file_size, 8))});
  auto fail = [&](const std::string& what) -> Error { return Error(src + ": " + (foreign.empty() ? what : foreign)); };
  if (file_size == 0) throw fail("file is empty (not a safetensors file)");
  if (file_size < 8)
    throw fail("file is " + std::to_string(file_size) +
               " bytes, shorter than the 8-byte header length of a safetensors file");
  const uint64_t n = read_le_u64(first);
  if (n == 0) throw fail("header length is 0 (not a safetensors file)");
  if (n > kMaxHeaderBytes)
    throw fail("header length " + std::to_string(n) + " bytes exceeds the limit of " +
               std::to_string(kMaxHeaderBytes) + " bytes (corrupt or not a safetensors file)");
  if (n > file_size - 8)
    throw fail("header length " + std::to_string(n) + " bytes runs past the end of the file (" +
               std::to_string(file_size) + " bytes; truncated or not a safetensors file)");
  return n;
}

// A byte for an error message: 'c' when printable ASCII, else its hex code.
std::string byte_str(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", u);
  return buf;
}

// One tensor entry of the header, validated against the data section's size.
TensorInfo read_entry(const std::string& key, const json& v, uint64_t data_size,
                      const std::function<Error(const std::string&)>& fail) {
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
  return t;
}

// SAX handler for the header: builds a small JSON tree of one top-level entry at a time, turns it into
// a TensorInfo (or the metadata) as soon as the entry ends, and enforces the limits of safetensors.hpp
// as it goes. nlohmann's parser keeps its own nesting state in a bit vector, so the first value
// nested too deeply stops the parse. (nlohmann's callback parser, used before, rescans the parent
// object each time a child ends: quadratic in the number of entries.)
class HeaderReader final : public nlohmann::json_sax<json> {
 public:
  HeaderReader(uint64_t data_size, std::function<Error(const std::string&)> fail)
      : data_size_(data_size), fail_(std::move(fail)) {}

  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override { return value(json(std::move(v))); }
  bool binary(binary_t&) override { return value(json(nullptr)); }  // never produced by the JSON lexer
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    if (depth_ == 1) {
      if (++entries_ > kMaxTensors)
        throw fail_("header holds more than " + std::to_string(kMaxTensors) + " entries (the limit of tensors per file)");
      if (!names_.insert(k).second) throw fail_("header repeats the key " + quote_key(k));
      entry_name_ = std::move(k);
      return true;
    }
    const json& obj = *open_.back();
    if (obj.contains(k)) throw fail_("header repeats the key " + quote_key(k));
    if (obj.size() >= kMaxObjectMembers)
      throw fail_(where() + " holds more than " + std::to_string(kMaxObjectMembers) + " keys");
    pending_key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string msg = e.what();
    if (msg.size() > 200) msg = msg.substr(0, 197) + "...";
    for (char& c : msg)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    throw fail_("header is not valid JSON: " + msg);
  }

 private:
  std::string where() const {
    return entry_name_ == "__metadata__" ? std::string("__metadata__") : "tensor " + quote_key(entry_name_);
  }

  // Puts a value where the parse stands: into the open array, or under the pending key.
  json* place(json v) {
    json& parent = *open_.back();
    if (parent.is_array()) {
      if (parent.size() >= kMaxArrayElements)
        throw fail_(where() + " holds an array of more than " + std::to_string(kMaxArrayElements) + " elements");
      parent.push_back(std::move(v));
      return &parent.back();
    }
    return &(parent[pending_key_] = std::move(v));
  }

  bool value(json v) {
    if (depth_ == 0) throw fail_("header is not a JSON object");
    if (depth_ == 1) {
      entry_ = std::move(v);
      finish_entry();
    } else {
      place(std::move(v));
    }
    return true;
  }

  bool open(json container) {
    if (depth_ == 0) {
      if (!container.is_object()) throw fail_("header is not a JSON object");
    } else if (depth_ >= kMaxHeaderDepth) {
      throw fail_(where() + " nests JSON deeper than the " + std::to_string(kMaxHeaderDepth) +
                  " levels the format needs (header, tensor entry, shape)");
    } else if (depth_ == 1) {
      entry_ = std::move(container);
      open_.push_back(&entry_);
    } else {
      open_.push_back(place(std::move(container)));  // stays valid: its parent does not change meanwhile
    }
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (depth_ >= 1) open_.pop_back();
    if (depth_ == 1) finish_entry();
    return true;
  }

  void finish_entry() {
    if (entry_name_ == "__metadata__") {
      if (!entry_.is_object()) throw fail_("__metadata__ is not a JSON object (" + excerpt(entry_) + ")");
      for (auto m = entry_.begin(); m != entry_.end(); ++m) {
        if (!m.value().is_string())
          throw fail_("__metadata__ value of " + quote_key(m.key()) + " is not a string (" + excerpt(m.value()) + ")");
        metadata[m.key()] = std::move(m.value().get_ref<std::string&>());
      }
    } else {
      tensors.push_back(read_entry(entry_name_, entry_, data_size_, fail_));
    }
    entry_ = json();
  }

  const uint64_t data_size_;
  const std::function<Error(const std::string&)> fail_;
  int depth_ = 0;                // containers open, the header object included
  std::vector<json*> open_;      // the open containers below the header object
  size_t entries_ = 0;
  std::unordered_set<std::string> names_;  // top-level keys so far
  std::string entry_name_, pending_key_;
  json entry_;
};

}  // namespace

File File::open(const std::string& path) {
  util::require_regular_file(path, "a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error(path + ": cannot determine the file size");
  in.seekg(0, std::ios::beg);
  // The header length first: a file whose header claims more than the file holds (or than the
  // limit) is refused before the rest of it is read.
  uint8_t first[8] = {};
  const std::streamsize head = std::min<std::streamoff>(size, 8);
  if (head > 0 && !in.read(reinterpret_cast<char*>(first), head))
    throw Error(path + ": read failed after " + std::to_string(in.gcount()) + " of " + std::to_string(head) + " bytes");
  checked_header_length(first, uint64_t(size), path);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw Error(path + ": file of " + std::to_string(size) + " bytes does not fit in memory");
  }
  std::memcpy(bytes.data(), first, 8);
  if (!in.read(reinterpret_cast<char*>(bytes.data()) + 8, size - 8))
    throw Error(path + ": read failed after " + std::to_string(8 + in.gcount()) + " of " + std::to_string(size) +
                " bytes");
  return parse(std::move(bytes), path);
}

File File::parse(std::vector<uint8_t> bytes, const std::string& source_name) {
  const std::string& src = source_name;
  auto fail = [&](const std::string& what) -> Error { return Error(src + ": " + what); };

  const uint64_t n = checked_header_length(bytes.data(), bytes.size(), src);
  const uint64_t avail = bytes.size() - 8;
  const char* hb = reinterpret_cast<const char*>(bytes.data() + 8);
  const std::string_view header(hb, size_t(n));

  // The format: '{' first, only spaces after the closing '}'. nlohmann would skip a UTF-8 BOM, and
  // its lexer takes a NUL byte for the end of input, so both are refused here.
  if (header.substr(0, 3) == "\xef\xbb\xbf")
    throw fail("header starts with a UTF-8 byte order mark; the format wants '{' as its first byte");
  if (const std::string foreign = foreign_format({bytes.data(), 8}); header[0] != '{' && !foreign.empty())
    throw fail(foreign);
  if (header[0] != '{')
    throw fail("header is not a JSON object: its first byte is " + byte_str(header[0]) + ", the format wants '{'");
  if (const size_t nul = header.find('\0'); nul != std::string_view::npos)
    throw fail("header holds a NUL byte at offset " + std::to_string(nul) +
               " (JSON has none; only spaces may follow the header's JSON object)");

  HeaderReader reader(avail - n, fail);
  try {
    json::sax_parse(hb, hb + n, &reader, json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    throw fail("header JSON too large to parse");
  }
  // The parse accepted JSON whitespace after the object; the format allows spaces only.
  const size_t last = header.find_last_not_of(' ');
  if (header[last] != '}')
    throw fail("header has " + byte_str(header[last]) + " after its JSON object; the format allows only spaces there");

  File f;
  f.source_ = src;
  f.tensors_ = std::move(reader.tensors);
  f.metadata_ = std::move(reader.metadata);
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  // Empty tensors occupy no bytes and cannot overlap anything.
  const TensorInfo* last_tensor = nullptr;
  for (const auto& t : f.tensors_) {
    if (t.begin == t.end) continue;
    if (last_tensor && last_tensor->end > t.begin)
      throw fail("tensors " + quote_key(last_tensor->name) + " [" + std::to_string(last_tensor->begin) + ", " +
                 std::to_string(last_tensor->end) + "] and " + quote_key(t.name) + " [" + std::to_string(t.begin) +
                 ", " + std::to_string(t.end) + "] overlap");
    last_tensor = &t;
  }
  f.by_name_.resize(f.tensors_.size());
  for (size_t i = 0; i < f.by_name_.size(); ++i) f.by_name_[i] = uint32_t(i);
  std::sort(f.by_name_.begin(), f.by_name_.end(),
            [&](uint32_t a, uint32_t b) { return f.tensors_[a].name < f.tensors_[b].name; });

  f.bytes_ = std::move(bytes);
  f.data_start_ = size_t(8 + n);
  return f;
}

const TensorInfo* File::find(std::string_view name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  return it != by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
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
  if (t.dtype == DType::F64) {  // straight from the bytes, no float64 copy beside the floats
    const auto r = raw(t);
    std::vector<float> out(r.size() / 8);
    narrow_f64_to_f32(r.data(), out.size(), out.data(), 0, t.shape, source_ + ": tensor " + quote_key(t.name) + " element");
    return out;
  }
  const auto d = read_f64(t);  // F16/BF16: exact in float32
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

namespace {
std::vector<TensorView> views(const std::vector<OutTensor>& tensors) {
  std::vector<TensorView> v;
  v.reserve(tensors.size());
  for (const auto& t : tensors) v.push_back({t.name, t.dtype, t.shape, t.bytes});
  return v;
}
}  // namespace

std::vector<uint8_t> serialize_header(std::span<const TensorView> tensors,
                                      const std::map<std::string, std::string>& metadata) {
  // The header is written entry by entry in the given tensor order, __metadata__ first as the
  // reference does (a whole ordered_json object would look each key up linearly: quadratic).
  std::string h = "{";
  auto dump = [](const nlohmann::ordered_json& j) {
    try {
      return j.dump();
    } catch (const nlohmann::ordered_json::exception& e) {
      throw Error(std::string("cannot encode the safetensors header: ") + e.what());
    }
  };
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h += "\"__metadata__\":" + dump(m);
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
    const nlohmann::ordered_json entry = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    h += (h.size() > 1 ? "," : "") + dump(t.name) + ":" + dump(entry);
    offset += t.bytes.size();
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // as the reference does: the data section starts 8-aligned
  std::vector<uint8_t> out(8 + h.size());
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  return out;
}

std::vector<uint8_t> serialize(const std::vector<OutTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> out = serialize_header(views(tensors), metadata);
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write(util::AtomicFile& out, std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> header = serialize_header(tensors, metadata);
  out.write(header.data(), header.size());
  for (const auto& t : tensors) out.write(t.bytes.data(), t.bytes.size());
}

void write_file(const std::string& path, std::span<const TensorView> tensors,
                const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> header = serialize_header(tensors, metadata);  // refused before a file is made
  util::AtomicFile out(path);
  out.write(header.data(), header.size());
  for (const auto& t : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

void write_file(const std::string& path, const std::vector<OutTensor>& tensors,
                const std::map<std::string, std::string>& metadata) {
  write_file(path, views(tensors), metadata);
}

}  // namespace hotpath::safetensors
