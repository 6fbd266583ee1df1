#include "cuda/lstm_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/kernels/cluster/cluster_policy.hpp"
#include "cuda/input_layout.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace hotpath::cuda {
namespace {

uint16_t to_bits(double w, bool bf16) {
  return bf16 ? float_to_bf16(float(w)) : float_to_fp16(float(w));
}
float from_bits(uint16_t b, bool bf16) { return bf16 ? bf16_to_float(b) : fp16_to_float(b); }
uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
int align16(int bytes) { return (bytes + 15) & ~15; }
// Shared-memory layouts by offsets: a region of `bytes` starts at `end`, and `end` moves past it to the next
// 16-byte boundary (a size past 1 GiB is capped: such a layout is refused by its total, never overflows).
int take_region(int& end, long long bytes) {
  const int at = end;
  end = align16(int(std::min<long long>(bytes, 1 << 30)) + end);
  return at;
}

// A[r][k] of one 16x16 tile -> the 4 registers lane `lane` holds (mma.m16n8k16 .row A fragment):
// {A[g][2t..2t+1]}, {A[g+8][2t..]}, {A[g][2t+8..]}, {A[g+8][2t+8..]}, g = lane/4, t = lane%4, the
// lower column in the low half.
template <class F>
void pack_tile(F&& a, uint32_t* out /* 32 lanes x 4 */) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    uint32_t* o = out + lane * 4;
    o[0] = pack(a(g, 2 * t), a(g, 2 * t + 1));
    o[1] = pack(a(g + 8, 2 * t), a(g + 8, 2 * t + 1));
    o[2] = pack(a(g, 2 * t + 8), a(g, 2 * t + 9));
    o[3] = pack(a(g + 8, 2 * t + 8), a(g + 8, 2 * t + 9));
  }
}

}  // namespace

float round_weight(double w, bool bf16) { return from_bits(to_bits(w, bf16), bf16); }

namespace {

// Checks every kernel family shares; throws naming the limit.
void check_servable(const ModelConfig& cfg, Precision precision, Mode mode, int window) {
  if (precision != Precision::fp16 && precision != Precision::bf16)
    throw UnsupportedError(std::string("the cuda backend runs fp16 or bf16 weights, not ") + precision_name(precision));
  if (mode == Mode::batch) throw UnsupportedError("the cuda backend serves window and streaming modes, not batch");
  if (cfg.num_layers > kMaxLayers)
    throw UnsupportedError("the cuda kernel supports at most " + std::to_string(kMaxLayers) + " layers, the model has " +
                           std::to_string(cfg.num_layers));
  if (cfg.output_size > kMaxOutputs)
    throw UnsupportedError("the cuda kernel supports at most " + std::to_string(kMaxOutputs) +
                           " outputs (one warp's head tiles), the model has " + std::to_string(cfg.output_size));
  if (mode == Mode::window && window < 1) throw Error("window mode needs a window >= 1");
}

// Model shape, precision, mailbox chunks and the k16 tiles of each layer (even: two accumulator chains).
void plan_common(LstmParams& p, const ModelConfig& cfg, Precision precision, Mode mode, int window,
                 const MailboxOptions& mailbox) {
  p.I = cfg.input_size; p.H = cfg.hidden_size; p.L = cfg.num_layers; p.O = cfg.output_size;
  p.window_mode = mode == Mode::window;
  p.W = mode == Mode::window ? window : 1;
  p.bf16 = precision == Precision::bf16;
  p.groups = (p.H + kUnitsPerGroup - 1) / kUnitsPerGroup;
  const InputLayout in = input_layout(p.I, mailbox.dual_seq_input);  // the host mailbox's layout, exactly
  p.mb.in_fpc = in.floats_per_chunk;
  p.mb.in_dual = mailbox.dual_seq_input;
  p.mb.n_in = in.chunks;
  p.mb.in_stride = in.stride;
  p.mb.n_out = chunks_for(p.O, kOutFloatsPerChunk);
  for (int l = 0; l <= p.L; ++l) {
    const int K = l == 0 ? p.I : p.H;
    p.kt[l] = ((K + 15) / 16 + 1) & ~1;
  }
  p.xin_stride = 0;
  for (int l = 0; l <= p.L; ++l) p.xin_stride = std::max(p.xin_stride, p.kt[l] * 16);
  // A B load reads the hi row in one half of the warp's lanes and the lo row in the other: rows an odd
  // multiple of 16 banks apart put the two halves in different banks, one shared-memory wavefront where
  // rows a multiple of 32 banks apart take two (kt is even: the stride is a multiple of 16 banks).
  if (p.xin_stride / 2 % 32 == 0) p.xin_stride += 32;
}

// Packs the rows of unit group q of one gate matrix w ([4H][K], PyTorch's gate order) at uint4 index
// `at` (tile m, k16 tile k): tile m = 0 holds gates i (rows 0-7) and f (rows 8-15) of units 8q..8q+7,
// m = 1 gates g and o, so the lane holding rows g and g+8 of both tiles has all four gates of unit 8q+g.
// Layer l's W_ih for the critical step; W_hh for the grid's own precompute. paired: the grid family's column
// order (grid_tile_col), else tile k holds columns [16k, 16k + 16) in order.
void pack_gate_tile(std::vector<uint32_t>& frags, size_t at, const std::vector<double>& w, int H, int K, int q, int m,
                    int k, bool bf16, bool paired) {
  auto a = [&](int r, int c) -> uint16_t {
    const int unit = q * kUnitsPerGroup + (r & 7), gate = 2 * m + (r >> 3);
    const int col = paired ? grid_tile_col(k, c) : k * 16 + c;
    if (unit >= H || col >= K) return 0;
    return to_bits(w[size_t(gate * H + unit) * K + col], bf16);
  };
  pack_tile(a, &frags[at * 4]);
}

void pack_group_tile(std::vector<uint32_t>& frags, size_t at, const Model& model, int l, int q, int m, int k, bool bf16,
                     bool paired) {
  const ModelConfig& cfg = model.config;
  pack_gate_tile(frags, at, model.layers[l].w_ih, cfg.hidden_size, cfg.layer_input_size(l), q, m, k, bf16, paired);
}

// Where fragment (layer, group q, tile m, k16 tile k) lives in LstmPlan::frags (uint4 index): the one
// definition of the layout for packing and for the host emulation.
size_t frag_index(const LstmParams& p, int l, int q, int m, int k) {
  const int kt = p.kt[l];
  if (p.family == KernelFamily::cluster) {
    // block b's warp (ql, ks) holds tile k of layer l at slot first[l] + k % tiles[l] of its list
    const int b = q / p.gpb, ql = q % p.gpb, ks = k / p.cl.tiles[l], j = k % p.cl.tiles[l];
    const int warp = ql * p.ksplit + ks;
    return size_t(b) * p.block_frag + ((size_t(warp) * p.cl.slots + p.cl.first[l] + j) * 2 + m) * 32;
  }
  if (p.family == KernelFamily::grid) {
    const int b = q / p.gpb, ql = q % p.gpb;
    return size_t(b) * p.block_frag + p.bfrag_off[l] + ((ql * 2 + m) * kt + k) * 32;
  }
  const int kr = l == 0 ? p.kreg : 0;
  return k < kr ? size_t(p.reg_off) + ((q * 2 + m) * kr + k) * 32
                : size_t(p.frag_off[l]) + ((q * 2 + m) * (kt - kr) + (k - kr)) * 32;
}

// The cta critical block's shared memory: fragments (layer 0 minus kreg tiles held in registers, the
// other layers, the head), input buffers, the input chunks, P and c, the head sums, the flags. With
// `assign`, the offsets are written into p. The one computation of that layout.
int cta_critical_layout(LstmParams& p, int kreg, bool assign) {
  int tiles = p.groups * 2 * (p.kt[0] - kreg);
  for (int l = 1; l < p.L; ++l) tiles += p.groups * 2 * p.kt[l];
  tiles += 2 * p.kt[p.L];
  int s = 0;
  auto take = [&](long long bytes) { return take_region(s, bytes); };
  const int frags = take(tiles * 512), xin = take((p.L + 1) * 2 * p.xin_stride * 2), x32 = take(p.mb.n_in * 3 * 4),
            seqw = take(p.mb.n_in * 4), claim = take(p.mb.n_in * 4), P = take(p.L * 4 * p.H * 4),
            c = take(p.L * p.H * 4), z = take(kMaxOutputs * 4), flags = take(kCtaFlagsBytes);
  if (assign) {
    p.s_frags = frags; p.s_xin = xin; p.s_x32 = x32; p.s_seqw = seqw; p.s_claim = claim;
    p.s_P = P; p.s_c = c; p.s_z = z; p.s_flags = flags;
  }
  return s;
}

// A grid critical block's shared memory (grid/lstm_grid.cu: MultiSmem), its first l2_layers layers'
// fragments left in global memory (LstmParams::grid_l2_layers); assign: into p.
int multi_critical_layout(LstmParams& p, int gpb, int ksplit, int l2_layers, bool assign) {
  const int Ub = gpb * kUnitsPerGroup;
  int fr = 0;
  for (int l = l2_layers; l < p.L; ++l) fr += gpb * 2 * p.kt[l] * 32;
  int s = 0;
  auto take = [&](long long bytes) { return take_region(s, bytes); };
  const int frags = take(fr * 16), xin = take(p.L * 2 * p.xin_stride * 2),
            x32 = take(p.mb.n_in * 3 * 4), seqw = take(p.mb.n_in * 4), claim = take(p.mb.n_in * 4),
            P = take(p.L * 4 * Ub * 4), c = take(p.L * Ub * 4), red = take(ksplit * Ub * 8 * 4) /* the critical step's 4 gates by layer parity; the own precompute's 8 sums */,
            stage = take(2 * Ub * 2), h32 = take(Ub * 4), hw = take(p.O * Ub * 4), z0 = take(4 * Ub * 4),
            gmarks = take(4 * (kGridWarpMarks * ksplit * gpb + kGridLayerStats) * (p.L + 1)), flags = take(kCtaFlagsBytes);
  if (assign) {
    int off = 0;
    for (int l = 0; l < p.L; ++l) {
      p.bfrag_off[l] = off;
      off += gpb * 2 * p.kt[l] * 32;
    }
    p.block_frag = off;  // every layer's, in global memory
    p.grid_l2_layers = l2_layers;
    p.s_frags = frags; p.s_xin = xin; p.s_x32 = x32; p.s_seqw = seqw; p.s_claim = claim; p.s_P = P; p.s_c = c;
    p.s_red = red; p.s_stage = stage; p.s_h32 = h32; p.s_hw = hw; p.s_z0 = z0; p.s_gmarks = gmarks; p.s_flags = flags;
  }
  return s;
}

// A cluster critical block (cluster/lstm_cluster.cu: ClusterSmem) for nc blocks of gpb unit groups: each
// warp's tile list, its register and shared-memory slots, and the buffers; assign: into p. Returns the
// shared memory bytes.
int cluster_critical_layout(LstmParams& p, int nc, int gpb, bool assign) {
  const int ksplit = ClusterPolicy::warps / gpb, Ub = gpb * kUnitsPerGroup;
  ClusterLayout cl;
  for (int l = 0; l < p.L; ++l) {
    cl.tiles[l] = (p.kt[l] + ksplit - 1) / ksplit;
    cl.first[l] = cl.slots;
    cl.slots += cl.tiles[l];
  }
  cl.regs = ClusterPolicy::max_reg_slots;
  for (int r : ClusterPolicy::reg_slots)
    if (r >= cl.slots) {
      cl.regs = r;
      break;
    }
  cl.h_valid = nc * gpb * kUnitsPerGroup;
  cl.h_words = p.L > 1 ? cl.h_valid : 0;
  const int spill = std::max(0, cl.slots - cl.regs);
  int s = 0;
  auto take = [&](long long bytes) { return take_region(s, bytes); };
  cl.s_tx = take(p.kt[0] * 16 * 8LL);
  cl.s_th = take((p.L - 1) * 8LL * cl.h_words);
  cl.s_thead = take(8LL * nc * gpb * p.O);
  cl.s_stats = take(8LL * (kClusterStatSlots + 2));
  cl.s_xw = take(p.kt[0] * 16 * 4LL);
  cl.s_hx = take((p.L - 1) * 4LL * cl.h_words);
  cl.s_headf = take(4LL * nc * gpb * p.O);
  cl.s_bar = take(8LL * (p.L + 1) * 2);
  const int spill_at = take(16LL * ClusterPolicy::warps * spill * 64), x32 = take(p.mb.n_in * 3 * 4LL),
            red = take(4LL * 2 * ksplit * gpb * 32), P = take(4LL * p.L * 4 * Ub), c = take(4LL * p.L * Ub),
            hw = take(4LL * p.O * Ub), flags = take(kCtaFlagsBytes);
  if (assign) {
    p.cl = cl;
    p.nc = nc;
    p.gpb = gpb;
    p.ksplit = ksplit;
    p.compute_warps = ClusterPolicy::warps;
    p.block_frag = ClusterPolicy::warps * cl.slots * 64;
    p.s_frags = spill_at; p.s_x32 = x32; p.s_red = red; p.s_P = P; p.s_c = c; p.s_hw = hw; p.s_flags = flags;
  }
  return s;
}

// The multi-block families' fragments: nc blocks of block_frag uint4, every layer's tiles where
// frag_index puts them (padding zero).
void pack_blocks(LstmPlan& plan, const Model& model) {
  const LstmParams& p = plan.params;
  plan.frags.assign(size_t(p.nc) * p.block_frag * 4, 0);
  for (int l = 0; l < p.L; ++l)
    for (int q = 0; q < p.groups; ++q)
      for (int m = 0; m < 2; ++m)
        for (int k = 0; k < p.kt[l]; ++k)
          pack_group_tile(plan.frags, frag_index(p, l, q, m, k), model, l, q, m, k, p.bf16,
                          p.family == KernelFamily::grid);
}

void fill_head(LstmPlan& plan, const Model& model) {
  const LstmParams& p = plan.params;
  plan.head_w.assign(size_t(p.O) * p.H, 0.0f);
  for (size_t i = 0; i < plan.head_w.size() && i < model.head_w.size(); ++i)
    plan.head_w[i] = round_weight(model.head_w[i], p.bf16);
  plan.head_b.assign(p.O, 0.0f);
  for (int o = 0; o < p.O && !model.head_b.empty(); ++o) plan.head_b[o] = float(model.head_b[o]);
}

// The precompute split (U hidden units per block over max_np blocks at most), its weights, and where
// they live: shared memory where weights and window state fit, else weights (then state too) in global
// memory. Returns the precompute block's shared memory bytes.
// exact: the weights as fp32 (the hybrid backend's), not rounded to the critical step's half precision.
int plan_precompute(LstmPlan& plan, const Model& model, Mode mode, int window, int max_np, const DeviceLimits& limits,
                    bool fill = true, bool exact = false) {
  LstmParams& p = plan.params;
  const ModelConfig& cfg = model.config;
  const int H = p.H, L = p.L;
  if (max_np < 1) throw UnsupportedError("the cuda kernel needs at least one SM for the precompute");
  p.U = (H + max_np - 1) / max_np;
  p.np = (H + p.U - 1) / p.U;
  p.nslots = mode == Mode::window ? std::max(1, window - 1) : 1;
  int f = 0;
  for (int l = 0; l < L; ++l) {
    p.pre_ih[l] = f; f += 4 * p.U * cfg.layer_input_size(l);
    p.pre_hh[l] = f; f += 4 * p.U * H;
    p.pre_b[l] = f;  f += 4 * p.U;
  }
  p.pre_block_floats = (f + 3) & ~3;
  const long long state_bytes = 4LL * L * p.nslots * 5 * p.U;  // Q [4U] and c [U] per layer and window
  auto layout = [&](bool weights, bool state) {
    int s = 0;
    auto take = [&](long long bytes) { return take_region(s, bytes); };
    p.s_pw = take(weights ? p.pre_block_floats * 4LL : 0);
    p.s_Q = take(state ? 4LL * L * p.nslots * 4 * p.U : 0);
    p.s_pc = take(state ? 4LL * L * p.nslots * p.U : 0);
    p.s_px = take(p.I * 4);
    p.s_g0 = take(4 * p.U * 4);
    p.s_pflags = take(16);
    return s;
  };
  p.pre_global = 0;
  plan.pre_state_floats = 0;
  int bytes = layout(true, true);
  if (bytes > limits.smem_per_block_optin) {
    p.pre_global = 1;
    bytes = layout(false, true);
  }
  if (bytes > limits.smem_per_block_optin) {
    bytes = layout(false, false);
    p.pre_state_floats = int((state_bytes / 4 + 3) & ~3LL);
    plan.pre_state_floats = p.pre_state_floats;
  }
  if (bytes > limits.smem_per_block_optin)
    throw UnsupportedError("model does not fit the cuda kernel: a precompute block needs " + std::to_string(bytes / 1024) +
                           " KiB of shared memory even with its weights and state in global memory, but " +
                           limits.name + " allows " + std::to_string(limits.smem_per_block_optin / 1024) +
                           " KiB per block");
  if (!fill) return bytes;  // sizes and placement only
  plan.pre_w.assign(size_t(p.np) * p.pre_block_floats, 0.0f);
  for (int b = 0; b < p.np; ++b) {
    float* dst = &plan.pre_w[size_t(b) * p.pre_block_floats];
    for (int l = 0; l < L; ++l) {
      const LstmLayer& ly = model.layers[l];
      const int K = cfg.layer_input_size(l);
      const std::vector<double> bias = ly.bias_sum(H);
      for (int u = 0; u < p.U; ++u) {
        const int unit = b * p.U + u;
        if (unit >= H) continue;
        for (int gate = 0; gate < 4; ++gate) {
          const int row = gate * H + unit, r = 4 * u + gate;
          auto w = [&](double v) { return exact ? float(v) : round_weight(v, p.bf16); };
          for (int k = 0; k < K; ++k) dst[p.pre_ih[l] + r * K + k] = w(ly.w_ih[size_t(row) * K + k]);
          for (int k = 0; k < H; ++k) dst[p.pre_hh[l] + r * H + k] = w(ly.w_hh[size_t(row) * H + k]);
          dst[p.pre_b[l] + r] = float(bias[row]);
        }
      }
    }
  }
  return bytes;
}

// The hybrid precompute's tensor-core form (LstmParams::hy_*): its split, shared-memory layout and weights.
// Returns the block's shared-memory bytes, or 0 (the plan untouched) where a block cannot hold it or a
// weight the tensor cores take is beyond what fp16 halves hold.
int plan_hybrid_mma(LstmPlan& plan, const Model& model, Mode mode, int window, int max_np, const DeviceLimits& limits,
                    bool fp16_products) {
  LstmParams& p = plan.params;
  const int H = p.H, L = p.L, I = p.I;
  for (int l = 0; l < L; ++l) {
    const LstmLayer& ly = model.layers[size_t(l)];
    for (const double w : ly.w_hh)
      if (!(std::abs(w) < 32768.0)) return 0;
    if (l > 0)
      for (const double w : ly.w_ih)
        if (!(std::abs(w) < 32768.0)) return 0;
  }
  const int groups = (H + 3) / 4;
  const int G = (groups + max_np - 1) / max_np;
  const int U = 4 * G, np = (H + U - 1) / U, kt = (H + 15) / 16;
  const int nslots = mode == Mode::window ? std::max(1, window - 1) : 1;  // also the most windows a round advances
  const int ncols = (nslots + 7) / 8 * 8, kpad = fp16_products ? 8 * kt + 4 : 16 * kt + 8;
  const int fh = fp16_products ? 1 : 2;        // fragments a (tile, k step): hi, or hi and lo
  const int per_matrix = G * kt * fh * 32;  // uint4
  int f = 0, ih_off[kMaxLayers] = {}, hh_off[kMaxLayers] = {};
  for (int l = 0; l < L; ++l) {
    if (l > 0) ih_off[l] = f, f += per_matrix;
    hh_off[l] = f, f += per_matrix;
  }
  const int block_frags = f;
  const int pre_floats = (4 * U * I + L * 4 * U + 3) & ~3;
  int bytes = 0;
  auto take = [&](long long n) { return take_region(bytes, n); };
  const int s_pw = take(4LL * pre_floats), s_Q = take(4LL * L * nslots * 4 * U), s_pc = take(4LL * L * nslots * U);
  const int s_px = take(4LL * I), s_g0 = take(4LL * 4 * U), s_pflags = take(16), s_hyf = take(16LL * block_frags);
  const int s_hyb = take(4LL * ncols * kpad), s_hyz = take(4LL * ncols * 4 * U), s_hymb = take(8);
  if (bytes > limits.smem_per_block_optin || np > max_np) return 0;
  p.hy_mma = 1;
  p.U = U, p.np = np, p.nslots = nslots;
  p.pre_global = 0;
  plan.pre_state_floats = p.pre_state_floats = 0;
  p.pre_block_floats = pre_floats;
  p.pre_ih[0] = 0;
  for (int l = 0; l < L; ++l) p.pre_b[l] = 4 * U * I + l * 4 * U, p.hy_ih_off[l] = ih_off[l], p.hy_hh_off[l] = hh_off[l];
  p.hy_block_frags = block_frags, p.hy_kt = kt, p.hy_kpad = kpad, p.hy_ncols = ncols;
  p.hy_fp16 = fp16_products ? 1 : 0;
  p.hy_row_words = fp16_products ? (H + 7) / 8 * 4 : H;
  p.s_pw = s_pw, p.s_Q = s_Q, p.s_pc = s_pc, p.s_px = s_px, p.s_g0 = s_g0, p.s_pflags = s_pflags;
  p.s_hyf = s_hyf, p.s_hyb = s_hyb, p.s_hyz = s_hyz, p.s_hymb = s_hymb;
  plan.pre_w.assign(size_t(np) * pre_floats, 0.0f);
  plan.frags.assign(size_t(np) * block_frags * 4, 0u);
  std::vector<std::vector<double>> bias;
  for (int l = 0; l < L; ++l) bias.push_back(model.layers[size_t(l)].bias_sum(H));
  for (int b = 0; b < np; ++b) {
    float* w = &plan.pre_w[size_t(b) * pre_floats];
    uint32_t* fr = &plan.frags[size_t(b) * block_frags * 4];
    for (int u = 0; u < U; ++u) {
      const int unit = b * U + u;
      if (unit >= H) continue;
      for (int gate = 0; gate < 4; ++gate) {
        const size_t row = size_t(gate) * H + unit;
        for (int k = 0; k < I; ++k) w[(4 * u + gate) * I + k] = float(model.layers[0].w_ih[row * I + k]);
        for (int l = 0; l < L; ++l) w[p.pre_b[l] + 4 * u + gate] = float(bias[size_t(l)][row]);
      }
    }
    auto pack_matrix = [&](const std::vector<double>& m, int off) {
      for (int q = 0; q < G; ++q)
        for (int k = 0; k < kt; ++k)
          for (int half = 0; half < fh; ++half) {
            auto a = [&](int r, int c) -> uint16_t {
              const int unit = b * U + 4 * q + (r & 3), col = 16 * k + c;
              if (unit >= H || col >= H) return 0;
              const double v = m[(size_t(r >> 2) * H + unit) * H + col];
              const uint16_t hi = to_bits(v, false);
              return half == 0 ? hi : to_bits(v - double(from_bits(hi, false)), false);
            };
            pack_tile(a, fr + (size_t(off) + (size_t(q * kt + k) * fh + half) * 32) * 4);
          }
    };
    for (int l = 0; l < L; ++l) {
      if (l > 0) pack_matrix(model.layers[size_t(l)].w_ih, ih_off[l]);
      pack_matrix(model.layers[size_t(l)].w_hh, hh_off[l]);
    }
  }
  return bytes;
}

}  // namespace

LstmPlan plan_hybrid(const Model& model, Mode mode, int window, const MailboxOptions& mailbox, const DeviceLimits& limits,
                     int max_precompute_blocks, HybridForm form, bool fp16_products) {
  const ModelConfig& cfg = model.config;
  if (mode == Mode::batch) throw UnsupportedError("the hybrid backend serves window and streaming modes, not batch");
  if (mode == Mode::window && window < 1) throw Error("window mode needs a window >= 1");
  if (cfg.num_layers > kMaxLayers)
    throw UnsupportedError("the hybrid backend's precompute supports at most " + std::to_string(kMaxLayers) +
                           " layers, the model has " + std::to_string(cfg.num_layers));
  if (limits.sm_count < 2) throw UnsupportedError("the hybrid backend's precompute needs at least 2 SMs (one feeds the others)");
  LstmPlan plan;
  LstmParams& p = plan.params;
  plan_common(p, cfg, Precision::fp16, mode, window, mailbox);  // the shape and the input's chunks; no half weights
  const int max_np = max_precompute_blocks > 0 ? std::min(max_precompute_blocks, limits.sm_count - 1) : limits.sm_count - 1;
  if (form != HybridForm::fp32) {
    if (const int bytes = plan_hybrid_mma(plan, model, mode, window, max_np, limits, fp16_products)) {
      p.smem_bytes = bytes;
      return plan;
    }
    if (form == HybridForm::mma)
      throw UnsupportedError("the hybrid precompute's tensor-core form does not fit this model: over " +
                             std::to_string(max_np) + " blocks a block would need more than the " +
                             std::to_string(limits.smem_per_block_optin / 1024) +
                             " KiB of shared memory " + limits.name + " allows (or a weight is beyond fp16's range)");
  }
  p.smem_bytes = plan_precompute(plan, model, mode, window, max_np, limits, /*fill=*/true, /*exact=*/true);
  return plan;
}

LstmPlan plan_lstm(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                   const DeviceLimits& limits, int max_precompute_blocks) {
  const ModelConfig& cfg = model.config;
  check_servable(cfg, precision, mode, window);
  if (limits.sm_count < 2) throw UnsupportedError("the cuda kernel needs at least 2 SMs (one critical, one precompute)");
  LstmPlan plan;
  LstmParams& p = plan.params;
  plan_common(p, cfg, precision, mode, window, mailbox);
  const bool bf16 = p.bf16;
  const int I = p.I, L = p.L;
  p.family = KernelFamily::cta;
  p.compute_warps = std::min(p.groups, kMaxComputeWarps);

  // Poller warps; poll sets shrink until the block fits its thread budget.
  p.mb.poll_sets = fit_poll_sets(p.mb.n_in, mailbox.poll_sets, p.compute_warps + 1, kMaxBlockThreads);
  p.poll_warps = p.mb.poll_sets * ((p.mb.n_in + 31) / 32);
  if (p.threads() > kMaxBlockThreads)
    throw UnsupportedError("the cuda kernel's critical block would need " + std::to_string(p.threads()) +
                           " threads (input_size " + std::to_string(I) + "), more than its limit of " +
                           std::to_string(kMaxBlockThreads));

  // Critical fragments: layer l [groups][2 tiles][kt][32 lanes] uint4, then the head [2][kt][32]. Layer 0
  // may keep its first kreg tiles in registers (one group per warp), stored after the rest.
  p.kreg = 0;
  if (cta_critical_layout(p, 0, false) > limits.smem_per_block_optin && p.groups <= kMaxComputeWarps) {
    for (int k : kRegTileChoices)
      if (k <= p.kt[0] && cta_critical_layout(p, k, false) <= limits.smem_per_block_optin) {
        p.kreg = k;
        break;
      }
  }
  const int critical_bytes = cta_critical_layout(p, p.kreg, true);
  if (critical_bytes > limits.smem_per_block_optin)
    throw UnsupportedError("its critical-step weights (W_ih of every layer and the head, " +
                           std::string(precision_name(precision)) + ") need " + std::to_string(critical_bytes / 1024) +
                           " KiB of shared memory in one block, but " + limits.name + " allows " +
                           std::to_string(limits.smem_per_block_optin / 1024) +
                           " KiB per block (sharedMemPerBlockOptin), even with up to 64 KiB of W_ih,0 held in registers");
  int off = 0;
  for (int l = 0; l <= L; ++l) {
    p.frag_off[l] = off;
    off += (l < L ? p.groups : 1) * 2 * (p.kt[l] - (l == 0 ? p.kreg : 0)) * 32;
  }
  p.frag_total = off;
  p.reg_off = off;
  const size_t total = size_t(off) + size_t(p.groups) * 2 * p.kreg * 32;
  plan.frags.assign(total * 4, 0);
  for (int l = 0; l < L; ++l)
    for (int q = 0; q < p.groups; ++q)
      for (int m = 0; m < 2; ++m)
        for (int k = 0; k < p.kt[l]; ++k)
          pack_group_tile(plan.frags, frag_index(p, l, q, m, k), model, l, q, m, k, bf16, false);
  {
    const int kt = p.kt[L], O = p.O, H = p.H;
    for (int m = 0; m < 2; ++m)
      for (int k = 0; k < kt; ++k) {
        auto a = [&](int r, int c) -> uint16_t {
          const int row = m * 16 + r, col = k * 16 + c;
          if (row >= O || col >= H) return 0;
          return to_bits(model.head_w[size_t(row) * H + col], bf16);
        };
        pack_tile(a, &plan.frags[(size_t(p.frag_off[L]) + (m * kt + k) * 32) * 4]);
      }
  }
  plan.critical_weight_bytes = plan.frags.size() * 4;
  fill_head(plan, model);

  // Precompute: one block per SM beside the critical one.
  int max_np = limits.sm_count - 1;
  if (max_precompute_blocks > 0) max_np = std::min(max_np, max_precompute_blocks);
  const int precompute_bytes = plan_precompute(plan, model, mode, window, max_np, limits);
  p.smem_bytes = std::max(critical_bytes, precompute_bytes);
  return plan;
}

namespace {

// The grid's own precompute (GridPrecompute::in_critical): each block's W_hh fragments, its state's size,
// the biases; no precompute blocks.
void plan_own_precompute(LstmPlan& plan, const Model& model, Mode mode, int window) {
  LstmParams& p = plan.params;
  const int H = p.H, L = p.L, kt = p.kt[L], gpb = p.gpb, Ub = gpb * kUnitsPerGroup;
  p.grid_precompute = GridPrecompute::in_critical;
  p.np = 0;
  p.U = 0;
  p.pre_global = 0;
  p.pre_block_floats = 0;
  p.nslots = mode == Mode::window ? std::max(1, window - 1) : 1;
  p.own_state_floats = (L * p.nslots * 5 * Ub + 3) & ~3;  // Q [4 Ub] and c [Ub] per layer and window
  p.hh_block_frag = L * gpb * 2 * kt * 32;
  plan.pre_w.clear();
  plan.hh_frags.assign(size_t(p.nc) * p.hh_block_frag * 4, 0);
  for (int b = 0; b < p.nc; ++b)
    for (int l = 0; l < L; ++l)
      for (int ql = 0; ql < gpb; ++ql)
        for (int m = 0; m < 2; ++m)
          for (int k = 0; k < kt; ++k) {
            const size_t at = size_t(b) * p.hh_block_frag + ((size_t(l) * gpb + ql) * 2 + m) * kt * 32 + size_t(k) * 32;
            pack_gate_tile(plan.hh_frags, at, model.layers[l].w_hh, H, H, b * gpb + ql, m, k, p.bf16, true);
          }
  plan.own_bias.assign(size_t(L) * 4 * H, 0.0f);
  for (int l = 0; l < L; ++l) {
    const std::vector<double> bias = model.layers[l].bias_sum(H);
    for (int r = 0; r < 4 * H; ++r) plan.own_bias[size_t(l) * 4 * H + r] = float(bias[r]);
  }
}

// dry: the sizes and placement only (no weights packed), for the automatic precompute's choice.
// compute_warps: the most compute warps a block may have (0: as many as fit); reg_wgs > 0: tiles in
// registers, the compute warps exactly 4 x reg_wgs (the caller checks grid_register_tiles_misfit).
LstmPlan plan_grid_as(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                      const DeviceLimits& limits, int max_precompute_blocks, GridPrecompute precompute,
                      int compute_warps, int reg_wgs, bool dry) {
  const ModelConfig& cfg = model.config;
  check_servable(cfg, precision, mode, window);
  LstmPlan plan;
  LstmParams& p = plan.params;
  plan_common(p, cfg, precision, mode, window, mailbox);
  p.family = KernelFamily::grid;
  p.mb.poll_sets = 1;  // every critical block polls; one set each
  p.poll_warps = (p.mb.n_in + 31) / 32;
  auto compute_warps_in = [&](int threads) {
    return std::min(MultiBlockPolicy::max_compute_warps, threads / 32 - p.poll_warps - 1 - kGridCellWarps);
  };
  p.grid_wide = compute_warps_in(kGridBlockThreads) < MultiBlockPolicy::min_compute_warps ? 1 : 0;
  const int fit_compute = compute_warps_in(p.grid_block_threads());
  if (compute_warps > fit_compute)
    throw UnsupportedError(std::to_string(compute_warps) + " compute warps a block do not fit beside its " +
                           std::to_string(p.poll_warps) + " poller, cell and service warps (at most " +
                           std::to_string(fit_compute) + ")");
  const int max_compute = reg_wgs > 0 ? 4 * reg_wgs : compute_warps > 0 ? compute_warps : fit_compute;
  p.grid_reg_wgs = reg_wgs;
  // The widest input the mailbox carries (the layout refuses more) leaves the wide blocks compute warps.
  static_assert(kMaxBlockThreads / 32 - chunks_for(kMaxInputChunks, 32) - 1 - kGridCellWarps >= 1,
                "the pollers of the widest input leave a grid block of kMaxBlockThreads a compute warp");
  const int optin = limits.smem_per_block_optin;

  // Blocks and unit groups per block. Each group needs a compute warp; the rest split the k16 tiles.
  // The fewest layers left in L2 that let gpb groups fit (-1: none does): every layer in shared memory
  // where it fits; else the first layers' tiles are read from L2 each tick (a few hundred ns on layer 0).
  auto l2_layers_for = [&](int gpb) {
    if (gpb > max_compute) return -1;
    for (int l2 = 0; l2 <= p.L; ++l2)
      if (multi_critical_layout(p, gpb, max_compute / gpb, l2, false) <= optin) return l2;
    return -1;
  };
  int nc = 0, gpb = 0, l2_layers = 0;
  const bool own = precompute == GridPrecompute::in_critical;
  const int max_blocks = limits.sm_count - (own ? 0 : MultiBlockPolicy::min_precompute_blocks);
  for (int g = 1; g <= max_compute && !nc; ++g) {
    const int n = (p.groups + g - 1) / g;
    const int l2 = n <= max_blocks ? l2_layers_for(g) : -1;
    if (l2 >= 0) {
      nc = n;
      gpb = g;
      l2_layers = l2;
    }
  }
  if (!nc)
    throw UnsupportedError("its critical-step weights (" + std::to_string(critical_weight_bytes(cfg, true) / 1024) +
                           " KiB) do not fit the shared memory of " + std::to_string(std::max(1, max_blocks)) +
                           " blocks (" + std::to_string(optin / 1024) + " KiB each on " + limits.name +
                           (own ? std::string(")")
                                : ", " + std::to_string(MultiBlockPolicy::min_precompute_blocks) + " SMs kept for the precompute)"));
  p.nc = nc;
  p.gpb = gpb;
  p.ksplit = max_compute / gpb;
  p.compute_warps = gpb * p.ksplit;
  for (int l = 0; l < p.L; ++l) p.share_tiles[l] = ((p.kt[l] + p.ksplit - 1) / p.ksplit + 1) & ~1;
  const int critical_bytes = multi_critical_layout(p, gpb, p.ksplit, l2_layers, true);

  if (!dry) {
    pack_blocks(plan, model);
    plan.critical_weight_bytes = plan.frags.size() * 4;
    fill_head(plan, model);
  }

  if (own) {
    if (!dry) plan_own_precompute(plan, model, mode, window);
    p.smem_bytes = critical_bytes;
    return plan;
  }
  // Precompute on the SMs the critical blocks leave.
  int max_np = limits.sm_count - nc;
  if (max_precompute_blocks > 0) max_np = std::min(max_np, max_precompute_blocks);
  const int precompute_bytes = plan_precompute(plan, model, mode, window, max_np, limits, !dry);
  p.smem_bytes = std::max(critical_bytes, precompute_bytes);
  return plan;
}

}  // namespace

LstmPlan plan_grid(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                   const DeviceLimits& limits, int max_precompute_blocks, const GridPlanOptions& grid) {
  if (grid.compute_warps < 0 || grid.compute_warps > MultiBlockPolicy::max_compute_warps)
    throw UnsupportedError("grid compute warps are 1-" + std::to_string(MultiBlockPolicy::max_compute_warps) +
                           " (0: automatic), not " + std::to_string(grid.compute_warps));
  GridPrecompute precompute = grid.precompute;
  if (precompute == GridPrecompute::automatic) {
    // separate where its blocks read their weights quickly (shared memory, or few bytes a tick from global
    // memory), else in the critical blocks
    precompute = GridPrecompute::in_critical;
    try {
      const LstmPlan probe = plan_grid_as(model, precision, mode, window, mailbox, limits, max_precompute_blocks,
                                          GridPrecompute::separate, 0, 0, true);
      const LstmParams& q = probe.params;
      const double bytes = 4.0 * q.pre_block_floats * (q.window_mode ? q.nslots : 1);  // each window rereads them
      if (!q.pre_global || bytes / MultiBlockPolicy::separate_bytes_per_us <= MultiBlockPolicy::separate_max_us)
        precompute = GridPrecompute::separate;
    } catch (const UnsupportedError&) {
    }
  }
  // Tiles in registers: the instantiation with the most compute warps whose plan fits it.
  if (grid.tiles != GridTiles::shared) {
    std::string why;
    if (!limits.warpgroup_registers)
      why = std::string(limits.name) + " cannot move registers between warpgroups (setmaxnreg: Hopper, in a build for sm_90a)";
    for (int i = int(std::size(kGridRegWGChoices)) - 1; limits.warpgroup_registers && i >= 0; --i) {
      const GridRegWGChoice& c = kGridRegWGChoices[i];
      std::string no;
      if (grid.compute_warps > 0 && grid.compute_warps != 4 * c.wgs) {
        no = std::to_string(grid.compute_warps) + " were asked for";
      } else {
        try {
          const LstmPlan probe = plan_grid_as(model, precision, mode, window, mailbox, limits, max_precompute_blocks,
                                              precompute, 0, c.wgs, true);
          no = grid_register_tiles_misfit(probe.params);
        } catch (const UnsupportedError& e) {
          no = e.what();
        }
      }
      if (no.empty())
        return plan_grid_as(model, precision, mode, window, mailbox, limits, max_precompute_blocks, precompute, 0, c.wgs,
                            false);
      why += (why.empty() ? "" : "; ") + std::to_string(4 * c.wgs) + " compute warps: " + no;
    }
    if (grid.tiles == GridTiles::registers)
      throw UnsupportedError("the grid kernel cannot hold its tiles in registers here (" + why + ")");
  }
  return plan_grid_as(model, precision, mode, window, mailbox, limits, max_precompute_blocks, precompute,
                      grid.compute_warps, 0, false);
}

std::string grid_register_tiles_misfit(const LstmParams& p) {
  const GridRegWGChoice* choice = nullptr;
  for (const GridRegWGChoice& c : kGridRegWGChoices)
    if (c.wgs == p.grid_reg_wgs && c.threads == p.grid_block_threads()) choice = &c;
  if (!choice) return "no kernel instantiation for " + std::to_string(p.grid_reg_wgs) + " compute warpgroups in blocks of " +
                      std::to_string(p.grid_block_threads()) + " threads";
  if (p.compute_warps != 4 * choice->wgs)
    return std::to_string(p.gpb) + " unit groups a block do not split over " + std::to_string(4 * choice->wgs) + " warps";
  if (p.compute_warps + kGridCellWarps + p.poll_warps + 1 > choice->threads / 32)
    return "its " + std::to_string(p.poll_warps) + " pollers, cell and service warps do not fit the last warpgroups";
  for (int l = 0; l < p.L; ++l)
    if (p.share_tiles[l] > choice->tiles)
      return "layer " + std::to_string(l) + " gives a warp " + std::to_string(p.share_tiles[l]) + " k16 tiles, more than the " +
             std::to_string(choice->tiles) + " it holds";
  return "";
}

LstmPlan plan_cluster(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                      const DeviceLimits& limits, int max_precompute_blocks, int cluster_blocks) {
  const ModelConfig& cfg = model.config;
  check_servable(cfg, precision, mode, window);
  if (limits.max_cluster_size < ClusterPolicy::min_blocks)
    throw UnsupportedError(std::string(limits.name) + " cannot launch thread-block clusters");
  LstmPlan plan;
  LstmParams& p = plan.params;
  plan_common(p, cfg, precision, mode, window, mailbox);
  p.family = KernelFamily::cluster;
  p.mb.poll_sets = 1;
  p.poll_warps = 0;  // block 0's compute warps poll
  const int max_blocks = std::min(limits.max_cluster_size, ClusterPolicy::max_blocks);
  if (p.mb.n_in > 32 * ClusterPolicy::warps)
    throw UnsupportedError("its input (" + std::to_string(p.I) + " floats, " + std::to_string(p.mb.n_in) +
                           " chunks) needs more pollers than the " + std::to_string(ClusterPolicy::warps) +
                           " warps of block 0");
  if (cluster_blocks != 0 && (cluster_blocks < ClusterPolicy::min_blocks || cluster_blocks > max_blocks))
    throw UnsupportedError("a cluster of " + std::to_string(cluster_blocks) + " blocks: " + limits.name + " launches " +
                           std::to_string(ClusterPolicy::min_blocks) + " to " + std::to_string(max_blocks));
  // Unit groups per block (a power of two: the 16 warps are gpb groups x ksplit k-shares), fewest blocks
  // first: the first whose warps hold all their tiles in registers, else the most blocks that fit shared
  // memory (tiles beyond the registers read from it each tick); or the size asked for.
  const int optin = limits.smem_per_block_optin;
  int nc = 0, gpb = 0;
  std::string sizes;
  for (int g = ClusterPolicy::warps; g >= 1; g /= 2) {
    const int n = std::max(ClusterPolicy::min_blocks, (p.groups + g - 1) / g);
    if (n > max_blocks) continue;
    LstmParams trial = p;
    if (cluster_critical_layout(trial, n, g, true) > optin) continue;
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
    if (cluster_blocks != 0) {
      if (n == cluster_blocks && !nc) nc = n, gpb = g;
      continue;
    }
    if (trial.cl.slots <= ClusterPolicy::max_reg_slots) {
      nc = n, gpb = g;
      break;
    }
    nc = n, gpb = g;  // the most blocks so far: fewest tiles in shared memory
  }
  if (!nc) {
    if (cluster_blocks != 0)
      throw UnsupportedError("this model cannot be split over a cluster of " + std::to_string(cluster_blocks) +
                             " blocks (sizes that fit: " + (sizes.empty() ? std::string("none") : sizes) + ")");
    throw UnsupportedError("its critical-step weights (" + std::to_string(critical_weight_bytes(cfg, true) / 1024) +
                           " KiB) do not fit the registers and shared memory of a " + std::to_string(max_blocks) +
                           "-block cluster (" + std::to_string(optin / 1024) + " KiB of shared memory per block on " +
                           limits.name + ")");
  }
  const int critical_bytes = cluster_critical_layout(p, nc, gpb, true);
  pack_blocks(plan, model);
  plan.critical_weight_bytes = critical_weight_bytes(cfg, true);
  fill_head(plan, model);

  // Precompute on the clusters beside the critical one (the launch checks co-residency: clusters stay in
  // one GPC, so fewer may fit; the backend then plans again with the blocks that do).
  int max_np = std::max(nc, (limits.sm_count / nc - 1) * nc);
  if (max_precompute_blocks > 0) max_np = std::min(max_np, max_precompute_blocks);
  const int precompute_bytes = plan_precompute(plan, model, mode, window, max_np, limits);
  p.smem_bytes = std::max(critical_bytes, precompute_bytes);
  return plan;
}

long long grid_smem_weight_bytes(const LstmParams& p) { return 16LL * (p.block_frag - p.bfrag_off[p.grid_l2_layers]); }

GridEstimate grid_estimate(const LstmParams& p) {
  GridEstimate e;
  const int open = p.window_mode ? std::max(1, p.W - 1) : 1;  // windows a round advances
  const long long tiles = open == 1 ? 1 : (open + 3) / 4;    // n8 tiles (4 windows each) a unit group
  e.hh_bytes_per_block = tiles * p.gpb * p.L * 2LL * p.kt[p.L] * 512;  // 512 bytes a 16x16 fragment
  const double block_rate = std::min(MultiBlockPolicy::own_l2_bytes_per_us,
                                     p.compute_warps * MultiBlockPolicy::own_l2_bytes_per_us_per_warp);
  e.round_us = std::max(double(e.hh_bytes_per_block) / block_rate, p.L * MultiBlockPolicy::own_stage_us);
  e.answer_us = MultiBlockPolicy::answer_base_us + p.L * MultiBlockPolicy::answer_layer_us;
  e.ticks_per_s = 1e6 / (e.round_us + e.answer_us);
  return e;
}

size_t critical_weight_bytes(const ModelConfig& cfg, bool half) {
  size_t n = 0;
  for (int l = 0; l < cfg.num_layers; ++l) n += size_t(4) * cfg.hidden_size * cfg.layer_input_size(l);
  return n * (half ? 2 : 4);
}

void use_regs_variant(LstmPlan& plan) {
  LstmParams& p = plan.params;
  auto refuse = [&](const std::string& why) {
    throw UnsupportedError("cuda variant 'regs' (every W_ih in registers) cannot serve this model: " + why +
                           "; use the default variant 'smem'");
  };
  if (p.groups > kMaxComputeWarps || p.compute_warps != p.groups)
    refuse("hidden size " + std::to_string(p.H) + " > " + std::to_string(kMaxComputeWarps * kUnitsPerGroup) +
           " (one warp per 8 hidden units, 16 warps)");
  if (p.O > kRegsMaxOutputs)
    refuse("output size " + std::to_string(p.O) + " > " + std::to_string(kRegsMaxOutputs) + " (SIMT head)");
  if (p.mb.n_in > 32) refuse("input size " + std::to_string(p.I) + " needs more than 32 input chunks (one warp polls)");
  bool shape = false;
  for (const RegsShape& r : kRegsShapes)
    shape |= r.kt0 == p.kt[0] && r.layers == p.L && (p.L == 1 || r.kth == p.kt[1]);
  if (!shape) {
    std::string list;
    for (const RegsShape& r : kRegsShapes)
      list += (list.empty() ? "" : ", ") + std::string("(input<=") + std::to_string(16 * r.kt0) +
              (r.layers > 1 ? ", hidden<=" + std::to_string(16 * r.kth) : std::string()) + ", layers " +
              std::to_string(r.layers) + ")";
    refuse("no kernel compiled for input " + std::to_string(p.I) + ", hidden " + std::to_string(p.H) + ", " +
           std::to_string(p.L) + " layers (compiled: " + list + ")");
  }
  if (p.kreg != 0) refuse("its critical weights need registers for layer-0 tiles beyond the compiled shapes");
  // shared memory keeps layer 0's fragments, then the fp32 head weights and the partial sums
  if ((p.O * p.H + kMaxComputeWarps * kRegsMaxOutputs) * 4 > (p.frag_total - p.frag_off[1]) * 16)
    refuse("no room for the fp32 head weights");  // not reached for the compiled shapes
  p.variant = kVariantRegs;
  p.poll_warps = 0;
  p.mb.poll_sets = 1;
}

std::vector<double> emulate_fragments(const LstmPlan& plan, int layer, const std::vector<float>& x) {
  const LstmParams& p = plan.params;
  const bool head = layer == p.L;
  const bool bf16 = p.bf16;
  const int kt = p.kt[layer];
  const int groups = head ? 1 : p.groups;
  // B columns 0 and 1: hi and lo halves of x, as the kernel splits them.
  std::vector<double> bcol[2];
  bcol[0].assign(kt * 16, 0.0);
  bcol[1].assign(kt * 16, 0.0);
  for (size_t k = 0; k < x.size(); ++k) {
    const uint16_t hi = bf16 ? float_to_bf16(x[k]) : float_to_fp16(x[k]);
    const float hif = from_bits(hi, bf16);
    const uint16_t lo = bf16 ? float_to_bf16(x[k] - hif) : float_to_fp16(x[k] - hif);
    bcol[0][k] = hif;
    bcol[1][k] = from_bits(lo, bf16);
  }
  const int rows_out = head ? p.O : 4 * p.H;
  std::vector<double> y(rows_out, 0.0);
  for (int q = 0; q < groups; ++q)
    for (int m = 0; m < 2; ++m)
      for (int k = 0; k < kt; ++k) {
        const size_t at = head ? size_t(p.frag_off[layer]) + (m * kt + k) * 32 : frag_index(p, layer, q, m, k);
        const uint32_t* t = &plan.frags[at * 4];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, tt = lane & 3;
          const uint32_t* o = t + lane * 4;
          // (row, col) of each of the 8 halves this lane holds
          const int rr[8] = {g, g, g + 8, g + 8, g, g, g + 8, g + 8};
          const int cc[8] = {2 * tt, 2 * tt + 1, 2 * tt, 2 * tt + 1, 2 * tt + 8, 2 * tt + 9, 2 * tt + 8, 2 * tt + 9};
          for (int e = 0; e < 8; ++e) {
            const uint16_t bits = uint16_t(o[e / 2] >> (16 * (e & 1)));
            const double a = from_bits(bits, bf16);
            const int r = rr[e];
            const int col = !head && p.family == KernelFamily::grid ? grid_tile_col(k, cc[e]) : k * 16 + cc[e];
            const double v = a * (bcol[0][col] + bcol[1][col]);
            int out_row;
            if (head) {
              out_row = m * 16 + r;
            } else {
              const int unit = q * kUnitsPerGroup + (r & 7), gate = 2 * m + (r >> 3);
              out_row = unit < p.H ? gate * p.H + unit : rows_out;
            }
            if (out_row < rows_out) y[out_row] += v;
          }
        }
      }
  return y;
}

}  // namespace hotpath::cuda
