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

}  // namespace hotpath::test_support
