// Parameters of the persistent LSTM kernel family (common to every family: cta/, cluster/, grid/), visible to plain C++.
//
// One launch, cooperative (all blocks co-resident): block 0 is the critical block, blocks 1..np run
// the precompute. Block 0 holds W_ih of every layer and the head in shared memory as tensor-core
// fragments and answers each tick with (P_l, c_l) of the completing window prefetched; the precompute
// blocks own all recurrent state (the W-1 open windows, or the single streaming state) and publish
// P_l = W_hh,l h_l + b_l and c_l of the window that completes next.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common/cycle_histogram.hpp"
#include "cuda/kernels/common/mailbox_layout.hpp"

namespace hotpath::cuda {

inline constexpr int kMaxLayers = 8;
inline constexpr int kMaxOutputs = 32;      // one warp's two 16-row head tiles
inline constexpr int kMaxComputeWarps = 16;
inline constexpr int kMaxBlockThreads = 640;  // __launch_bounds__: 102 registers a thread at 1 block/SM
// The grid kernel's blocks: at most 4 warps on each of an SM's 4 schedulers, so each thread may hold 128
// registers (a quarter of the register file over 4 warps) and the kernel spills none; at 640 threads (96
// registers) it spills, and with shared memory near its limit L1 keeps no room for the spills. A wide
// input's pollers would leave too few compute warps in 512 threads: such a plan takes the 640-thread
// instantiation (LstmParams::grid_wide).
inline constexpr int kGridBlockThreads = 512;
inline constexpr int kUnitsPerGroup = 8;    // a warp's 2 m16 tiles = 8 hidden units x 4 gates
// The grid kernel's cell warp: a warp of its own runs every layer's cells (adds the compute warps' k-share
// sums, updates c and h, sends h) while the compute warps wait, so none of them polls the next layer's
// words before its block's own are sent (docs/cuda.md, "The grid kernel's cell warp").
inline constexpr int kGridCellWarps = 1;
// kernel instantiations of kreg besides 0 (8 spills at the 96-register cap: 100 B stores, 140 B loads)
inline constexpr int kRegTileChoices[] = {4};

// Critical-step variants (LstmParams::variant).
//   0 "smem" (default): W_ih fragments in shared memory, head on the tensor cores (one warp).
//   1 "regs": every W_ih fragment in registers for the life of the kernel (one unit group per warp),
//      the layer input as pre-swizzled B fragments (one LDS.128 per two k16 tiles), the head as fp32
//      SIMT partial dot products folded into the last layer's cell update (one barrier, then warp 0
//      adds 16 partials). Compiled for the shapes below only (k16 tiles of layer 0, of the hidden
//      layers, layers); register budget: 8 x (kt0 + (L-1) x kth) <= 80 per thread.
enum CriticalVariant : int { kVariantSmem = 0, kVariantRegs = 1 };
struct RegsShape {
  int kt0, kth, layers;
};
// The shapes the regs kernel is compiled for (cta/lstm_cta.cu instantiates exactly these).
inline constexpr RegsShape kRegsShapes[] = {{2, 8, 2}, {2, 4, 3}, {2, 2, 1}};
// The regs block is compute warps only (warp 0 polls the input and watches the lease, warp 1 forwards
// x_t): <= 16 warps keep <= 4 warps per SM sub-partition, so a thread may hold 128 registers (with 17-18
// warps the cap is 96 and the 80 fragment registers spill).
inline constexpr int kRegsMaxThreads = 512;
inline constexpr int kRegsMaxOutputs = 4;

// Kernel families (LstmParams::family, and what --kernel names): where the critical step runs.
//   cta:     block 0 alone (the variants above).
//   cluster: blocks [0, nc) form one thread-block cluster (kernels/cluster/lstm_cluster.cu); block b owns
//            hidden units [b*Ub, b*Ub+Ub) of every layer, their W_ih rows in its warps' registers. Block 0
//            alone polls the input and hands it to every block; every value crosses blocks as a tagged
//            word stored into the consumer's shared memory (kernels/common/tagged_words.cuh).
//   grid:    the same split over many blocks (up to most SMs), the slices and flags in global memory (L2),
//            every critical block polling the input itself (kernels/grid/lstm_grid.cu).
enum class KernelFamily : int { cta, cluster, grid };

// The cluster family's layout (plan_cluster in cuda/lstm_plan.cpp; the kernel reads it). Warp w of a
// critical block serves unit group q = w / ksplit of the block and k-share ks = w % ksplit: of layer l it
// holds the k16 tiles [ks * tiles[l], ks * tiles[l] + tiles[l]) (clipped to kt[l]), at slots
// [first[l], first[l] + tiles[l]) of its list; slots [0, regs) live in registers for the life of the
// kernel, the rest in shared memory.
struct ClusterLayout {
  int tiles[kMaxLayers] = {};
  int first[kMaxLayers] = {};
  int slots = 0;     // tiles in a warp's list, all layers
  int regs = 0;      // register slots: the kernel instantiation (ClusterPolicy::reg_slots)
  int h_words = 0;   // words of a hidden layer's input buffer (kt[1] * 16)
  int h_valid = 0;   // of those, the ones a block writes (nc * gpb * 8 units); beyond: zero, never written
  // shared memory (bytes): tagged input words [kt[0] * 16], hidden input words [L-1][h_words], head
  // partials [nc * gpb][O] (block 0), per-block timing sums [kClusterStatSlots]
  int s_tx = 0, s_th = 0, s_thead = 0, s_stats = 0;
  // The other exchange (async_exchange = 1): untagged 4-byte words (hi | lo halves) stored by st.async,
  // each layer's bytes counted on an mbarrier per (layer, tick parity): input words [kt[0] * 16], hidden
  // words [L-1][h_words], head partials [nc * gpb][O] (fp32), mbarriers [L + 1][2]
  int async_exchange = 0;
  int s_xw = 0, s_hx = 0, s_headf = 0, s_bar = 0;
};

// The per-block timing sums of a cluster launch (SharedWords::cl_sum[block]): [0] the input's arrival in
// this block after block 0 saw the whole of it (globaltimer ns), [1] ticks timed; per layer l, at
// 2 + kClusterLayerStats * l + part, SM cycles of the layer's chain as warp 0 (the cell warp of group 0)
// lives it: waiting for its first tile's words (from the previous layer's end; layer 0: not counted,
// the input's arrival is [0]), its tiles (from those words to its gate sums, later tiles' words
// included), the group meeting (the barrier: the other k-share warps' tiles), the cell, the sends; and the
// group's last k-share warp: its wait and its tiles (up to its arrival at the barrier).
enum ClusterLayerStat : int { kClWait, kClTiles, kClMeet, kClCell, kClSend, kClShareWait, kClShareTiles, kClusterLayerStats };
inline constexpr int kClusterStatSlots = 2 + kClusterLayerStats * kMaxLayers;
inline constexpr int kMaxClusterBlocks = 16;

// The grid kernel's parts of a tick, per critical block (LstmParams::grid_stats: [nc][kGridStatSlots]):
// [0] ticks timed; per layer l (l = L: the head), at 1 + kGridLayerStats * l + part, SM cycles summed over
// the ticks, each from the block's start of the tick (its compute warps past the input barrier, the input
// in shared memory): the first and the last compute warp holding its words of the layer's input (layer 0:
// the input, already there; the head: block 0's warps holding every block's partial sums), the last
// warp's gate sums done, the k-shares met (the barrier passed), the cell warp's sums added and its cells
// run, and the layer's output sent (the head: the block's partial sums sent; block 0: the answer stored).
// Read on the host as differences of means. The SM clocks of one block's warps can disagree by a few
// hundred cycles, so layers l >= 1 also have spans that each compute warp times on its own clock, averaged
// and maxed over the block's warps: its wait (from passing the cells' barrier of layer l-1 to holding its
// words of layer l) and its tiles (from its words to its gate sums stored); and how many rounds of loads
// its slowest lane sent for its words (tagged words: one when they were there at the first look), in
// hundredths, averaged and maxed over the warps.
enum GridLayerStat : int {
  kGrWordsFirst, kGrWordsLast, kGrTilesLast, kGrMeet, kGrSums, kGrCell, kGrSent,
  kGrWarpWaitMean, kGrWarpWaitMax, kGrWarpTilesMean, kGrWarpTilesMax, kGrWarpPolls, kGrWarpPollsMax, kGridLayerStats
};
// Their names in counters() (grid_layer<l>_<name>_cycles_mean, ..._max_block; the poll rounds without
// "_cycles", as rounds), in GridLayerStat's order.
inline constexpr const char* kGridLayerStatNames[kGridLayerStats] = {
    "words_first", "words_last", "tiles_last", "meet", "sums", "cell", "sent", "warp_wait_mean", "warp_wait_max",
    "warp_tiles_mean", "warp_tiles_max", "warp_polls", "warp_polls_max"};
inline constexpr bool grid_stat_in_cycles(int stat) { return stat < kGrWarpPolls; }
// Each compute warp's marks of a layer (GridMarks): its words taken, its gate sums done, its wait begun
// (clocks), its poll rounds (a count).
inline constexpr int kGridWarpMarks = 4;
inline constexpr int kGridStatSlots = 1 + kGridLayerStats * (kMaxLayers + 1);

// The precompute's parts of a round (SharedWords::pre_sum): rounds timed, then SM cycles from the
// input's arrival: layer 0 (W_ih,0 x and the cells), waits at the precompute's barriers, the GEMVs of
// layers 1..L (gates and the next round's recurrent terms), the publish, and the whole round. Then, the
// hybrid's mma block only (kPreMmaParts on), its layers' passes split: staging the h, the products, the
// cells (as its thread 0 lives them; the other threads' share of the cells lands in the barrier's wait), and
// the work left until after the publish (the last pass's other windows; "round" ends at the publish).
enum PrecomputeStat : int {
  kPreRounds, kPreLayer0, kPreBarrier, kPreLayers, kPrePublish, kPreTotal,
  kPreStage, kPreMma, kPreCells, kPreDeferred, kPrecomputeStats
};
inline constexpr int kPreMmaParts = kPreStage;  // the first of the mma block's own parts
// Their names in the backends' counters (<prefix><name>_cycles_mean).
inline constexpr const char* kPrecomputeStatNames[kPrecomputeStats] = {
    "rounds", "layer0", "barrier_wait", "layers", "publish", "round", "layers_stage", "layers_mma", "layers_cells",
    "deferred"};

// The grid family's exchange (LstmParams::grid_exchange, CudaOptions::grid_exchange):
//   flags:    every critical block polls the input itself; a block publishes each layer's h slice with
//             its own flag word, and a consumer polls all nc flags.
//   counters: block 0 alone polls the input and passes it on through L2 with one flag word; a block
//             publishes a slice by adding 1 to the layer's arrival counter (its own 128-byte line), and a
//             consumer polls that one word.
//   tagged:   block 0 alone polls the input; every value crossing blocks (the input, each unit's h, each
//             block's head partial sums) is a tagged word in L2 (tagged_words.cuh, grid_words) that the
//             consumers spin on: no fence, counter or copy after the wait.
enum class GridExchange : int { flags, counters, tagged };
inline const char* grid_exchange_name(GridExchange e) {
  return e == GridExchange::tagged ? "tagged" : e == GridExchange::counters ? "counters" : "flags";
}
// Where the grid family's precompute runs (LstmParams::grid_precompute, CudaOptions::grid_precompute):
//   separate:    on precompute blocks beside the critical ones (precompute.cuh, fp32 SIMT), as the cta
//                and cluster families do.
//   in_critical: every critical block advances the open windows of its own units between ticks, on the
//                tensor cores: W_ih,l from the fragments it already holds, W_hh,l from L2 (lstm_grid.cu,
//                "the grid's own precompute"); no SM is set aside.
//   automatic:   separate where the precompute blocks hold their weights in shared memory or read them
//                from global memory quickly enough (MultiBlockPolicy::separate_max_us), else in_critical
//                (H200, BENCHMARKS.md: vollo_med streaming 35.9 k vs 14.1 k ticks/s, 0.3 MB a precompute
//                block a tick; lstm_l window 53 vs 5.6 k, vollo_large streaming 5.5 k vs 8.8 k).
//                A plan holds separate or in_critical, never automatic.
enum class GridPrecompute : int { separate, in_critical, automatic };

// Where the grid family's compute warps read their W_ih tiles in a tick (CudaOptions::grid_tiles):
//   shared:    from shared memory (or L2, for the layers there) as each tile's MMAs run: ~1,000 cycles a
//              hidden layer of lstm_l or stac_c on the H200, the whole block's 64 KiB a layer at shared
//              memory's bandwidth after the words arrive.
//   registers: each compute warp loads its share of the next layer's tiles into registers before that
//              layer's words arrive (layer 0's before the input does), so only the input's B values are
//              read once the words are there. The tiles need registers the compute warps lack at 128 a
//              thread, so the compute warps fill whole warpgroups and take registers from the others'
//              (Hopper's setmaxnreg; grid_warpgroup_registers).
//   automatic: registers where the plan allows it (lstm_plan.hpp, grid_register_tiles_misfit), else shared.
//              A plan holds shared or registers (LstmParams::grid_reg_wgs), never automatic.
enum class GridTiles : int { automatic, registers, shared };
inline const char* grid_tiles_name(GridTiles t) {
  return t == GridTiles::registers ? "registers" : t == GridTiles::shared ? "shared" : "auto";
}
// The registers path: the registers a thread of the other warpgroups keeps (the cell warp, the pollers, the
// service warp; ptxas, sm_90a: with 80 the cell warp's layer loop holds everything it uses in registers, with
// 72 it reloads spilled values inside the loop).
inline constexpr int kGridOtherRegs = 80;
// The grid kernel's instantiations with tiles in registers: block threads, compute warpgroups, and the k16
// tiles a compute warp holds for one layer. One: 2 warpgroups of 176 registers, 8 tiles (ptxas, sm_90a: no
// spill). Not kept: 3 warpgroups of 144 registers with 6 tiles spill 36 bytes a thread, and on the H200 their
// answer was no faster than with the tiles in shared memory while the own precompute ran at 63 % of its rate
// (lstm_l window, docs/cuda.md "The grid kernel, fifth round"); 640-thread blocks would leave 2 compute
// warpgroups 120 registers, where 8 tiles spill.
struct GridRegWGChoice {
  int threads, wgs, tiles;
};
inline constexpr GridRegWGChoice kGridRegWGChoices[] = {{512, 2, 8}};
// A thread's registers at launch (one block an SM, the register file over the block's threads, whole
// multiples of 8), and those of the compute warpgroups when `compute_wgs` of the block's warpgroups
// compute and the others keep kGridOtherRegs (at most 256, a multiple of 8; 0 where it would not be more
// than at launch).
HOTPATH_HD constexpr int grid_launch_registers(int threads) {
  return (65536 / threads) / 8 * 8 > 255 ? 255 : (65536 / threads) / 8 * 8;
}
HOTPATH_HD constexpr int grid_warpgroup_registers(int threads, int compute_wgs) {
  const int wgs = threads / 128, launch = grid_launch_registers(threads);
  if (compute_wgs <= 0 || compute_wgs >= wgs || threads % 128 != 0) return 0;
  int hi = (launch * wgs - (wgs - compute_wgs) * kGridOtherRegs) / compute_wgs / 8 * 8;
  if (hi > 256) hi = 256;
  return hi > launch ? hi : 0;
}

// Words of the grid's flag buffer: the per-(layer, block) flags, then, from a 128-byte boundary, one line
// per counter: layers 0..L-2's slices, the head's partial sums (L-1), the input's flag (L), then the own
// precompute's stages 0..L-1 (L+1+l).
inline constexpr int grid_counter_offset(int L, int nc) { return (L * nc + 31) & ~31; }
inline constexpr int grid_flag_words(int L, int nc) { return grid_counter_offset(L, nc) + (2 * L + 1) * 32; }
// The tagged exchange's words (LstmParams::xch_words): the input [kin = kt[0] x 16] (hi | lo halves), the
// inputs of layers 1..L-1 [L-1][kh = kt[L] x 16] (hi | lo), the head's partial sums [kMaxOutputs][nc]
// (float bits). One copy, not one per tick parity: no block can write a word of tick s+1 before every
// block has read that word of tick s (its next tick needs the input block 0 sends only after the answer;
// block 0's pollers, which send the input's words, poll tick s+1 only once tick s is answered).
struct GridWords {
  int kin, kh, L, nc;
  HOTPATH_HD long long layer_in(int l) const { return kin + (long long)(l - 1) * kh; }  // l >= 1
  HOTPATH_HD long long head(int o) const { return kin + (long long)(L - 1) * kh + (long long)o * nc; }
  HOTPATH_HD long long total() const { return head(kMaxOutputs); }
};

// Device words the blocks share (global memory, zeroed before launch).
struct SharedWords {
  unsigned long long x_seq;      // ticks forwarded to the precompute (xbuf holds the latest)
  unsigned long long published;  // precompute rounds published x np
  unsigned long long barrier;    // precompute grid barrier arrivals
  unsigned long long prefetched; // multi-block: critical blocks that have read the precompute round, summed
  unsigned int quit;             // set by the critical block: every block leaves
  // grid, quiet answer: the seq of the last tick whose output block 0 has stored and fenced to the system;
  // the other blocks start their own precompute only once it is there
  unsigned int answer_out;
  // Instrumentation, written by the critical block after each answer (off the critical path): SM
  // cycles from "input complete in shared memory" to "output chunks stored".
  unsigned long long compute_cycles_sum;
  unsigned long long compute_cycles_max;
  unsigned long long ticks_timed;
  // Per-segment SM cycles (sum, max): wake (warp 0 has the whole input -> every compute warp past the
  // barrier), layer 0, layers 1..L-1, head, output store.
  unsigned long long seg_sum[5];
  unsigned long long seg_max[5];
  // Every timed tick's SM cycles from "input complete" (warp 0) to "output chunks stored", counted in
  // log-linear buckets (cycle_histogram.hpp): the in-kernel part of a tail, beside the host's latency.
  unsigned long long tick_hist[kCycleBuckets];
  // The SM clock while serving: globaltimer ns and SM cycles between consecutive ticks' records, both
  // read after the answer is out (a globaltimer read on the critical path would cost its latency every
  // tick); the previous record's pair.
  unsigned long long clock_ns_sum, clock_cycles_sum;
  unsigned long long clock_prev_ns, clock_prev_cycles;
  unsigned long long clock_hist[kClockBuckets];  // the same pairs' MHz, one count a tick (cycle_histogram.hpp)
  // cluster family: per critical block (ClusterLayout, kClusterStatSlots)
  unsigned long long cl_sum[kMaxClusterBlocks][kClusterStatSlots];
  // The precompute's rounds as its block 0 lives them (PrecomputeStat), SM cycles summed over rounds.
  unsigned long long pre_sum[kPrecomputeStats];
  // The hybrid's export (LstmParams::export_*): the last tick whose state's sequence word the round's last block
  // has stored and fenced to the system. The feeder hands tick s on only once it is s: so a later round's
  // sequence store can never land before an earlier one's.
  unsigned long long exported;
};

inline constexpr int kMaxHybridStageRows = 4;  // the hybrid mma block's staging: rows a warp at most
inline constexpr int kMaxHybridStageCluster = 8;  // the hybrid mma blocks' staging shared over a cluster: blocks at most

struct LstmParams {
  MailboxView mb;
  long long stall_tick = -1;  // test hook (>= 0 selects the test-only kernels): stall stall_ns before answering this tick
  long long stall_ns = 0;
  int forward_after_output = 0;  // tuning: pass the input to the precompute only once the answer is out
  int gate_sleep_ns = 0;         // tuning: pollers nap this long while waiting for the consumer
  int keep_warm = 0;             // tuning: every compute warp waits for the input issuing dummy mma
  int grid_cell_lanes = 0;       // tuning, grid: lanes a unit in the cell warp (1, 2, 4; 0: grid_cell_lanes' choice)
  int grid_quiet_answer = 0;     // tuning, grid: no block starts its own precompute before the answer is out
  int grid_input_nap_ns = 0;     // tuning, grid: blocks 1.. nap this long between looks for the input's words
  int grid_warm_l2_tiles = 0;    // tuning, grid: the L2 layers' tiles loaded (not prefetched) before `ready`
  int grid_pollers_publish = 1;  // grid (tagged): block 0's pollers store each input word as its chunk comes
  // grid, a measurement (CudaOptions::tick_trace): block 0 writes each tick s's {s + 1, %globaltimer right
  // after the output's store, SM cycles from "input complete" to the stamp} at tick_trace[3 (s & mask)]
  unsigned long long* tick_trace = nullptr;
  unsigned long long tick_trace_mask = 0;
  CriticalVariant variant = kVariantSmem;  // critical-step variant of the cta family
  KernelFamily family = KernelFamily::cta;

  // model
  int I = 0, H = 0, L = 0, O = 0;
  int window_mode = 1;  // 0: streaming
  int W = 1;
  int bf16 = 0;

  // critical block: tensor-core fragments, layer l at frag_off[l], head at frag_off[L] (uint4 units)
  int groups = 0;                    // ceil(H / 8): unit groups, one warp each at a time
  int kt[kMaxLayers + 1] = {};       // k16 tiles (even) of layer l's input; [L]: head
  int frag_off[kMaxLayers + 1] = {};
  int frag_total = 0;                // uint4 count resident in shared memory
  // Layer 0's first kreg k16 tiles live in registers instead (vollo_tiny: 64 KiB that shared memory
  // lacks): global [groups][2][kreg][32] uint4 at reg_off; shared memory keeps tiles [kreg, kt[0]).
  int kreg = 0;
  int reg_off = 0;
  const void* frags = nullptr;       // global copy, loaded into shared memory at start
  const float* head_b = nullptr;     // [O]
  const float* head_w = nullptr;     // [O][H] rounded head weights as fp32 (variant regs)
  int compute_warps = 0;
  int poll_warps = 0;                // poll_sets x ceil(n_in / 32)

  // multi-block critical step (cluster, grid): nc blocks of gpb unit groups (Ub = 8 gpb units) each;
  // ksplit compute warps share one group's k16 tiles (partial sums added in shared memory).
  int nc = 1;
  int gpb = 0;
  int ksplit = 1;
  int share_tiles[kMaxLayers] = {};  // grid: the k16 tiles of layer l each k-share warp takes (even: whole pairs,
                                     // grid_tile_col; the last share may hold fewer, or none): ceil(kt[l] /
                                     // ksplit) rounded up to even
  ClusterLayout cl;                  // cluster family only
  int block_frag = 0;                // uint4 fragments per critical block, block b's at b * block_frag
  // grid: layers [0, grid_l2_layers) keep their fragments in global memory, read from L2 every tick (a
  // model whose W_ih slices overflow shared memory, e.g. 4 x 1000 units over 500 inputs); the rest are
  // copied into shared memory at start, from bfrag_off[grid_l2_layers] on.
  int grid_l2_layers = 0;
  int grid_wide = 0;  // grid: blocks of kMaxBlockThreads (96 registers) instead of kGridBlockThreads (128)
  // grid: compute warpgroups whose warps hold a layer's tiles in registers (GridTiles::registers; the
  // compute warps are then 4 x grid_reg_wgs, and the block a whole number of warpgroups); 0: shared.
  int grid_reg_wgs = 0;
  int bfrag_off[kMaxLayers] = {};    // layer l's [gpb][2][kt][32] within a block
  uint16_t* xch_h = nullptr;         // grid: [2 parities][L][2 rows hi|lo][xin_stride] halves
  unsigned* xch_flag = nullptr;      // grid: [L][nc] wire seq of the last tick block b published for layer l
                                     // (l < L-1: its h slice; l = L-1: its head partial sums); then the
                                     // counters (grid_counter_offset, grid_flag_words)
  unsigned* xch_count = nullptr;     // grid: xch_flag + grid_counter_offset(L, nc), line l at xch_count + 32 l
  GridExchange grid_exchange = GridExchange::flags;
  unsigned long long* xch_words = nullptr;  // grid, tagged: GridWords (zeroed before launch: tag 0 is no tick)
  // grid, in_critical precompute: W_hh fragments [nc][L][gpb][2][kt[L]][32] uint4 (the layout of
  // pack_group_tile, rows of W_hh); each block's state [nc][own_state_floats]: Q [L][nslots][4][Ub] (W_hh h +
  // b of each open window), then c [L][nslots][Ub]; the open windows' h of every unit as B columns
  // [L][2 nslots (hi, lo)][kt[L] x 16] halves; the biases b_ih + b_hh [L][4H].
  GridPrecompute grid_precompute = GridPrecompute::separate;
  const void* hh_frags = nullptr;
  int hh_block_frag = 0;   // uint4 per block
  float* own_state = nullptr;
  int own_state_floats = 0;
  uint16_t* own_h = nullptr;
  const float* own_bias = nullptr;
  float* xch_head = nullptr;         // grid: [2 parities][nc][kMaxOutputs] head partial sums
  unsigned long long* grid_stats = nullptr;  // grid: [nc][kGridStatSlots] timing sums (GridLayerStat); null: none

  // precompute
  int pre_global = 0;           // pre_w is read from global memory (too big for shared memory)
  float* pre_state = nullptr;   // non-null: block b's window state (Q, then c) at b * pre_state_floats
  int pre_state_floats = 0;
  int np = 0;        // precompute blocks
  int U = 0;         // hidden units per precompute block
  int nslots = 1;    // open-window ring (W-1), 1 in streaming
  const float* pre_w = nullptr;  // per block: [pre_block_floats]
  int pre_block_floats = 0;
  int pre_ih[kMaxLayers] = {}, pre_hh[kMaxLayers] = {}, pre_b[kMaxLayers] = {};  // float offsets in a block
  float* h_state = nullptr;   // [L][nslots][H] (the hybrid's mma form: [L][nslots][hy_row_words] words)
  float* pub_P = nullptr;     // [L][4H]
  float* pub_c = nullptr;     // [L][H]
  float* xbuf = nullptr;      // [I]
  SharedWords* words = nullptr;
  // The hybrid backend's precompute (kernels/hybrid/, docs/hybrid.md): non-null, the precompute blocks publish
  // each tick's P and c into this mapped host memory instead of pub_P / pub_c, in the CPU critical step's
  // layout (cpu/window_feed.hpp's CriticalStateLayout: per layer at l * export_layer_floats, P as
  // [Hp / lanes][4][lanes], c at export_gate_floats), tick t's at export_state + (t & 1) * export_tick_floats;
  // the round's last block then stores t + 1 into export_seq (mapped host memory too).
  float* export_state = nullptr;
  unsigned long long* export_seq = nullptr;
  int export_lanes = 0, export_gate_floats = 0, export_layer_floats = 0, export_tick_floats = 0;
  // The hybrid precompute's tensor-core form (hy_mma = 1; plan_hybrid, kernels/hybrid/): block b owns units
  // [b U, b U + U) as U / 4 m16 tiles (tile q, row r: gate r >> 2 of unit 4q + (r & 3)). Each layer's
  // products of the open windows' h (W_ih,l for l > 0, W_hh,l) run on the tensor cores with fp16 hi + lo
  // halves of both operands (three mma a tile: near fp32); W_ih,0 x stays an fp32 product. hy_frags: per
  // block [hy_block_frags] uint4, a matrix's at its offset as [U / 4 tiles][hy_kt][hi, lo][32 lanes] (hy_fp16:
  // [U / 4 tiles][hy_kt][hi][32 lanes]).
  // pre_w then holds per block W_ih,0's rows [4U][I] (row 4u + gate) and the biases [L][4U], fp32.
  int hy_mma = 0;
  const void* hy_frags = nullptr;
  int hy_block_frags = 0;
  int hy_ih_off[kMaxLayers] = {}, hy_hh_off[kMaxLayers] = {};  // uint4 offsets (hy_ih_off[0]: unused)
  int hy_kt = 0;     // k16 tiles of H
  // 1: the products' operands are plain fp16 (the weights' hi halves, each h rounded to fp16): one mma a tile
  // instead of three, the h as fp16 in h_state and in the staging, half the bytes (plan_hybrid: where the CPU's
  // critical step rounds coarser, bf16 or int8). 0: hi + lo halves of both, near fp32.
  int hy_fp16 = 0;
  // words in a window's row of h_state: H (each h as its hi_lo word), or with hy_fp16 H halves rounded up to
  // 8 (whole 16-byte rows whatever H; the padding stays zero)
  int hy_row_words = 0;
  // words in a window's row of the staged h: each h as hi | lo << 16, 16 hy_kt + 8 (a warp's 8-byte B loads,
  // rows 8 or 24 banks apart, conflict-free); with hy_fp16 two halves a word, 8 hy_kt + 4 (4-byte B loads,
  // rows 4, 12, 20 or 28 banks apart). Rows 16-byte aligned for the bulk copies.
  int hy_kpad = 0;
  int hy_ncols = 0;  // open windows rounded up to whole n8 tiles
  // shared memory: fragments, staged h [hy_ncols][hy_kpad] words, the W_ih products, the bulk copies' mbarrier
  int s_hyf = 0, s_hyb = 0, s_hyz = 0, s_hymb = 0;
  // The hybrid's kernel variants (HybridTuning, lstm_plan.hpp): rows a warp stages at a time (mma form); the
  // publish's per-block fence at gpu scope, one system-scope fence a round (1); the precompute barrier as
  // red.release + ld.acquire (1).
  int hy_stage_rows = 2, hy_round_fence = 0, hy_release_barrier = 0;  // hy_stage_rows: 1..kMaxHybridStageRows
  // mma form: blocks [c hy_cluster, c hy_cluster + hy_cluster) are thread-block cluster c (launched as clusters
  // of this size, the grid rounded up to whole ones; np a multiple of it) and share the staging of h: a block
  // reads every hy_cluster-th row from L2 and stores its words into each block of the cluster. 1: each block
  // stages every row itself.
  int hy_cluster = 1;
  // mma form, hy_cluster 1, hy_row_words a multiple of 4: 1, a block stages the rows by bulk copies (cp.async.bulk, one a
  // row, counted on an mbarrier); 0, by its warps' loads and stores.
  int hy_stage_tma = 0;
  // mma form: 0, the last layer pass does the completing window's tile, publishes, then the other tiles;
  // 1, all of it before the publish.
  int hy_last_whole = 0;
  // hy_xmirror (non-null: the mma blocks take x_t from it): the feeder also stores each input chunk as it came,
  // tick t's at hy_xmirror + (t & 1) * mb.n_in; the blocks poll those for the tick's sequence word themselves
  // (no fence, flag and second read between the feeder and them). Zeroed at each launch.
  Chunk* hy_xmirror = nullptr;

  // shared memory layout (bytes), computed on the host
  int smem_bytes = 0;
  // critical
  int s_frags = 0, s_xin = 0, s_x32 = 0, s_seqw = 0, s_claim = 0, s_P = 0, s_c = 0, s_z = 0, s_flags = 0;
  int xin_stride = 0;  // halves per [hi|lo] row of one layer's input buffer: max kt*16, or 32 more (banks)
  // multi-block critical
  int s_red = 0, s_stage = 0, s_h32 = 0, s_hw = 0, s_z0 = 0;  // s_z0: W_ih,0 x of the block's units [4][Ub]
  int s_gmarks = 0;  // grid: this tick's marks, u32 cycles from the tick's start (lstm_grid.cu, GridMarks):
                     // [compute_warps][L + 1][2] then [L + 1][kGridLayerStats]
  // precompute
  int s_pw = 0, s_Q = 0, s_pc = 0, s_px = 0, s_g0 = 0, s_pflags = 0;

  int threads() const {
    if (family == KernelFamily::cluster) return 32 * compute_warps;  // block 0's compute warps poll, no other warps
    // tiles in registers: the instantiation's block, whole warpgroups (the registers it moves between them
    // are those of its launch bounds; spare warps fill the last)
    if (grid_reg_wgs > 0) return grid_block_threads();
    return 32 * (compute_warps + poll_warps + (variant == kVariantRegs ? 0 : 1) +
                 (family == KernelFamily::grid ? kGridCellWarps : 0));
  }
  // grid: the block size of the kernel instantiation the plan runs (its __launch_bounds__)
  int grid_block_threads() const { return grid_wide ? kMaxBlockThreads : kGridBlockThreads; }
  // Blocks launched: the critical blocks, then the precompute, rounded up to whole clusters.
  int grid() const {
    const int n = nc + np;
    return family == KernelFamily::cluster ? (n + nc - 1) / nc * nc : n;
  }
};

// The grid family's tensor-core tiles go in pairs: MMA column c (0-15) of k16 tile k multiplies input column
// grid_tile_col(k, c), so that the B values lane t needs for tiles 2j and 2j+1 (b0, b1 of each) are one
// 16-byte word of an input row, columns 32j + 8t .. 32j + 8t + 7: b0 and b1 of tile 2j, then of tile 2j+1.
// The fragments are packed that way (W_ih and the own precompute's W_hh); the rows stay in input order.
// Shares of k16 tiles start at even tiles (LstmParams::share_tiles).
HOTPATH_HD inline int grid_tile_col(int k, int c) {
  return 32 * (k >> 1) + 8 * ((c & 7) >> 1) + 4 * (k & 1) + 2 * (c >> 3) + (c & 1);
}

// The grid's cell warp: the k-shares a cell lane loads at once (more: another round of loads), and the lanes
// a unit that add a unit's shares (grid/lstm_grid.cu, multi_cells): the fewest of 1, 2, 4 whose shares each
// lane loads in one round (a shuffle level costs more than a second load in flight does not), or the count
// `forced` (CudaOptions::grid_cell_lanes, 0: none) forces; at most 32 lanes over the block's units.
inline constexpr int kGridCellSharesInFlight = 4;
HOTPATH_HD inline int grid_cell_lanes(const LstmParams& p, int forced) {
  const int units = p.gpb * kUnitsPerGroup;
  int parts = 1;
  while (parts < 4 && (p.ksplit + parts - 1) / parts > kGridCellSharesInFlight) parts *= 2;
  if (forced > 0) parts = forced;
  while (parts > 1 && units * parts > 32) parts >>= 1;
  return parts;
}
// The lanes a launch with these parameters takes (p.grid_cell_lanes: the count its options forced).
HOTPATH_HD inline int grid_cell_lanes(const LstmParams& p) { return grid_cell_lanes(p, p.grid_cell_lanes); }

HOTPATH_HD inline GridWords grid_words(const LstmParams& p) { return {p.kt[0] * 16, p.kt[p.L] * 16, p.L, p.nc}; }

// One persistent launch serving many instances of one model (mechanism b, docs/cuda.md), cta family only.
// Instance i's blocks are [i * per_instance, (i + 1) * per_instance): its critical block, then its np
// precompute blocks. Every instance has its own LstmParams (its mailbox, state and words; same plan):
// a block copies its instance's into shared memory, after the plan's own layout, and runs the
// one-instance code on it. An instance runs in generations: its blocks wait until the host has started
// generation g (go[i] >= g), serve until the instance leaves (stop request, its lease), mark themselves
// parked (parked[block] = g), and wait for generation g + 1; the host restarts one instance that way
// while the others serve. Every block leaves for good on the group's stop request or when the group's
// lease lapses (no group heartbeat: the host is gone).
struct MultiLaunch {
  const LstmParams* params = nullptr;  // [count] device memory
  int count = 0;
  int per_instance = 0;                // 1 + np
  int params_offset = 0;               // bytes into dynamic shared memory where a block's copy goes
  const unsigned* go = nullptr;        // [count] mapped host memory: the generation instance i may run
  unsigned* parked = nullptr;          // [count * per_instance] mapped host memory: last generation parked
  const Control* control = nullptr;    // mapped host memory: the group's stop request and heartbeat
  long long lease_ns = 0;              // the group's lease
  int smem_bytes = 0;                  // dynamic shared memory of the launch (params_offset + the copy)
  // Placement: 0, by block index (instance i's blocks are i * per_instance...); 1, by SM: the blocks
  // are ranked by the SM they run on and instance i takes ranks [i * per_instance, ...), so its blocks
  // sit on neighbouring SMs (as a green context's partition does) rather than spread over the GPU.
  int by_sm = 0;
  unsigned* sm_keys = nullptr;         // [grid] device memory, by_sm only: each block's (SM, index) key
};

}  // namespace hotpath::cuda
