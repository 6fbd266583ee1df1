// A safetensors reader and writer written against the public format: 8-byte little-endian header
// length N, N bytes of JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the raw little-endian tensor bytes. Everything is validated before use; a
// corrupt, truncated or hostile file is refused with a hotpath::Error naming the problem, never read
// out of bounds.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::util {
class AtomicFile;
}

namespace hotpath::safetensors {

enum class DType { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };
const char* dtype_name(DType d);
size_t dtype_size(DType d);
bool is_float(DType d);  // F64, F32, F16, BF16

inline constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // larger is refused
// Limits on the header's JSON, checked while it is parsed (a SAX parse, no document tree of the whole
// header), so that a hostile header is refused in time linear in its length and in memory a small
// multiple of it. The format needs three levels (the header object, a tensor entry or __metadata__,
// a shape or data_offsets array); a checkpoint shard holds a few thousand tensors at most; PyTorch
// tensors have at most 64 dimensions; __metadata__ carries a handful of strings.
inline constexpr int kMaxHeaderDepth = 3;
inline constexpr size_t kMaxTensors = 100000;       // entries of the header object
inline constexpr size_t kMaxArrayElements = 64;     // elements of any array (shape, data_offsets)
inline constexpr size_t kMaxObjectMembers = 1024;   // keys of __metadata__ or of one tensor entry

// What a file that is not safetensors is instead, from its first bytes (at most 8 are looked at):
// a PyTorch pickle (torch.save: a zip archive, or a bare pickle), an ONNX model, a NumPy .npy. The text
// follows "<path>: " in an error; empty when the bytes are none of these. Only consulted once the
// bytes have failed as safetensors, so a valid file is never misnamed.
std::string foreign_format(std::span<const uint8_t> first);
inline constexpr const char* kOnnxNotSafetensors =
    "is an ONNX model, not safetensors: ONNX models are imported with hotpath.load(\"model.onnx\") in Python";

// A tensor name or string from a file, quoted for an error message: control characters are escaped
// and long names cut, so that a hostile file cannot break the one-line error rule.
std::string quote_key(std::string_view key);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
  uint64_t element_count() const;
};

class File {
 public:
  // Reads and validates a whole file. `path` is used in error messages. The header length is checked
  // against the file's size before the rest of the file is read.
  static File open(const std::string& path);
  // The same from bytes in memory (what open() does once it has read them).
  static File parse(std::vector<uint8_t> bytes, const std::string& source_name);

  const std::string& source() const { return source_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order of offsets
  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent; O(log n)
  const TensorInfo& at(std::string_view name) const;                   // throws naming the tensor
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::span<const uint8_t> raw(const TensorInfo& t) const;
  // Float tensors converted exactly to double / to float (F64 -> float rounds; a finite F64 value past
  // float's range throws naming its element: model/narrowing.hpp). Throws for non-float.
  std::vector<double> read_f64(const TensorInfo& t) const;
  std::vector<float> read_f32(const TensorInfo& t) const;

 private:
  std::string source_;
  std::vector<uint8_t> bytes_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<uint32_t> by_name_;  // indices into tensors_, sorted by name: find() must not scan
  std::map<std::string, std::string> metadata_;
};

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, size = product(shape) * dtype_size
};
OutTensor make_f32(std::string name, std::vector<int64_t> shape, std::span<const float> values);
OutTensor make_f64(std::string name, std::vector<int64_t> shape, std::span<const double> values);
// Converts from double, rounding to nearest even.
OutTensor make_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const double> values);

// A tensor to write whose bytes the caller keeps (no copy of them is made).
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // little-endian, size = product(shape) * dtype_size
};

std::vector<uint8_t> serialize(const std::vector<OutTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);
// The bytes before the data section (length and JSON header) of a file holding `tensors` in this order;
// their bytes follow, concatenated. Throws hotpath::Error for a tensor whose bytes do not fit its shape.
std::vector<uint8_t> serialize_header(std::span<const TensorView> tensors,
                                      const std::map<std::string, std::string>& metadata);
// Header and tensors into `out` (not committed: the caller commits when everything is written).
void write(util::AtomicFile& out, std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata);
// A whole file, atomically (util/atomic_file.hpp: a temporary file beside it, renamed over it when
// complete, removed on failure); throws hotpath::Error naming the path.
void write_file(const std::string& path, const std::vector<OutTensor>& tensors,
                const std::map<std::string, std::string>& metadata);
void write_file(const std::string& path, std::span<const TensorView> tensors,
                const std::map<std::string, std::string>& metadata);

}  // namespace hotpath::safetensors
