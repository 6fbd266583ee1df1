// The files of `hotpath run`: the recorded series it reads (.npy or a .safetensors tensor; [T, I] or
// [S, T, I]) and the outputs it writes (.npy or .safetensors), each format chosen by the file's extension.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/safetensors.hpp"
#include "util/atomic_file.hpp"

namespace hotpath::cli {

enum class FileFormat { npy, safetensors };
// The format `path` names by its extension (.npy or .safetensors, any case); throws hotpath::Error
// naming `flag`, the path and the accepted extensions.
FileFormat file_format(const std::string& path, const std::string& flag);

// Tensor `key` of a safetensors file, which must be a float tensor; throws hotpath::Error naming the file
// and the tensors it holds when there is none of that name, or the dtype when it is not a float.
const safetensors::TensorInfo& float_tensor(const safetensors::File& file, const std::string& key);

// S series of T ticks of I inputs, as the engine takes them (float32, row-major [S, T, I]).
struct Series {
  size_t series = 1, ticks = 0, inputs = 0;
  bool batched = false;  // the file held [S, T, I] (the outputs are then [S, T, O], else [T, O])
  std::vector<float> values;
};
// Reads `path` (a .npy, or tensor `key` of a .safetensors) for a model of `input_size` inputs: 2-D or 3-D,
// float, the last dimension I, at least one series and one tick. float64 is rounded to float32 (what the
// engine computes in); a finite value beyond float32's range is refused, naming its element. Throws
// hotpath::Error naming the file and the problem.
Series read_series(const std::string& path, const std::string& key, int input_size);

// The outputs [T, O] or [S, T, O] into `out` (not committed): a .npy array, or tensor `outputs` of a
// .safetensors file with `metadata`.
template <class T>
void write_outputs(util::AtomicFile& out, FileFormat format, std::span<const int64_t> shape, std::span<const T> values,
                   const std::map<std::string, std::string>& metadata);

}  // namespace hotpath::cli
