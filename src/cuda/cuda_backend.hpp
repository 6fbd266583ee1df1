#pragma once
#include <memory>

#include "backend/backend.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/common/lstm_params.hpp"
#include "cuda/shared_launch.hpp"
#include "cuda/sm_partition.hpp"

namespace hotpath {

// Tuning and test hooks of the CUDA backend beyond BackendOptions. Defaults are the measured winners.
struct CudaOptions {
  cuda::MailboxOptions mailbox;
  double lease_ms = 1000;         // the kernel stops when the heartbeat has been silent this long
  double heartbeat_ms = 20;       // host heartbeat period (a background thread)
  double start_timeout_ms = 20000;  // launch + weight load + first precompute round
  int max_precompute_blocks = 0;  // 0: one per SM beside the critical block
  bool forward_after_output = false;  // start the precompute only once the answer is out
  int gate_sleep_ns = 0;              // pollers nap while the consumer is busy
  bool keep_warm = false;             // compute warps wait issuing dummy mma: no gain measured (docs/cuda.md)
  // Cluster family: the cluster's size in blocks (0: the planner's choice, the fewest blocks whose warps
  // hold all their W_ih tiles in registers); a size the model cannot be split over is refused by name.
  int cluster_blocks = 0;
  // Cluster family: how values cross blocks. false: tagged 8-byte words the consumer spins on (no flag or
  // barrier); true: 4-byte words by st.async, each layer's bytes counted on an mbarrier (docs/cuda.md).
  bool cluster_async_exchange = false;
  // Grid family: how the input and each layer's slices reach the blocks (lstm_params.hpp, GridExchange).
  // H200, side by side (BENCHMARKS.md, "tagged words"): tagged 13-19 us p50 on the large models,
  // counters 19-29 us; flags (an earlier run) 24-670 us.
  cuda::GridExchange grid_exchange = cuda::GridExchange::tagged;
  // Grid family: where the precompute runs (lstm_params.hpp, GridPrecompute).
  cuda::GridPrecompute grid_precompute = cuda::GridPrecompute::automatic;
  // Grid family: lanes a hidden unit in the cell warp, which add its k-share sums by shuffles (1, 2 or 4;
  // 0: the fewest that load their shares in one round, lstm_params.hpp grid_cell_lanes). A tuning knob for
  // side-by-side runs (cuda_sweep --large).
  int grid_cell_lanes = 0;
  // Grid family: where the compute warps read their W_ih tiles in a tick (lstm_params.hpp, GridTiles): in
  // registers where the plan allows it, else from shared memory; asking for registers where no kernel
  // instantiation holds them is refused naming why.
  cuda::GridTiles grid_tiles = cuda::GridTiles::automatic;
  // Grid family: compute warps a block (0: the most that fit; with tiles in registers, 8). A tuning
  // knob for side-by-side runs (cuda_sweep --large); a count that does not fit is refused.
  int grid_compute_warps = 0;
  // Grid family, own precompute: the blocks start the next tick's precompute round only once block 0 has
  // stored the answer and fenced it to the system (SharedWords::answer_out), so the answer's write to host
  // memory never queues behind 125 blocks' weight reads. A tuning knob for side-by-side runs (cuda_sweep).
  bool grid_quiet_answer = false;
  // Grid family: blocks other than block 0 nap this long (__nanosleep) between looks for the tick's input
  // words, so that 124 blocks' threads do not hammer the input's few L2 lines while block 0 polls the host.
  // A tuning knob for side-by-side runs (cuda_sweep); 0: no nap.
  int grid_input_nap_ns = 0;
  // Grid family, models with critical layers read from L2 each tick: before a block counts itself ready for
  // the next tick it loads those layers' tiles into L2 and waits for them, where by default it only issues
  // prefetches, which may still be on their way from HBM (the precompute round evicted them) when the
  // host's input comes. A tuning knob for side-by-side runs (cuda_sweep --warm-l2).
  bool grid_warm_l2_tiles = false;
  // Grid family, tagged words: block 0's poller warps store each input element's word the moment its chunk
  // comes from the host. Off: block 0's warp 0 stores them all once the whole input is in (500-960 words from
  // one warp cost the widest inputs 0.3-0.6 us of latency at p50 on an H100: docs/cuda.md). A tuning knob
  // for side-by-side runs (cuda_sweep --no-pollers-publish).
  bool grid_pollers_publish = true;
  // Grid family, a measurement: the host stamps each tick's send and answer, the kernel the instant its
  // output is stored (%globaltimer) and its span from "input complete"; the counters split each tick's
  // latency into input side, kernel and output side (tick_trace_* in bench/SCHEMA.md), over the last
  // kTickTraceTicks ticks. Costs two steady_clock reads a tick on the host. cuda_sweep --trace.
  bool tick_trace = false;
  // Throughput path: the fused chunk kernel (lstm_batch.hpp, BatchTile) where the model fits it, one launch
  // a chunk instead of a GEMM per (step, layer). A tuning knob for side-by-side runs (cuda_sweep --tile).
  bool batch_tile = false;
  // Throughput path: the fused chunk kernel on a thread-block cluster (lstm_batch.hpp, BatchCluster), the
  // weights resident in the cluster's shared memory, where a plan fits and the engine has no SM partition
  // (before batch_tile). A tuning knob for side-by-side runs (cuda_sweep --tile).
  bool batch_cluster = false;
  // Throughput path: chunks of up to this many rows (fresh windows by the handful, a few series) run on the
  // narrow cluster kernel (lstm_batch.hpp, BatchNarrow) where a plan fits and the engine has no SM partition:
  // -1, as many as one wave of its clusters holds (the throughput-only backend; beside a tick kernel, never);
  // 0, never (cuda_sweep --tile runs both).
  long long batch_narrow_rows = -1;
  // Its warps a (layer, 32-column group), each a share of K, their partial sums added in shared memory (0: the
  // planner's). A tuning knob for side-by-side runs (cuda_sweep --fresh).
  int batch_narrow_ksplit = 0;
  // Throughput-only backend: fresh-window calls of up to this many rows (host arrays) go to the fresh-window
  // server, a persistent kernel started at the first such call (batch_runner.hpp, BatchTuning::fresh_rows):
  // -1, one pass of its kernel (BatchTuning::fresh_rows); 0, never. Off by default until its last changes have
  // run on a GPU (docs/cuda.md); cuda_sweep --fresh asks for it. Beside a tick kernel, never.
  long long batch_fresh_rows = 0;
  unsigned batch_fresh_form = 0;  // earlier forms of its kernel (FreshForm bits; cuda_sweep --fresh)
  // Many instances on one GPU (docs/cuda.md): the engine's kernels run on this SM partition (a green
  // context) only, sized from the partition's SMs; null: the whole device. One tick kernel per
  // partition, and none beside a whole-device one, in a process.
  std::shared_ptr<cuda::SmPartition> partition;
  int batch_priority = 0;  // the throughput path's streams (backtests, fresh windows); lower is higher
  // The throughput path only, no tick kernel (a backtest beside live instances, in the SMs they leave):
  // backtest() and run_batch() serve, step() is refused. Implied by Mode::batch.
  bool throughput_only = false;
  // Mechanism (b) of many instances (docs/cuda.md): this engine is instance `slot` of a shared launch
  // (one persistent launch serving many instances; cuda/shared_launch.hpp): its plan and SMs are the
  // launch's, it starts and stops alone, and backtests are refused (the launch holds the SMs). partition
  // must be unset.
  std::shared_ptr<cuda::SharedLaunch> shared;
  int slot = -1;
  // Critical-step kernel variant (backend/options.hpp, CudaVariant: regs is compiled for a few shapes,
  // e.g. lstm_s, else UnsupportedError); unset: BackendOptions::gpu's.
  std::optional<CudaVariant> variant;
  // Test hooks. stall_tick >= 0 stalls stall_us before answering that tick (0-based): the cta family runs
  // a test-only instantiation (fp16 only; its production kernels have no stall code), the cluster kernel
  // checks the tick number once per tick in block 0 (one compare), the grid kernel has no hook.
  long long stall_tick = -1;
  double stall_us = 0;
  bool heartbeat = true;          // false: never renew the lease (tests its expiry)
};

// The persistent-kernel CUDA backend. Throws UnsupportedError when there is no usable CUDA device or
// the model does not fit the kernel.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options);
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options, const CudaOptions& cuda);

// Loads every kernel a cuda backend may launch (each family's tick kernels, the throughput path's) on
// `device`. CUDA loads a kernel at its first use, and that load waits for the kernels already running:
// a second tick kernel of another shape started beside a running persistent one (a live swap's next
// model, engine/swap_room.hpp) would wait forever. Call before any persistent kernel starts.
void preload_cuda_kernels(int device);

}  // namespace hotpath
