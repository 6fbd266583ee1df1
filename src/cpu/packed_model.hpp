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
};

struct PackedModel {
  int lanes = 0;
  int I = 0, H = 0, Hp = 0, nb = 0, O = 0, Op = 0, num_layers = 0;
  bool bf16 = false;
  bool head_bias = false;
  std::vector<PackedLayer> layers;
  AlignedArray<float> head_w;  // kernels.hpp: row-major [O][Hp] or [Op/lanes][Hp][lanes]
  AlignedArray<float> head_b;  // [Op]
  size_t gate_floats() const { return size_t(nb) * 4 * lanes; }  // one gate vector, [nb][4][lanes]
  // Bytes of weights the critical step streams per tick: every W_ih and the head.
  size_t critical_weight_bytes() const;
};

// bf16: every weight and bias rounded to bf16 (round to nearest even), as if the file held bf16.
PackedModel pack_model(const Model& model, int lanes, bool bf16);

}  // namespace hotpath::cpu
