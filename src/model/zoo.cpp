#include "model/zoo.hpp"

#include <cmath>
#include <random>

namespace hotpath {
namespace {

ModelConfig shape(int i, int h, int l, int o, int w) {
  ModelConfig c;
  c.input_size = i;
  c.hidden_size = h;
  c.num_layers = l;
  c.output_size = o;
  c.window = w;
  return c;
}

// A portable uniform draw in [-bound, bound): std::uniform_real_distribution's algorithm is left to
// the library, and zoo weights must be the same everywhere for a given seed.
struct Uniform {
  std::mt19937_64 rng;
  double operator()(double bound) {
    const double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    // Weights are stored as float32, like a model trained and saved in PyTorch's default dtype.
    return double(float((2.0 * u - 1.0) * bound));
  }
};

std::vector<double> draw(Uniform& u, size_t n, double bound) {
  std::vector<double> v(n);
  for (auto& x : v) x = u(bound);
  return v;
}

}  // namespace

const std::vector<ZooEntry>& zoo() {
  static const std::vector<ZooEntry> entries = {
      {"lstm_s", shape(32, 128, 2, 1, 50)},       {"lstm_m", shape(32, 256, 3, 1, 50)},
      {"lstm_l", shape(32, 1024, 4, 1, 50)},      {"vollo_tiny", shape(128, 128, 2, 32, 1)},
      {"vollo_small", shape(256, 256, 3, 32, 1)}, {"vollo_med", shape(480, 480, 3, 32, 1)},
      {"vollo_large", shape(960, 960, 3, 32, 1)}, {"nv_small", shape(128, 96, 2, 1, 64)},
      {"nv_medium", shape(192, 160, 3, 1, 96)},   {"nv_large", shape(512, 736, 4, 1, 128)},
      // The financial industry's audited LSTM latency benchmark's three models (inputs x window 100 x 50,
      // 250 x 100, 500 x 100; 2 x 100, 3 x 200, 4 x 1000 units; one output; one bias per layer).
      {"stac_a", shape(100, 100, 2, 1, 50), true},
      {"stac_b", shape(250, 200, 3, 1, 100), true},
      {"stac_c", shape(500, 1000, 4, 1, 100), true},
  };
  return entries;
}

const ZooEntry* find_zoo(const std::string& name) {
  for (const auto& e : zoo())
    if (e.name == name) return &e;
  return nullptr;
}

std::optional<Model> zoo_model(const std::string& name, uint64_t seed) {
  const ZooEntry* entry = find_zoo(name);
  if (!entry) return std::nullopt;
  const ModelConfig& c = entry->config;
  Model m;
  m.config = c;
  m.name = name;
  m.dtype = DType::F32;
  m.lstm_prefix = "lstm.";
  m.head_prefix = "fc.";
  // PyTorch's default: nn.LSTM draws every weight and bias from U(-1/sqrt(H), 1/sqrt(H)); nn.Linear's
  // kaiming-uniform(a=sqrt(5)) weight and its bias both come to U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  Uniform u{std::mt19937_64(seed * 0x9E3779B97F4A7C15ull + 0x5EEDull)};
  const size_t h4 = 4 * size_t(c.hidden_size);
  const double bound = 1.0 / std::sqrt(double(c.hidden_size));
  for (int l = 0; l < c.num_layers; ++l) {
    LstmLayer layer;
    layer.w_ih = draw(u, h4 * c.layer_input_size(l), bound);
    layer.w_hh = draw(u, h4 * c.hidden_size, bound);
    layer.b_ih = draw(u, h4, bound);
    layer.b_hh = draw(u, h4, bound);
    if (entry->keras_bias) layer.b_hh.assign(h4, 0.0);  // drawn all the same: the other draws stay put
    m.layers.push_back(std::move(layer));
  }
  m.head_w = draw(u, size_t(c.output_size) * c.hidden_size, bound);
  m.head_b = draw(u, size_t(c.output_size), bound);
  return m;
}

}  // namespace hotpath
