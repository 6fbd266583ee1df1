#include "model/model.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "util/error.hpp"

namespace hotpath {
namespace {

// PyTorch's own name for a tensor, so that an error points at the key in the user's file.
std::string lstm_name(const Model& m, const char* what, size_t layer) {
  return m.lstm_prefix + what + "_l" + std::to_string(layer);
}
std::string head_name(const Model& m, const char* what) {
  return m.head_prefix.empty() ? std::string("head ") + what : m.head_prefix + what;
}

template <typename T>
void require_finite_impl(std::span<const T> v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw Error(what + " holds " + (std::isnan(v[i]) ? "NaN" : v[i] > 0 ? "+Inf" : "-Inf") + " at index " +
                  std::to_string(i));
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

void require_finite(std::span<const double> values, const std::string& what) { require_finite_impl(values, what); }
void require_finite(std::span<const float> values, const std::string& what) { require_finite_impl(values, what); }

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

size_t ModelConfig::parameter_count() const {
  const size_t h = size_t(hidden_size), g = 4 * h;
  size_t n = 0;
  for (int k = 0; k < num_layers; ++k) {
    n += g * size_t(layer_input_size(k)) + g * h;
    if (lstm_bias) n += 2 * g;
  }
  n += size_t(output_size) * h;
  if (head_bias) n += size_t(output_size);
  return n;
}

std::vector<double> LstmLayer::bias_sum(int hidden_size) const {
  std::vector<double> b(size_t(4) * size_t(hidden_size), 0.0);
  for (size_t i = 0; i < b.size(); ++i) {
    if (i < b_ih.size()) b[i] += b_ih[i];
    if (i < b_hh.size()) b[i] += b_hh[i];
  }
  return b;
}

void Model::validate() const {
  const std::string who = name.empty() ? std::string() : name + ": ";
  auto fail = [&](const std::string& what) { return Error(who + what); };
  const ModelConfig& c = config;
  if (c.input_size < 1 || c.hidden_size < 1 || c.num_layers < 1 || c.output_size < 1)
    throw fail("model sizes must be positive (input_size " + std::to_string(c.input_size) + ", hidden_size " +
               std::to_string(c.hidden_size) + ", num_layers " + std::to_string(c.num_layers) + ", output_size " +
               std::to_string(c.output_size) + ")");
  if (c.num_layers > kMaxNumLayers)
    throw fail("num_layers " + std::to_string(c.num_layers) + " exceeds the limit of " + std::to_string(kMaxNumLayers));
  if (c.window && (*c.window < 1 || *c.window > kMaxWindow))
    throw fail("window " + std::to_string(*c.window) + " is outside 1.." + std::to_string(kMaxWindow));
  if (layers.size() != size_t(c.num_layers))
    throw fail("model has " + std::to_string(layers.size()) + " layers but num_layers is " +
               std::to_string(c.num_layers));

  auto check = [&](const std::vector<double>& v, size_t expected, const std::string& tensor) {
    if (v.size() != expected)
      throw fail("weight '" + tensor + "' holds " + std::to_string(v.size()) + " values, expected " +
                 std::to_string(expected));
    require_finite(v, who + "weight '" + tensor + "'");
  };
  const size_t h = size_t(c.hidden_size), g = 4 * h, o = size_t(c.output_size);
  for (size_t k = 0; k < layers.size(); ++k) {
    const LstmLayer& l = layers[k];
    check(l.w_ih, g * size_t(c.layer_input_size(int(k))), lstm_name(*this, "weight_ih", k));
    check(l.w_hh, g * h, lstm_name(*this, "weight_hh", k));
    check(l.b_ih, c.lstm_bias ? g : 0, lstm_name(*this, "bias_ih", k));
    check(l.b_hh, c.lstm_bias ? g : 0, lstm_name(*this, "bias_hh", k));
  }
  check(head_w, o * h, head_name(*this, "weight"));
  check(head_b, c.head_bias ? o : 0, head_name(*this, "bias"));
  if (input_scaler) {
    auto tensor = [&](const std::vector<double>& v, const char* key) {
      if (v.size() != size_t(c.input_size))
        throw fail("tensor '" + std::string(key) + "' holds " + std::to_string(v.size()) +
                   " values, expected input_size " + std::to_string(c.input_size));
      require_finite(v, who + "tensor '" + key + "'");
    };
    tensor(input_scaler->mean, kScalerMeanKey);
    tensor(input_scaler->scale, kScalerScaleKey);
    for (size_t i = 0; i < input_scaler->scale.size(); ++i)
      if (!(input_scaler->scale[i] > 0))
        throw fail("tensor '" + std::string(kScalerScaleKey) + "' holds " + num(input_scaler->scale[i]) +
                   " at index " + std::to_string(i) + "; every scale must be > 0 (a standard deviation)");
  }
}

namespace {
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void number(long long v) { bytes(&v, sizeof v); }
  // The length first, so that [a][b, c] and [a, b][c] differ.
  void values(const std::vector<double>& v) {
    number((long long)v.size());
    bytes(v.data(), v.size() * sizeof(double));
  }
};
}  // namespace

std::string model_id(const Model& m) {
  Fnv1a f;
  const ModelConfig& c = m.config;
  for (long long v : {(long long)c.input_size, (long long)c.hidden_size, (long long)c.num_layers,
                      (long long)c.output_size, (long long)c.lstm_bias, (long long)c.head_bias})
    f.number(v);
  for (const LstmLayer& l : m.layers) {
    f.values(l.w_ih);
    f.values(l.w_hh);
    f.values(l.b_ih);
    f.values(l.b_hh);
  }
  f.values(m.head_w);
  f.values(m.head_b);
  f.number(m.input_scaler ? 1 : 0);
  if (m.input_scaler) {
    f.values(m.input_scaler->mean);
    f.values(m.input_scaler->scale);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)f.h);
  return hex;
}

}  // namespace hotpath
