// The model (docs/model.md, "The model"): a stacked unidirectional LSTM (PyTorch nn.LSTM semantics, gate
// order i, f, g, o) followed by a linear head. Weights are held in float64, exactly as decoded from the
// file (every accepted dtype converts to float64 without rounding); each backend converts to its own
// precision.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace hotpath {

// Where a tensor's values came from; the storage here is always float64.
enum class DType { F64, F32, F16, BF16 };
const char* dtype_name(DType d);

// Limits of what hotpath runs, checked by Model::validate (so for files, the zoo and tests alike) and by
// the loader before any weight is read. num_layers: the cuda kernel runs at most 8 layers, cpu and ref
// any number; trained LSTM stacks have 1-4; 64 keeps a hostile file from making a backend build
// thousands of layers. window: every backend keeps W-1 open windows, each a state per layer; 10,000
// keeps the largest zoo model (lstm_l, H 1024, 4 layers) under 1 GB of window state.
inline constexpr int kMaxNumLayers = 64;
inline constexpr int kMaxWindow = 10000;

// Throws hotpath::Error "<what> holds NaN|+Inf|-Inf at index i" at the first value that is not finite.
void require_finite(std::span<const double> values, const std::string& what);
void require_finite(std::span<const float> values, const std::string& what);

struct ModelConfig {
  int input_size = 0;   // I
  int hidden_size = 0;  // H
  int num_layers = 0;   // L
  int output_size = 0;  // O
  bool lstm_bias = true;
  bool head_bias = true;
  std::optional<int> window;  // default sliding-window length, from the file's metadata
  int layer_input_size(int layer) const { return layer == 0 ? input_size : hidden_size; }
  size_t parameter_count() const;
  bool operator==(const ModelConfig&) const = default;
};

struct LstmLayer {
  std::vector<double> w_ih;  // [4H, in] row-major
  std::vector<double> w_hh;  // [4H, H]
  std::vector<double> b_ih;  // [4H], empty without bias
  std::vector<double> b_hh;  // [4H], empty without bias
  // b_ih + b_hh, or zeros: the single bias every backend actually adds.
  std::vector<double> bias_sum(int hidden_size) const;
};

// An input normalization carried by the model file (tensors `input_scaler.mean`, `input_scaler.scale`,
// [I] each): the LSTM sees x' = (x - mean) / scale, as after scikit-learn's StandardScaler (scale is a
// standard deviation). Every scale is finite and > 0, every mean finite (Model::validate).
struct InputNormalization {
  std::vector<double> mean;   // [I]
  std::vector<double> scale;  // [I]
  std::string fitted_on;      // what it was fitted on (__metadata__ input_scaler_fit), "" when unknown
  bool operator==(const InputNormalization&) const = default;
};
inline constexpr const char* kScalerMeanKey = "input_scaler.mean";
inline constexpr const char* kScalerScaleKey = "input_scaler.scale";
inline constexpr const char* kScalerFitMetadataKey = "input_scaler_fit";

struct Model {
  ModelConfig config;
  std::vector<LstmLayer> layers;
  std::vector<double> head_w;  // [O, H]
  std::vector<double> head_b;  // [O], empty without bias
  DType dtype = DType::F32;    // dtype of the weights in the source file
  std::string name;            // zoo name or file path
  std::string lstm_prefix;     // e.g. "lstm."
  std::string head_prefix;     // e.g. "fc."
  std::optional<InputNormalization> input_scaler;  // from the file, when it carries one

  // Throws hotpath::Error if sizes disagree with the config or a weight is not finite.
  void validate() const;
};

// The model's id: 16 hex digits of a 64-bit FNV-1a hash of its content as loaded (the config, every
// weight and bias as float64, the head, the input scaler), so the same weights give the same id whatever
// the file's name, dtype of origin aside. Names the model that answered a tick after a live swap.
std::string model_id(const Model& model);

}  // namespace hotpath
