// From a safetensors state_dict (README.md, "From PyTorch") to a Model, and back.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "model/safetensors.hpp"

namespace hotpath {

struct LoadOptions {
  std::string lstm_prefix;  // empty: detect from the `weight_ih_l0` suffix
  std::string head_prefix;  // empty: detect the single remaining 2-D weight [O, H]
  // Tensors of the file that the model deliberately leaves unused: each a tensor name, or a prefix
  // ending in '.' (a submodule, e.g. "aux."). Every other tensor must be used: a file holding one
  // that is not (a second Linear layer, a GRU, ...) is refused naming it, since dropping it would give
  // wrong answers without a word. An entry matching no tensor, or one the model uses, is refused too.
  std::vector<std::string> ignore;
};

// "a,b,c" as {"a", "b", "c"} (the CLI's --ignore-tensors and the C ABI's ignore_tensors); throws for
// an empty item.
std::vector<std::string> split_ignore_list(const std::string& list, const std::string& what);

// An integer of a file's __metadata__ (whose values are strings): the one parser for the integer
// fields of model and golden files. Decimal digits only (no sign, space, point or suffix), within
// lo..hi. nullopt when the key is absent; otherwise throws naming the file, the key and the range.
std::optional<int> metadata_int(const safetensors::File& file, const std::string& key, int lo, int hi);

// Validates everything; throws hotpath::Error naming the problem. Unsupported variants (proj_size via
// a `weight_hr_l{k}` key, bidirectional via `_reverse` keys) are recognised before any other check, a
// GRU or plain RNN by its weight_hh_l0 shape ([3H, H], [H, H]). A file that is not safetensors but a
// PyTorch pickle or an ONNX model is named as such (load_model_file, safetensors::File).
Model model_from_safetensors(const safetensors::File& file, const LoadOptions& options = {});
Model load_model_file(const std::string& path, const LoadOptions& options = {});
// A path to a file, else a zoo name (zoo.hpp); throws naming both possibilities when neither.
Model resolve_model(const std::string& path_or_zoo_name, const LoadOptions& options = {});

// A PyTorch-style state_dict: `<lstm_prefix>weight_ih_l0` ..., `<head_prefix>weight`, with the config
// and window in __metadata__ (keys input_size hidden_size num_layers output_size bias window
// lstm_prefix head_prefix, as strings). Prefixes default to "lstm." and "fc." (an empty prefix means
// the default). Values are rounded to `dtype` to nearest even.
std::map<std::string, std::string> model_metadata(const Model& model, const std::string& lstm_prefix = "lstm.",
                                                  const std::string& head_prefix = "fc.");
std::vector<safetensors::OutTensor> model_tensors(const Model& model, DType dtype, const std::string& lstm_prefix,
                                                  const std::string& head_prefix);
void save_model_file(const Model& model, const std::string& path, DType dtype = DType::F32,
                     const std::string& lstm_prefix = "lstm.", const std::string& head_prefix = "fc.");

}  // namespace hotpath
