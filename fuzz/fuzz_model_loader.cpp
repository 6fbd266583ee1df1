// libFuzzer target: the model loader on arbitrary bytes, through the same path a model file
// takes (File::parse, then model_from_safetensors; load_model_file differs only in reading the file).
// A refusal (hotpath::Error) is the expected answer to bad input. A model that loads must be valid,
// within the limits, and survive a round trip through the writer unchanged; anything else traps.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/loader.hpp"
#include "model/safetensors.hpp"
#include "util/error.hpp"

namespace st = hotpath::safetensors;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void check(const hotpath::Model& m) {
  m.validate();  // throws (uncaught below: a bug) if the loader returned an inconsistent model
  const auto& c = m.config;
  require(c.num_layers >= 1 && c.num_layers <= hotpath::kMaxNumLayers);
  require(!c.window || (*c.window >= 1 && *c.window <= hotpath::kMaxWindow));
  // Written as float64 (every accepted dtype converts exactly) and read back: the same model.
  const auto bytes = st::serialize(hotpath::model_tensors(m, hotpath::DType::F64, m.lstm_prefix, m.head_prefix),
                                   hotpath::model_metadata(m, m.lstm_prefix, m.head_prefix));
  const hotpath::Model back = hotpath::model_from_safetensors(st::File::parse(bytes, "round trip"));
  require(back.config == c && back.head_w == m.head_w && back.head_b == m.head_b &&
          back.layers.size() == m.layers.size());
  for (size_t k = 0; k < m.layers.size(); ++k)
    require(back.layers[k].w_ih == m.layers[k].w_ih && back.layers[k].w_hh == m.layers[k].w_hh &&
            back.layers[k].b_ih == m.layers[k].b_ih && back.layers[k].b_hh == m.layers[k].b_hh);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hotpath::Model m;
  try {
    m = hotpath::model_from_safetensors(st::File::parse(std::vector<uint8_t>(data, data + size), "fuzz"));
  } catch (const hotpath::Error&) {
    return 0;  // bad input, refused: expected
  }
  check(m);
  return 0;
}
