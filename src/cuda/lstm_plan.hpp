// Host-side planning for the persistent LSTM kernel: which blocks do what, the shared-memory layout,
// and the weights converted and packed the way the kernel reads them. Plain C++: built and unit-tested
// without a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/common/lstm_params.hpp"
#include "model/model.hpp"

namespace hotpath::cuda {

// What the plan needs to know about the device (queried at run time, never assumed).
struct DeviceLimits {
  int sm_count = 0;              // SMs a launch may use (the stream's context, not always the device's)
  int smem_per_block_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  int max_cluster_size = 0;      // largest thread-block cluster a launch may ask for (0: no clusters)
  // Registers move between a block's warpgroups (Hopper's setmaxnreg, in a build with its sm_90a code):
  // the grid family's tiles in registers (GridTiles) need it.
  bool warpgroup_registers = false;
  std::string name = "device";
};

// Tuned constants of the grid family, one place (the cluster family's: kernels/cluster/cluster_policy.hpp).
struct MultiBlockPolicy {
  // Compute warps per critical block (the others are pollers, the cell warp and the service warp): enough to
  // split one group's k16 tiles 16 ways when a block holds one group (lstm_l, 64 tiles a layer).
  static constexpr int max_compute_warps = 16;
  // Fewer compute warps than this in a block of kGridBlockThreads (a wide input's pollers take the rest):
  // the plan takes the wider blocks (LstmParams::grid_wide; H200, vollo_large streaming with 5 compute
  // warps: 19.8-20.0 us p50 against 18.0 with 9, 2026-12-04).
  static constexpr int min_compute_warps = 8;
  // SMs the grid family leaves to the precompute at least.
  static constexpr int min_precompute_blocks = 4;
  // The automatic placement of the grid's precompute (GridPrecompute::automatic): separate blocks whose
  // weights stream from global memory read them at ~40 GB/s each (H200: 44-50 GB/s measured on lstm_l and
  // vollo_large streaming, fp32 weights, every window's rows reread); where that takes longer than
  // 50 us a tick the critical blocks do it instead (their round: 42-110 us on the big models, 2026-12-03).
  static constexpr double separate_bytes_per_us = 40e3;
  static constexpr double separate_max_us = 50;
  // The grid's own precompute and answer, for `info`'s estimate (grid_estimate), from the H200 runs of
  // 2026-12-03 and -04 (BENCHMARKS.md, "tagged words", "the grid kernel's parts"): a block streams its W_hh
  // fragments from L2 at ~2.7 GB/s a compute warp up to ~32 GB/s (13-16 warps: lstm_l 3.4 MB a round in
  // 108 us, nv_large 6.0 MB in 178, stac_c 6.5 MB in 209; 9 warps: nv_large in 234, stac_c in 273); a
  // stage with one window open takes ~5.5 us (streaming rounds: 14-23 us over 3-4 stages); the answer
  // ~3.5 us of host round trip and input hand-on plus ~2.0 us a layer (with the cell warp, BENCHMARKS.md
  // "the grid kernel's cell warp": lstm_l 11.2 us, nv_large 13.8).
  static constexpr double own_l2_bytes_per_us_per_warp = 2.7e3;
  static constexpr double own_l2_bytes_per_us = 32e3;
  static constexpr double own_stage_us = 5.5;
  static constexpr double answer_base_us = 3.5;
  static constexpr double answer_layer_us = 2.0;
};

struct LstmPlan {
  LstmParams params;               // device pointers left null
  std::vector<uint32_t> frags;     // params.frag_total x 4 words (uint4 each)
  std::vector<float> head_b;       // [O]
  std::vector<float> head_w;       // [O][H] head weights rounded to the precision, as fp32 (variant regs)
  std::vector<float> pre_w;        // np x pre_block_floats
  std::vector<uint32_t> hh_frags;  // grid, own precompute: nc x hh_block_frag x 4 words (LstmParams::hh_frags)
  std::vector<float> own_bias;     // grid, own precompute: [L][4H]
  size_t critical_weight_bytes = 0;
  int pre_state_floats = 0;        // > 0: each precompute block's window state lives in global memory
};

// Throws UnsupportedError naming the limit when the model cannot be served by one critical block.
// max_precompute_blocks <= 0: as many as the device allows (one per SM beside the critical block).
LstmPlan plan_lstm(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                   const DeviceLimits& limits, int max_precompute_blocks = 0);

// The hybrid backend's GPU half (kernels/hybrid/): the precompute blocks alone, over max_precompute_blocks SMs
// (<= 0: all but the feeder's), in one of two forms: fp32 (the tick kernels' own precompute blocks, exact fp32
// weights, a warp's dot products per window and unit) or mma (LstmParams::hy_*: each layer's products of all
// open windows on the tensor cores, both operands as fp16 hi + lo halves: near fp32). automatic: mma where a
// block can hold it, else fp32. Throws UnsupportedError naming the limit (layers, SMs, shared memory, a too
// wide input, mma asked where it does not fit).
enum class HybridForm { automatic, fp32, mma };
// Variants of the hybrid precompute's kernel, to compare them side by side (docs/hybrid.md,
// HOTPATH_HYBRID_TUNE); LstmParams' hy_stage_rows, hy_round_fence, hy_release_barrier, hy_cluster, hy_stage_tma. The defaults
// are the variants that measured fastest together (docs/hybrid.md); each field's other value is the earlier form.
struct HybridTuning {
  static constexpr int kMaxStageRows = kMaxHybridStageRows;
  static constexpr int kMaxStageCluster = kMaxHybridStageCluster;
  int stage_rows = 4;           // mma form: the open windows' rows a warp stages at a time (1..kMaxStageRows)
  bool round_fence = true;      // the publish: a gpu-scope fence a block, one system-scope fence a round
                                // (false: a system-scope fence a block)
  bool release_barrier = true;  // the grid barrier: arrival as one red.release, the wait an acquire, no fences
  bool input_mirror = true;     // mma form: the blocks poll the feeder's copy of the input chunks themselves
  bool last_whole = false;      // mma form: the last pass whole before the publish (default: the completing
                                // window's tile first, the other windows' after the publish)
  // mma form: blocks of a thread-block cluster of this many share the staging of h (1, 2, 4 or 8): each reads
  // its share of the rows from L2 and writes the words into every block of its cluster. 1 where the blocks do
  // not split into whole clusters of that size.
  int stage_cluster = 1;
  // mma form: a block stages the rows by bulk copies (the copy engine, one a row; false: its warps' loads);
  // not where a row is not whole 16 bytes (exact products with H not a multiple of 4) or the staging is shared
  // over clusters.
  bool stage_tma = true;
  // mma form: the products' operands plain fp16, one mma a tile (LstmParams::hy_fp16); false: hi + lo halves,
  // near fp32 (docs/hybrid.md, `products`).
  bool fp16_products = false;
  // the precompute blocks at most (0: one on every SM but the feeder's): fewer blocks of more units each, fewer
  // SMs staging every row and meeting at each barrier, more products a block.
  int max_blocks = 0;
};
// fp16_products (mma form): the products' operands plain fp16, one mma a tile (LstmParams::hy_fp16); for a
// consumer that rounds coarser itself (the hybrid's bf16 and int8 critical steps).
LstmPlan plan_hybrid(const Model& model, Mode mode, int window, const MailboxOptions& mailbox, const DeviceLimits& limits,
                     int max_precompute_blocks = 0, HybridForm form = HybridForm::automatic, bool fp16_products = false);

// The cluster family: the critical step over the blocks of one thread-block cluster, split by hidden
// units, the W_ih tiles in registers (ClusterLayout). cluster_blocks: the cluster's size (0: the fewest
// blocks whose warps hold every tile in registers). Throws UnsupportedError naming the limit.
LstmPlan plan_cluster(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                      const DeviceLimits& limits, int max_precompute_blocks = 0, int cluster_blocks = 0);
// The grid family's choices (CudaOptions' grid_* fields): where the precompute runs (on precompute blocks
// beside the critical ones, or in the critical blocks between ticks: max_precompute_blocks then does not
// apply), where the compute warps read their tiles, and how many compute warps a block has (0: the most
// that fit; with tiles in registers a multiple of 4, kGridRegWGChoices).
struct GridPlanOptions {
  GridPrecompute precompute = GridPrecompute::automatic;
  GridTiles tiles = GridTiles::automatic;
  int compute_warps = 0;
  GridPlanOptions() = default;
  GridPlanOptions(GridPrecompute pre) : precompute(pre) {}  // NOLINT: a precompute alone is a whole choice
};
// The grid family: the same split over many blocks, exchanging through L2. Throws UnsupportedError.
LstmPlan plan_grid(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                   const DeviceLimits& limits, int max_precompute_blocks = 0, const GridPlanOptions& grid = {});

// Grid family, tiles in registers (LstmParams::grid_reg_wgs > 0): why no kernel instantiation serves the
// plan (kGridRegWGChoices: its block size, its compute warps, every layer's k-share within the tiles a warp
// holds), or "" when one does.
std::string grid_register_tiles_misfit(const LstmParams& p);
// Grid family: bytes of W_ih fragments a critical block holds in shared memory (the layers not left in
// L2, LstmParams::grid_l2_layers).
long long grid_smem_weight_bytes(const LstmParams& p);
// What a grid plan with its precompute in the critical blocks should sustain (MultiBlockPolicy's measured
// rates; an estimate within ~30 % on the H200, the benchmark measures it): a round's W_hh bytes a block
// (every n8 tile of open windows rereads its rows), the round, the answer, ticks a second.
struct GridEstimate {
  long long hh_bytes_per_block = 0;
  double round_us = 0, answer_us = 0, ticks_per_s = 0;
};
GridEstimate grid_estimate(const LstmParams& p);

// Bytes of the critical-step weights (W_ih of every layer) at 16 bits (half) or 32.
size_t critical_weight_bytes(const ModelConfig& cfg, bool half);

// Switches a plan to the critical-step variant "regs" (kVariantRegs: every W_ih fragment in registers,
// no poller/service warps). Throws UnsupportedError naming why when the model is outside what that
// kernel was compiled for (kRegsShapes, O <= kRegsMaxOutputs, H <= 128, input <= 32 chunks).
void use_regs_variant(LstmPlan& plan);

// Host emulation of one critical-block gate row as the tensor cores compute it from the packed
// fragments (documented m16n8k16 layout), for tests: gate pre-activations W_ih,l . x (no P), in the
// original PyTorch row order [4H]. x is split into hi+lo halves as the kernel does.
std::vector<double> emulate_fragments(const LstmPlan& plan, int layer, const std::vector<float>& x);

// The weight value the kernel uses for w at this precision (rounded to nearest even).
float round_weight(double w, bool bf16);

}  // namespace hotpath::cuda
