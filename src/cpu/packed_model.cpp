#include "cpu/packed_model.hpp"

#include "cpu/kernels.hpp"
#include "model/quantize.hpp"
#include "util/half.hpp"

namespace hotpath::cpu {
namespace {

float round_weight(double v, bool bf16) {
  const float f = static_cast<float>(v);
  return bf16 ? bf16_to_float(float_to_bf16(f)) : f;
}

// src [4H, K] row-major (PyTorch order) -> [nb][K][4][lanes].
AlignedArray<float> pack_f32(const std::vector<double>& src, int H, int K, int lanes) {
  const int nb = (H + lanes - 1) / lanes;
  AlignedArray<float> dst(size_t(nb) * K * 4 * lanes);
  for (int b = 0; b < nb; ++b)
    for (int k = 0; k < K; ++k)
      for (int g = 0; g < 4; ++g)
        for (int j = 0; j < lanes; ++j) {
          const int unit = b * lanes + j;
          if (unit < H)
            dst[((size_t(b) * K + k) * 4 + g) * lanes + j] = static_cast<float>(src[(size_t(g) * H + unit) * K + k]);
        }
  return dst;
}

// src [4H, K] -> [nb][ceil(K/2)][4][lanes] pairs, low half column 2kp, high half 2kp+1.
AlignedArray<uint32_t> pack_bf16(const std::vector<double>& src, int H, int K, int lanes) {
  const int nb = (H + lanes - 1) / lanes, nkp = (K + 1) / 2;
  AlignedArray<uint32_t> dst(size_t(nb) * nkp * 4 * lanes);
  for (int b = 0; b < nb; ++b)
    for (int kp = 0; kp < nkp; ++kp)
      for (int g = 0; g < 4; ++g)
        for (int j = 0; j < lanes; ++j) {
          const int unit = b * lanes + j;
          if (unit >= H) continue;
          const size_t row = size_t(g) * H + unit;
          const uint32_t lo = float_to_bf16(static_cast<float>(src[row * K + 2 * kp]));
          const uint32_t hi = 2 * kp + 1 < K ? float_to_bf16(static_cast<float>(src[row * K + 2 * kp + 1])) : 0u;
          dst[((size_t(b) * nkp + kp) * 4 + g) * lanes + j] = lo | (hi << 16);
        }
  return dst;
}

// The int8 layout of a gate matrix [4H, K] (kernels.hpp): [nb][KQ][4][lanes][4] bytes, scale and corr
// [nb][4][lanes] (corr only if asked for).
void pack_int8(const Int8Rows& q, int H, int lanes, AlignedArray<int8_t>& w, AlignedArray<float>& scale,
               AlignedArray<int32_t>* corr) {
  const int K = q.cols, nb = (H + lanes - 1) / lanes, KQ = int8_quads(K);
  w = AlignedArray<int8_t>(size_t(nb) * KQ * 4 * lanes * 4);
  scale = AlignedArray<float>(size_t(nb) * 4 * lanes);
  if (corr) *corr = AlignedArray<int32_t>(size_t(nb) * 4 * lanes);
  for (int g = 0; g < 4; ++g)
    for (int unit = 0; unit < H; ++unit) {
      const int row = g * H + unit, b = unit / lanes, j = unit % lanes;
      const size_t vec = (size_t(b) * 4 + g) * lanes + j;
      scale[vec] = q.scale[row];
      int32_t sum = 0;
      for (int k = 0; k < K; ++k) {
        const int8_t v = q.q[size_t(row) * K + k];
        sum += v;
        w[(((size_t(b) * KQ + k / 4) * 4 + g) * lanes + j) * 4 + k % 4] = v;
      }
      if (corr) (*corr)[vec] = 128 * sum;
    }
}

// The dequantized values q * scale, [4H, K] row-major in float64 (rounded to fp32 by pack_f32).
std::vector<double> dequantized(const Int8Rows& q) {
  std::vector<double> out(q.q.size());
  for (int r = 0; r < q.rows; ++r)
    for (int c = 0; c < q.cols; ++c) out[size_t(r) * q.cols + c] = q.value(r, c);
  return out;
}

}  // namespace

size_t PackedModel::critical_weight_bytes() const {
  size_t bytes = head8.size() ? head8.size() + head8_scale.size() * 4 + head8_corr.size() * 4 : head_w.size() * 4;
  for (const auto& l : layers)
    bytes += int8 ? l.wih8.size() + l.wih8_scale.size() * 4 + l.wih8_corr.size() * 4
                  : bf16 ? l.wih16.size() * 4 : l.wih32.size() * 4;
  return bytes;
}

size_t PackedModel::precompute_weight_bytes(bool int8_products) const {
  size_t bytes = 0;
  for (const auto& l : layers)
    bytes += int8 && int8_products ? l.wih8.size() + l.whh8.size()
             : bf16                ? (l.wih16.size() + l.whh16.size()) * 4
                                   : (l.wih32.size() + l.whh32.size()) * 4;
  return bytes;
}

PackedModel pack_model(const Model& model, int lanes, WeightFormat format) {
  const bool bf16 = format == WeightFormat::bf16;
  const ModelConfig& cfg = model.config;
  PackedModel p;
  p.lanes = lanes;
  p.I = cfg.input_size;
  p.H = cfg.hidden_size;
  p.nb = (p.H + lanes - 1) / lanes;
  p.Hp = p.nb * lanes;
  p.O = cfg.output_size;
  p.Op = (p.O + lanes - 1) / lanes * lanes;
  p.num_layers = cfg.num_layers;
  p.bf16 = bf16;
  p.int8 = format == WeightFormat::int8;
  p.head_bias = !model.head_b.empty();
  const int H = p.H;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const LstmLayer& src = model.layers[l];
    PackedLayer dst;
    dst.in = cfg.layer_input_size(l);
    if (bf16) {
      dst.wih16 = pack_bf16(src.w_ih, H, dst.in, lanes);
      dst.whh16 = pack_bf16(src.w_hh, H, H, lanes);
    } else if (p.int8) {
      const Int8Rows qih = quantize_rows_int8(src.w_ih, 4 * H, dst.in), qhh = quantize_rows_int8(src.w_hh, 4 * H, H);
      pack_int8(qih, H, lanes, dst.wih8, dst.wih8_scale, &dst.wih8_corr);
      pack_int8(qhh, H, lanes, dst.whh8, dst.whh8_scale, nullptr);
      dst.wih32 = pack_f32(dequantized(qih), H, dst.in, lanes);
      dst.whh32 = pack_f32(dequantized(qhh), H, H, lanes);
    } else {
      dst.wih32 = pack_f32(src.w_ih, H, dst.in, lanes);
      dst.whh32 = pack_f32(src.w_hh, H, H, lanes);
    }
    dst.bias = AlignedArray<float>(p.gate_floats());
    if (!src.b_ih.empty() || !src.b_hh.empty()) {
      for (int g = 0; g < 4; ++g)
        for (int u = 0; u < H; ++u) {
          const size_t row = size_t(g) * H + u;
          float v = 0.0f;
          if (!src.b_ih.empty()) v += round_weight(src.b_ih[row], bf16);
          if (!src.b_hh.empty()) v += round_weight(src.b_hh[row], bf16);
          dst.bias[(size_t(u / lanes) * 4 + g) * lanes + u % lanes] = v;
        }
    }
    p.layers.push_back(std::move(dst));
  }
  p.head_w = AlignedArray<float>(size_t(p.Op) * p.Hp);
  const bool row_major = p.O <= kHeadRowMajorMax;
  const Int8Rows head_q = p.int8 ? quantize_rows_int8(model.head_w, p.O, H) : Int8Rows{};
  const std::vector<double> head_src = p.int8 ? dequantized(head_q) : model.head_w;
  if (p.int8 && p.O > kHeadRowMajorMax) {
    const int KQ = int8_quads(H), nob = p.Op / lanes;
    p.head8 = AlignedArray<int8_t>(size_t(nob) * KQ * lanes * 4);
    p.head8_scale = AlignedArray<float>(p.Op);
    p.head8_corr = AlignedArray<int32_t>(p.Op);
    for (int o = 0; o < p.O; ++o) {
      int32_t sum = 0;
      for (int k = 0; k < H; ++k) {
        const int8_t v = head_q.q[size_t(o) * H + k];
        sum += v;
        p.head8[((size_t(o / lanes) * KQ + k / 4) * lanes + o % lanes) * 4 + k % 4] = v;
      }
      p.head8_scale[o] = head_q.scale[o];
      p.head8_corr[o] = 128 * sum;
    }
  }
  for (int o = 0; o < p.O; ++o)
    for (int k = 0; k < H; ++k) {
      const float w = round_weight(head_src[size_t(o) * H + k], bf16);
      if (row_major)
        p.head_w[size_t(o) * p.Hp + k] = w;
      else
        p.head_w[(size_t(o / lanes) * p.Hp + k) * lanes + o % lanes] = w;
    }
  p.head_b = AlignedArray<float>(p.Op);
  for (int o = 0; o < int(model.head_b.size()); ++o) p.head_b[o] = round_weight(model.head_b[o], bf16);
  return p;
}

}  // namespace hotpath::cpu
