// The PyTorch golden cases of tests/data/golden, shared by every backend's tests.
#pragma once
#include <string>
#include <vector>

#include "model/loader.hpp"
#include "model/safetensors.hpp"

namespace hotpath::test_support {

struct Golden {
  Model model;
  std::vector<float> inputs;  // [ticks, I]
  size_t ticks = 0;
  int window = 0;                          // from the golden file's metadata
  std::vector<double> window_expected;     // [ticks - window + 1, O], from t = window - 1
  std::vector<double> streaming_expected;  // [ticks, O]
};

inline Golden load_golden(const std::string& name) {
  const std::string dir = HOTPATH_GOLDEN_DIR;
  Golden g;
  g.model = load_model_file(dir + "/" + name + ".model.safetensors");
  const auto f = safetensors::File::open(dir + "/" + name + ".golden.safetensors");
  const auto& in = f.at("inputs");
  g.ticks = size_t(in.shape[0]);
  g.inputs = f.read_f32(in);
  g.window = metadata_int(f, "window", 1, kMaxWindow).value();
  g.window_expected = f.read_f64(f.at("tacana_expected"));
  g.streaming_expected = f.read_f64(f.at("streaming_expected"));
  return g;
}

// Golden case `name`'s model tensors (as float32) plus a second Linear "fc2." after its head "fc.": an MLP
// head hotpath does not compute, which loading must refuse rather than drop in silence.
inline std::vector<safetensors::OutTensor> golden_with_mlp_head(const std::string& name) {
  namespace st = safetensors;
  const st::File f = st::File::open(std::string(HOTPATH_GOLDEN_DIR) + "/" + name + ".model.safetensors");
  std::vector<st::OutTensor> tensors;
  for (const auto& t : f.tensors()) tensors.push_back(st::make_tensor(t.name, st::DType::F32, t.shape, f.read_f64(t)));
  const int64_t O = f.at("fc.weight").shape[0];
  tensors.push_back(st::make_tensor("fc2.weight", st::DType::F32, {1, O}, std::vector<double>(size_t(O), 0.5)));
  tensors.push_back(st::make_tensor("fc2.bias", st::DType::F32, {1}, std::vector<double>{0.25}));
  return tensors;
}

}  // namespace hotpath::test_support
