#include "cli/run_io.hpp"

#include <algorithm>
#include <cctype>

#include "model/narrowing.hpp"
#include "model/npy.hpp"
#include "model/safetensors.hpp"
#include "util/error.hpp"

namespace hotpath::cli {

namespace st = hotpath::safetensors;

const st::TensorInfo& float_tensor(const st::File& file, const std::string& key) {
  const st::TensorInfo* t = file.find(key);
  if (!t) {
    std::string have;
    for (const auto& x : file.tensors()) have += (have.empty() ? "" : ", ") + st::quote_key(x.name);
    throw Error(file.source() + ": no tensor " + st::quote_key(key) + " (tensors: " + (have.empty() ? "none" : have) +
                "); name it with --inputs-key");
  }
  if (!st::is_float(t->dtype))
    throw Error(file.source() + ": tensor " + st::quote_key(key) + " has dtype " + st::dtype_name(t->dtype) +
                ", expected a float tensor (F64, F32, F16 or BF16)");
  return *t;
}

FileFormat file_format(const std::string& path, const std::string& flag) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  auto ends_with = [&](const std::string& suffix) {
    return lower.size() > suffix.size() && lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".npy")) return FileFormat::npy;
  if (ends_with(".safetensors")) return FileFormat::safetensors;
  throw Error(flag + " '" + path + "': expected a .npy or .safetensors file (the format follows the extension)");
}

Series read_series(const std::string& path, const std::string& key, int input_size) {
  std::vector<int64_t> shape;
  Series s;
  std::string what;  // how the message names the array
  if (file_format(path, "--inputs") == FileFormat::npy) {
    npy::FloatArray a = npy::read_file_f32(path);  // 2-D or 3-D, float, C order: checked by the reader
    shape = std::move(a.shape);
    s.values = std::move(a.values);
    what = path + ": array of shape ";
  } else {
    const st::File file = st::File::open(path);
    const st::TensorInfo* t = &float_tensor(file, key);
    what = path + ": tensor " + st::quote_key(key) + " of shape ";
    if (t->shape.size() != 2 && t->shape.size() != 3)
      throw Error(what + shape_text(t->shape) + " has " + std::to_string(t->shape.size()) +
                  " dimensions: the model takes [T, " + std::to_string(input_size) + "] or [S, T, " +
                  std::to_string(input_size) + "]");
    shape = t->shape;
    s.values = file.read_f32(*t);  // F64 rounded, a value past float32's range refused by element
  }
  s.batched = shape.size() == 3;
  if (shape.back() != input_size)
    throw Error(what + shape_text(shape) + ": the model takes " + std::to_string(input_size) +
                " inputs per tick ([T, " + std::to_string(input_size) + "] or [S, T, " + std::to_string(input_size) +
                "])");
  s.series = s.batched ? size_t(shape[0]) : 1;
  s.ticks = size_t(shape[shape.size() - 2]);
  s.inputs = size_t(input_size);
  if (s.series == 0) throw Error(what + shape_text(shape) + " holds no series: nothing to run");
  if (s.ticks == 0) throw Error(what + shape_text(shape) + " holds no ticks: nothing to run");
  return s;
}

template <class T>
void write_outputs(util::AtomicFile& out, FileFormat format, std::span<const int64_t> shape, std::span<const T> values,
                   const std::map<std::string, std::string>& metadata) {
  if (format == FileFormat::npy) {
    npy::write(out, shape, values);
    return;
  }
  const st::TensorView t{"outputs", sizeof(T) == 8 ? st::DType::F64 : st::DType::F32, {shape.begin(), shape.end()},
                         {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)}};
  st::write(out, std::span<const st::TensorView>(&t, 1), metadata);
}

template void write_outputs<float>(util::AtomicFile&, FileFormat, std::span<const int64_t>, std::span<const float>,
                                   const std::map<std::string, std::string>&);
template void write_outputs<double>(util::AtomicFile&, FileFormat, std::span<const int64_t>, std::span<const double>,
                                    const std::map<std::string, std::string>&);

}  // namespace hotpath::cli
