// The CPU backend's kernels, behind one table of plain function pointers so that the ISA (AVX-512,
// AVX2+FMA, NEON, SVE, or portable C++) is chosen at run time. Each ISA lives in its own translation unit compiled
// with its own -m flags (kernels_avx512.cpp, kernels_avx2.cpp, kernels_generic.cpp), all instantiating
// the one template body in kernels_impl.hpp, so the 16-lane AVX-512 logic is the same source as the
// 8-lane AVX2 logic tested on any machine, and a 16-lane portable build mirrors it lane for lane.
//
// Layout (shared by the packer in packed_model.cpp and the kernels). `lanes` = vector width in floats.
//   Hp = H rounded up to lanes; nb = Hp / lanes hidden-unit blocks.
//   A gate matrix [4H, K] (PyTorch order i, f, g, o) is packed per block b of `lanes` hidden units as
//   one contiguous stream:
//     fp32: [nb][K][4][lanes]        element (b, k, g, j) = W[g*H + b*lanes + j][k]
//     bf16: [nb][ceil(K/2)][4][lanes] uint32 pairs: low half bf16(W[row][2kp]), high half W[row][2kp+1]
//   so the critical step reads each weight once, front to back, with the 4 gates of a unit in the same
//   lane of 4 registers: the cell update then runs in registers, no shuffles. Padding rows/cols are 0.
//   Gate vectors (pre-activations, P = W_hh·h + b) are [nb][4][lanes] floats; h and c are [Hp] floats.
//   Padded units stay exactly h = 0, c = 0 (zero weights and bias: i=f=o=0.5, g=0).
//   Head: O <= kHeadRowMajorMax: row-major [O][Hp] (a dot product per output); otherwise
//   [ceil(O/lanes)][Hp][lanes] (outputs in lanes). Head weights are fp32 (in bf16 mode holding
//   bf16-rounded values): O*H is small next to the gate matrices.
//   int8 (model/quantize.hpp's per-row rounding): the critical step's W_ih as
//     [nb][KQ][4][lanes][4] int8, KQ = K rounded up to 8, in quads: the 4 bytes of lane j are columns
//     4kq..4kq+3 of row (g, b*lanes+j), what one 32-bit lane of vpdpbusd multiplies by 4 broadcast
//     activation bytes; per row a float scale and corr = 128 * sum(q) (the activations travel as
//     unsigned bytes, q_x + 128, and corr takes the 128s back out), both [nb][4][lanes]. W_hh is packed
//     the same way (no corr) for the precompute's int8 products on AMX (gemm_i8); the other products (the
//     precompute without AMX-INT8, a head of up to kHeadRowMajorMax outputs) use the dequantized values
//     q * scale in the fp32 layout.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hotpath::cpu {

constexpr int kHeadRowMajorMax = 4;

// Columns (sequences, open windows) a vector kernel's gemm takes in one pass over a chunk of weights.
constexpr int kVectorTileCols = 4;
// A gemm's weights are taken kGemmChunkBytes at a time, every column over a chunk before the next chunk.
constexpr long kGemmChunkBytes = 32 * 1024;
// Rows of an AMX tile: the columns an AMX gemm takes in one pass (kernels_amx.cpp).
constexpr int kAmxTileRows = 16;
// The sequences a throughput tile advances in lockstep, each gemm's columns (an AMX tile's rows).
constexpr int kMaxTileCols = kAmxTileRows;
// Scratch (uint32 words: bf16 activation pairs) a crit call needs for `kdim` inputs: up to
// kVectorTileCols columns of ceil(kdim/2) pairs, each rounded up to 16 words; a gemm call, kMaxTileCols.
constexpr size_t pair_scratch_words(int kdim) { return size_t((kdim + 1) / 2 + 15) / 16 * 16 * kVectorTileCols; }
// int8 layout: columns of W_ih padded to a multiple of 8 (two quads per loop turn), in quads.
constexpr int int8_quads(int kdim) { return (kdim + 7) / 8 * 2; }
// gemm_i8 on AMX: a column's activations as two rows of bytes (high and low), whole 64-byte tile steps.
constexpr size_t int8_tile_row_bytes(int kdim) { return size_t(int8_quads(kdim) + 15) / 16 * 64; }
constexpr size_t gemm_scratch_words(int kdim) {
  return std::max(size_t((kdim + 1) / 2 + 15) / 16 * 16, int8_tile_row_bytes(kdim) * 2 / 4) * kMaxTileCols;
}
// One block of `lanes` hidden units of a packed gate matrix of `kdim` columns (the layout above), in the
// units its kernels step through: floats (fp32), uint32 pairs (bf16), uint32 words of four int8 (int8).
constexpr long f32_block_floats(int kdim, int lanes) { return long(kdim) * 4 * lanes; }
constexpr long bf16_block_words(int kdim, int lanes) { return long((kdim + 1) / 2) * 4 * lanes; }
constexpr long int8_block_words(int kdim, int lanes) { return long(int8_quads(kdim)) * 4 * lanes; }
// The critical step's activation scratch (uint32 words) for inputs of up to `kdim`: bf16 pairs, or
// int8's activation bytes (two rows of kdim + 64 bytes: crit_i8, head_i8).
constexpr size_t activation_scratch_words(int kdim) {
  return pair_scratch_words(kdim) > size_t(2 * (kdim + 64) + 3) / 4 ? pair_scratch_words(kdim)
                                                                     : size_t(2 * (kdim + 64) + 3) / 4;
}

struct KernelTable {
  const char* isa;  // "avx512", "avx2", "neon", "sve", "generic"
  int lanes;        // 16 or 8
  bool bf16_dot;    // bf16 weights use a pair dot product (vdpbf16ps): activations are rounded to bf16
  bool amx = false;  // gemm_bf16 (bf16 tables) or gemm_i8 (int8) runs on AMX tiles (kernels_amx.cpp)

  // The critical step of one layer for one column: acc = W·x (x: kdim floats); u_out (if non-null) =
  // acc; gates = acc + P (P may be null); then the LSTM cell on c_in -> h_out, c_out (nb blocks).
  // Prefetch distance in bytes ahead of the weight stream (0: none).
  void (*crit_f32)(const float* W, int kdim, int nb, const float* x, const float* P, const float* c_in,
                   float* h_out, float* c_out, float* u_out, uint32_t* scratch, int prefetch);
  void (*crit_bf16)(const uint32_t* W, int kdim, int nb, const float* x, const float* P, const float* c_in,
                    float* h_out, float* c_out, float* u_out, uint32_t* scratch, int prefetch);
  // out[j] = W·X[j] + add[j] (add[j] may be null) over row blocks [b0, b1), for ncols >= 1 columns.
  // out[j] may alias add[j]. scratch: gemm_scratch_words(kdim).
  void (*gemm_f32)(const float* W, int kdim, int b0, int b1, int ncols, const float* const* X,
                   const float* const* add, float* const* out, uint32_t* scratch);
  void (*gemm_bf16)(const uint32_t* W, int kdim, int b0, int b1, int ncols, const float* const* X,
                    const float* const* add, float* const* out, uint32_t* scratch);
  // int8 weights in the critical step's layout (W [nb][KQ][4][lanes][4], row scales [nb][4][lanes]), the
  // same product as gemm_f32 on their dequantized values: out[j] = (W·q(X[j])) * scale * s_j + add[j],
  // each column quantized to 16 bits on its own (q = round(x * 32767 / max|x|), s_j = max|x| / 32767), as
  // two bytes, the int32 sums exact. Null but where the CPU has AMX-INT8 (kernels_avx512_amx_i8): the
  // backend then uses gemm_f32 on the dequantized weights. scratch: gemm_scratch_words(kdim).
  void (*gemm_i8)(const int8_t* W, const float* scale, int kdim, int b0, int b1, int ncols, const float* const* X,
                  const float* const* add, float* const* out, uint32_t* scratch) = nullptr;
  // LSTM cell over blocks [b0, b1): gates (+ add if non-null) with c (in/out) -> h.
  void (*cell)(const float* gates, const float* add, float* c, float* h, int b0, int b1);
  // z = head_w·h + head_b (head_b may be null); z needs room for O rounded up to lanes.
  void (*head)(const float* head_w, const float* head_b, int O, int Hp, const float* h, float* z);
  // int8 weights (layout above): the critical step of one layer for one column, like crit_f32, with x
  // quantized here, per call, symmetric over the vector: [0] 8-bit (q = round(x * 127 / max|x|), one
  // vpdpbusd per weight vector), [1] 16-bit (q = round(x * 32767 / max|x|) split into hi and lo bytes,
  // two). Accumulation is exact in int32; gates = acc * (x scale * row scale) in fp32. Null where the
  // ISA has no int8 dot product (AVX2): the backend then uses the portable table. scratch:
  // activation_scratch_words(kdim).
  void (*crit_i8[2])(const int8_t* W, const float* scale, const int32_t* corr, int kdim, int nb, const float* x,
                     const float* P, const float* c_in, float* h_out, float* c_out, uint8_t* scratch, int prefetch);
  // int8 head for O > kHeadRowMajorMax: z = W·h + b with W [ceil(O/lanes)][KQ][lanes][4] int8 (outputs in
  // lanes; scale and corr per output, [Op]), h quantized as in crit_i8 ([0] 8-bit, [1] 16-bit); b may be
  // null; z needs room for O rounded up to lanes.
  void (*head_i8[2])(const int8_t* W, const float* scale, const int32_t* corr, const float* b, int O, int kdim,
                     const float* h, float* z, uint8_t* scratch);
  // The fast activations, exposed for their accuracy test.
  void (*tanh)(const float* x, float* y, size_t n);
  void (*sigmoid)(const float* x, float* y, size_t n);
};

// Tables per ISA. Each architecture builds its own (x86-64: avx512, avx2; aarch64: neon); the other
// architecture's return nullptr (kernels_absent.cpp).
const KernelTable* kernels_avx512(bool bf16_dot);
const KernelTable* kernels_avx2();
// The AVX-512 pair-dot table with gemm_bf16 on AMX tiles: needs AVX512_BF16 and arch::IsaFlags::amx_bf16.
const KernelTable* kernels_avx512_amx();
// The AVX-512 table (pair dot or not, as kernels_avx512) with gemm_i8 on AMX tiles: for int8 where the CPU
// has AVX512_VNNI and arch::IsaFlags::amx_int8.
const KernelTable* kernels_avx512_amx_i8(bool bf16_dot);
const KernelTable* kernels_neon_base();               // fp32, bf16 widened; no int8 (crit_i8 null)
const KernelTable* kernels_neon_ext(bool bf16_dot);   // + BFDOT and USDOT: needs FEAT_BF16 and FEAT_I8MM
const KernelTable* kernels_sve256(bool bf16_dot);     // SVE, 256-bit vectors (8 lanes), with BF16 and I8MM
const KernelTable* kernels_sve512(bool bf16_dot);     // SVE, 512-bit vectors (16 lanes), with BF16 and I8MM
const KernelTable* kernels_generic(bool bf16_dot);

}  // namespace hotpath::cpu
