#include "cuda/lstm_plan.hpp"

#include <algorithm>
#include <cstring>

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

LstmPlan plan_lstm(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                   const DeviceLimits& limits, int max_precompute_blocks) {
  const ModelConfig& cfg = model.config;
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
  if (limits.sm_count < 2) throw UnsupportedError("the cuda kernel needs at least 2 SMs (one critical, one precompute)");

  const bool bf16 = precision == Precision::bf16;
  const int I = cfg.input_size, H = cfg.hidden_size, L = cfg.num_layers, O = cfg.output_size;

  LstmPlan plan;
  LstmParams& p = plan.params;
  p.I = I; p.H = H; p.L = L; p.O = O;
  p.window_mode = mode == Mode::window;
  p.W = mode == Mode::window ? window : 1;
  p.bf16 = bf16;
  p.groups = (H + kUnitsPerGroup - 1) / kUnitsPerGroup;
  p.compute_warps = std::min(p.groups, kMaxComputeWarps);

  // Input chunks, poller warps; poll sets shrink until the block fits its register budget.
  p.mb.in_fpc = mailbox.dual_seq_input ? 2 : 3;
  p.mb.in_dual = mailbox.dual_seq_input;
  p.mb.n_in = chunks_for(I, p.mb.in_fpc);
  p.mb.in_stride = (p.mb.n_in + 3) & ~3;
  p.mb.n_out = chunks_for(O, kOutFloatsPerChunk);
  int poll_sets = mailbox.poll_sets;
  const int warps_per_set = (p.mb.n_in + 31) / 32;
  poll_sets = std::max(1, poll_sets);
  while (poll_sets > 1 && 32 * (p.compute_warps + poll_sets * warps_per_set + 1) > kMaxBlockThreads) --poll_sets;
  p.mb.poll_sets = poll_sets;
  p.poll_warps = poll_sets * warps_per_set;
  if (p.threads() > kMaxBlockThreads)
    throw UnsupportedError("the cuda kernel's critical block would need " + std::to_string(p.threads()) +
                           " threads (input_size " + std::to_string(I) + "), more than its limit of " +
                           std::to_string(kMaxBlockThreads));

  // ---- critical fragments: layer l [groups][2 tiles][kt][32 lanes] uint4, then the head [2][kt][32].
  // Layer 0 may keep its first kreg tiles in registers (one group per warp), stored after the rest.
  for (int l = 0; l <= L; ++l) {
    const int K = l == 0 ? I : H;
    p.kt[l] = ((K + 15) / 16 + 1) & ~1;  // even: the kernel runs two accumulator chains
  }
  auto critical_smem = [&](int kreg) {
    int tiles = p.groups * 2 * (p.kt[0] - kreg);
    for (int l = 1; l < L; ++l) tiles += p.groups * 2 * p.kt[l];
    tiles += 2 * p.kt[L];
    int xin_stride = 0;
    for (int l = 0; l <= L; ++l) xin_stride = std::max(xin_stride, p.kt[l] * 16);
    auto a16 = [](int b) { return (b + 15) & ~15; };
    return a16(tiles * 512) + a16((L + 1) * 2 * xin_stride * 2) + a16(p.mb.n_in * 12) + 2 * a16(p.mb.n_in * 4) +
           a16(L * 4 * H * 4) + a16(L * H * 4) + a16(kMaxOutputs * 4) + 32;
  };
  p.kreg = 0;
  if (critical_smem(0) > limits.smem_per_block_optin && p.groups <= kMaxComputeWarps) {
    for (int k : kRegTileChoices)
      if (k <= p.kt[0] && critical_smem(k) <= limits.smem_per_block_optin) {
        p.kreg = k;
        break;
      }
  }
  int off = 0;
  for (int l = 0; l <= L; ++l) {
    p.frag_off[l] = off;
    off += (l < L ? p.groups : 1) * 2 * (p.kt[l] - (l == 0 ? p.kreg : 0)) * 32;
  }
  p.frag_total = off;
  p.reg_off = off;
  const size_t total = size_t(off) + size_t(p.groups) * 2 * p.kreg * 32;
  plan.frags.assign(total * 4, 0);
  for (int l = 0; l < L; ++l) {
    const int K = cfg.layer_input_size(l), kt = p.kt[l];
    const int kr = l == 0 ? p.kreg : 0;
    const auto& w = model.layers[l].w_ih;
    for (int q = 0; q < p.groups; ++q)
      for (int m = 0; m < 2; ++m)
        for (int k = 0; k < kt; ++k) {
          // tile m=0: rows 0-7 gate i, rows 8-15 gate f of units 8q..8q+7; m=1: gates g and o. The lane
          // holding rows g and g+8 of both tiles then has all four gates of unit 8q+g.
          auto a = [&](int r, int c) -> uint16_t {
            const int unit = q * kUnitsPerGroup + (r & 7), gate = 2 * m + (r >> 3), col = k * 16 + c;
            if (unit >= H || col >= K) return 0;
            return to_bits(w[size_t(gate * H + unit) * K + col], bf16);
          };
          const size_t at = k < kr ? size_t(p.reg_off) + ((q * 2 + m) * kr + k) * 32
                                   : size_t(p.frag_off[l]) + ((q * 2 + m) * (kt - kr) + (k - kr)) * 32;
          pack_tile(a, &plan.frags[at * 4]);
        }
  }
  {
    const int kt = p.kt[L];
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
  plan.head_w.assign(size_t(O) * H, 0.0f);
  for (size_t i = 0; i < plan.head_w.size() && i < model.head_w.size(); ++i)
    plan.head_w[i] = round_weight(model.head_w[i], bf16);
  plan.head_b.assign(O, 0.0f);
  for (int o = 0; o < O && !model.head_b.empty(); ++o) plan.head_b[o] = float(model.head_b[o]);

  // ---- precompute split: U hidden units per block, one block per SM beside the critical one
  int max_np = limits.sm_count - 1;
  if (max_precompute_blocks > 0) max_np = std::min(max_np, max_precompute_blocks);
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
          for (int k = 0; k < K; ++k) dst[p.pre_ih[l] + r * K + k] = round_weight(ly.w_ih[size_t(row) * K + k], bf16);
          for (int k = 0; k < H; ++k) dst[p.pre_hh[l] + r * H + k] = round_weight(ly.w_hh[size_t(row) * H + k], bf16);
          dst[p.pre_b[l] + r] = float(bias[row]);
        }
      }
    }
  }

  // ---- shared memory layout
  int s = 0;
  auto take = [&](int bytes) { const int at = s; s = align16(s + bytes); return at; };
  p.xin_stride = 0;
  for (int l = 0; l <= L; ++l) p.xin_stride = std::max(p.xin_stride, p.kt[l] * 16);
  p.s_frags = take(p.frag_total * 16);
  p.s_xin = take((L + 1) * 2 * p.xin_stride * 2);
  p.s_x32 = take(p.mb.n_in * 3 * 4);
  p.s_seqw = take(p.mb.n_in * 4);
  p.s_claim = take(p.mb.n_in * 4);
  p.s_P = take(L * 4 * H * 4);
  p.s_c = take(L * H * 4);
  p.s_z = take(kMaxOutputs * 4);
  p.s_flags = take(32);  // dev::CtaFlags
  const int critical_bytes = s;
  s = 0;
  p.s_pw = take(p.pre_block_floats * 4);
  p.s_Q = take(L * p.nslots * 4 * p.U * 4);
  p.s_pc = take(L * p.nslots * p.U * 4);
  p.s_px = take(I * 4);
  p.s_g0 = take(4 * p.U * 4);
  p.s_pflags = take(16);
  const int precompute_bytes = s;
  p.smem_bytes = std::max(critical_bytes, precompute_bytes);
  if (critical_bytes > limits.smem_per_block_optin)
    throw UnsupportedError("model does not fit the cuda kernel: its critical-step weights (W_ih of every layer and the "
                           "head, " + std::string(precision_name(precision)) + ") take " +
                           std::to_string(plan.critical_weight_bytes / 1024) + " KiB and the critical block needs " +
                           std::to_string(critical_bytes / 1024) + " KiB of shared memory, but " + limits.name +
                           " allows " + std::to_string(limits.smem_per_block_optin / 1024) +
                           " KiB per block (sharedMemPerBlockOptin), even with up to 64 KiB of W_ih,0 held in registers");
  if (precompute_bytes > limits.smem_per_block_optin)
    throw UnsupportedError("model does not fit the cuda kernel: a precompute block needs " +
                           std::to_string(precompute_bytes / 1024) + " KiB of shared memory (window " +
                           std::to_string(window) + "), but " + limits.name + " allows " +
                           std::to_string(limits.smem_per_block_optin / 1024) + " KiB per block");
  return plan;
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
        const int kr = layer == 0 ? p.kreg : 0;
        const size_t at = k < kr ? size_t(p.reg_off) + ((q * 2 + m) * kr + k) * 32
                                 : size_t(p.frag_off[layer]) + ((q * 2 + m) * (kt - kr) + (k - kr)) * 32;
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
            const int r = rr[e], col = k * 16 + cc[e];
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
