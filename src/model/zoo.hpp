// The built-in model zoo (docs/model.md, "The built-in model zoo"): fixed shapes, random weights drawn
// from a seed like PyTorch's default initialisation (uniform in ±1/sqrt(H) for the LSTM and the head).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace hotpath {

struct ZooEntry {
  std::string name;
  ModelConfig config;  // window included
  // Keras-style models (one bias per layer): bias_hh is present but zero, as PyTorch holds such a model
  // after conversion (the audited benchmark's models, stac_*).
  bool keras_bias = false;
};

const std::vector<ZooEntry>& zoo();
const ZooEntry* find_zoo(const std::string& name);
// nullopt for an unknown name.
std::optional<Model> zoo_model(const std::string& name, uint64_t seed = 0);

}  // namespace hotpath
