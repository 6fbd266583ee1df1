// The CUDA backend's throughput path (docs/cuda.md, "Throughput"): backtests (window and streaming) and
// fresh windows, many sequences in lockstep through kernels/batch/lstm_batch.cu. Inputs stream through in
// chunks: pinned host buffers allocated once, host-to-device copy, compute and device-to-host copy on
// three streams so that chunk j's copies overlap chunk j-1's compute. The persistent tick kernel is not
// involved.
#pragma once
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/sm_partition.hpp"
#include "model/model.hpp"

namespace hotpath::cuda {

// Host-side packing of a model for the batch kernels (layouts in kernels/batch/lstm_batch.hpp). Plain C++:
// built and tested without a GPU.
struct BatchWeights {
  int I = 0, H = 0, L = 0, O = 0, Ip = 0, Hp = 0, Np = 0;
  bool bf16 = false;
  std::vector<uint16_t> w0;                 // [Np, 2 Ip]: layer 0's W_ih twice (for x's hi and lo halves)
  std::vector<std::vector<uint16_t>> w;     // per layer: layer 0 [Np, Hp] W_hh; l > 0 [Np, 2 Hp] [W_ih | W_hh]
  std::vector<std::vector<float>> bias;     // per layer [Np] (layer 0's goes into P0)
  std::vector<float> head_w, head_b;        // [O, H], [O] (empty without a bias)
};
BatchWeights pack_batch_weights(const Model& model, Precision precision);

// What the last call measured (reported by the backend's counters).
struct BatchStats {
  double wall_s = 0;     // the whole call
  double compute_s = 0;  // the kernels, summed over chunks (compute stream events)
  double h2d_s = 0, d2h_s = 0;  // the copies, summed over chunks
  double copy_bytes = 0;  // host <-> device, or device -> device with device arrays
  bool device_arrays = false;  // the call's arrays were in GPU memory (ArraysIn::device)
  bool tile = false;           // the chunks ran on the fused kernel (BatchTuning::tile)
  int cluster = 0;             // .. on its cluster form, this many blocks a cluster (BatchTuning::cluster)
  long long narrow_chunks = 0;  // chunks that ran on the narrow cluster kernel (BatchTuning::narrow_rows)
  bool fresh_server = false;    // the call's windows went to the fresh-window server (BatchTuning::fresh_rows)
  long long chunks = 0;
  // Share of the copy time hidden under compute: 1 - (wall - compute) / (h2d + d2h), clamped to [0, 1].
  double overlap() const;
};

struct BatchTuning {
  long long rows = 0;  // sequences per chunk (0: sized from the SMs and the model)
  // Where the kernels run: the partition's SMs (its streams), or the whole device when null; priority
  // of the streams as cudaStreamCreateWithPriority takes it (a backtest beside live instances runs low).
  std::shared_ptr<SmPartition> partition;
  int priority = 0;
  // Host threads that copy a chunk's inputs into pinned memory and its outputs out of it (0: half the
  // machine's cores, 1 to 8; util::ParallelRanges::default_threads).
  int copy_threads = 0;
  // The fused chunk kernel (lstm_batch.hpp, BatchTile) where the shape fits it, instead of a GEMM per
  // (step, layer): a tuning knob while it is measured (CudaOptions::batch_tile).
  bool tile = false;
  // The fused chunk kernel on a thread-block cluster (lstm_batch.hpp, BatchCluster), the weights resident in
  // the cluster's shared memory, where a plan fits (and not on an SM partition); before `tile`. A tuning knob
  // while it is measured (CudaOptions::batch_cluster).
  bool cluster = false;
  // Chunks of up to this many rows run on the narrow cluster kernel (lstm_batch.hpp, BatchNarrow) where a plan
  // fits (not on an SM partition): -1, one wave of its clusters (the rows they hold at once); 0, never.
  long long narrow_rows = -1;
  int narrow_ksplit = 0;  // its warps a (layer, column group), each a share of K (0: the planner's)
  // Fresh-window calls of up to this many rows, from host memory, go to the fresh-window server (a persistent
  // kernel on a cluster of a block a layer, fresh_server.hpp) where its plan fits the model (not on an SM
  // partition); it starts at the first such call and holds its SMs until the runner closes. -1: the rows of
  // one pass of its kernel (FreshPlan::rows: beyond one pass the narrow kernel answered sooner in the
  // measurements, docs/cuda.md "Fresh windows through a persistent kernel"); 0: never.
  long long fresh_rows = 0;
  unsigned fresh_form = 0;  // earlier forms of its kernel (FreshParams::form, FreshForm bits), to measure against
};


// Loads every throughput-path kernel on `device` now (BatchRunner does too): call before persistent tick
// kernels start when a backtest may run beside them, since a kernel loaded later waits for them.
void preload_batch_kernels(int device);

// Where a call's arrays are: host memory (staged through the pinned buffers) or the runner's GPU (the
// inputs copied on the device into the chunks, the outputs from them; nothing crosses the host link). Device
// arrays must be ready when the call starts: written by work already finished or queued on the legacy
// default stream (the call's copies wait for that stream); the outputs are complete when it returns.
enum class ArraysIn { host, device };

class BatchRunner {
 public:
  BatchRunner(const Model& model, Precision precision, int device, BatchTuning tuning = {});
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // x [S, T, I] (already scaled) -> out [S, T, O]; window > 0: the window rule with that window, 0:
  // streaming.
  // Device arrays: outputs in float32 only (out.f32).
  void backtest(const float* x, size_t series, size_t ticks, int window, Backend::BacktestOutput out,
                std::atomic<size_t>* done, ArraysIn where = ArraysIn::host);
  // x [B, W, I] -> out [B, O], every window from zero state.
  void fresh(const float* x, size_t batch, size_t window, float* out, ArraysIn where = ArraysIn::host);
  // x [0, n) in the runner's GPU's memory: the index of its first NaN or Inf, or n when there is none.
  size_t first_nonfinite(const float* x, size_t n);

  const BatchStats& stats() const { return stats_; }
  long long rows_per_chunk() const;
  int copy_threads() const;
  bool tile() const;  // the fused chunk kernel serves this model (asked for, and its shape fits)
  int cluster() const;  // its cluster form does, with this many blocks a cluster (0: it does not)
  long long narrow_rows() const;  // chunks up to this many rows run on the narrow kernel (0: none)
  // Fresh-window calls up to this many rows go to the fresh-window server (0: none, or its plan does not fit:
  // fresh_server_why() says why).
  long long fresh_server_rows() const;
  std::string fresh_server_why() const;
  // Its kernel's time per request, by block and part (SM cycles, FreshProf in kernels/fresh/fresh_layout.hpp):
  // {"fresh_server_l0_groups_cycles", ...}, and fresh_server_requests; empty before it has answered.
  std::map<std::string, double> fresh_server_profile() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  BatchStats stats_;
};

}  // namespace hotpath::cuda
