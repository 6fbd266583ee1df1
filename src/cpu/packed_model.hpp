// The model's weights converted once to the CPU backend's precision and layout (kernels.hpp says
// which layout and why).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/aligned.hpp"
#include "model/model.hpp"

namespace hotpath::cpu {

struct PackedLayer {
  int in = 0;                       // columns of W_ih: I for layer 0, H above
  AlignedArray<float> wih32, whh32;  // fp32 weights (fp32 mode)
  AlignedArray<uint32_t> wih16, whh16;  // bf16 pairs (bf16 mode)
  AlignedArray<float> bias;         // b_ih + b_hh as [nb][4][lanes]; zeros without bias
  // int8 mode: the critical step's W_ih and W_hh (kernels.hpp: int8 layout; W_hh for the precompute's
  // int8 products where the CPU has them, KernelTable::gemm_i8); wih32/whh32 then hold the dequantized
  // values for the vector kernels' products.
  AlignedArray<int8_t> wih8, whh8;
  AlignedArray<float> wih8_scale, whh8_scale;  // [nb][4][lanes]
  AlignedArray<int32_t> wih8_corr;             // [nb][4][lanes]: 128 * sum of the row's q
};

struct PackedModel {
  int lanes = 0;
  int I = 0, H = 0, Hp = 0, nb = 0, O = 0, Op = 0, num_layers = 0;
  bool bf16 = false;
  bool int8 = false;  // model/quantize.hpp's rounding: int8 critical step (and AMX products), dequantized fp32 elsewhere
  bool head_bias = false;
  std::vector<PackedLayer> layers;
  AlignedArray<float> head_w;  // kernels.hpp: row-major [O][Hp] or [Op/lanes][Hp][lanes]
  AlignedArray<float> head_b;  // [Op]
  // int8 with O > kHeadRowMajorMax: the head in int8 too (kernels.hpp: head_i8); head_w keeps the
  // dequantized values.
  AlignedArray<int8_t> head8;
  AlignedArray<float> head8_scale;   // [Op]
  AlignedArray<int32_t> head8_corr;  // [Op]
  size_t gate_floats() const { return size_t(nb) * 4 * lanes; }  // one gate vector, [nb][4][lanes]
  // Bytes of weights the critical step streams per tick: every W_ih and the head.
  size_t critical_weight_bytes() const;
  // Bytes of weights window mode's precompute reads per tick: every W_ih and W_hh in its format (int8:
  // the int8 weights with `int8_products`, else their dequantized fp32).
  size_t precompute_weight_bytes(bool int8_products = false) const;
};

enum class WeightFormat { fp32, bf16, int8 };
// bf16: every weight and bias rounded to bf16 (round to nearest even), as if the file held bf16.
// int8: every weight matrix rounded by model/quantize.hpp (biases in fp32).
PackedModel pack_model(const Model& model, int lanes, WeightFormat format);

}  // namespace hotpath::cpu
