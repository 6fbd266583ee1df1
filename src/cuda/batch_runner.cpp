#include "cuda/batch_runner.hpp"

#include "cuda/memory.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>

#include "cuda/batch_chunks.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/fresh_server.hpp"
#include "cuda/kernels/batch/lstm_batch.hpp"
#include "util/error.hpp"
#include "util/parallel_ranges.hpp"

namespace hotpath::cuda {

namespace {

uint16_t to_bits(double v, bool bf16) {
  if (bf16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(float(v));
    uint16_t r;
    std::memcpy(&r, &b, 2);
    return r;
  }
  const __half h = __float2half_rn(float(v));
  uint16_t r;
  std::memcpy(&r, &h, 2);
  return r;
}

int round_up(int v, int m) { return (v + m - 1) / m * m; }

}  // namespace

BatchWeights pack_batch_weights(const Model& model, Precision precision) {
  if (precision != Precision::fp16 && precision != Precision::bf16)
    throw UnsupportedError("the cuda throughput kernels compute in fp16 or bf16 (fp32 accumulation), not " +
                           std::string(precision_name(precision)));
  const ModelConfig& mc = model.config;
  BatchWeights b;
  b.I = mc.input_size, b.H = mc.hidden_size, b.L = mc.num_layers, b.O = mc.output_size;
  b.Ip = round_up(b.I, kBatchInputAlign);
  b.Hp = round_up(b.H, kBatchUnitGroup);
  b.Np = 4 * b.Hp;
  b.bf16 = precision == Precision::bf16;
  const int H = b.H, Hp = b.Hp, Np = b.Np, Ip = b.Ip;
  b.w0.assign(size_t(Np) * 2 * Ip, 0);
  b.w.resize(size_t(b.L));
  b.bias.resize(size_t(b.L));
  for (int l = 0; l < b.L; ++l) {
    const LstmLayer& layer = model.layers[size_t(l)];
    const int in = l == 0 ? b.I : H;
    const int K = l == 0 ? Hp : 2 * Hp;
    auto& w = b.w[size_t(l)];
    w.assign(size_t(Np) * K, 0);
    auto& bias = b.bias[size_t(l)];
    bias.assign(size_t(Np), 0.f);
    const std::vector<double> bsum = layer.bias_sum(H);
    for (int u = 0; u < H; ++u)
      for (int q = 0; q < 4; ++q) {
        const size_t n = size_t(batch_column(u, q)), row = size_t(q) * H + u;
        if (!bsum.empty()) bias[n] = float(bsum[row]);
        for (int i = 0; i < in; ++i) {
          const uint16_t v = to_bits(layer.w_ih[row * in + i], b.bf16);
          if (l == 0) {
            b.w0[n * 2 * Ip + i] = v;
            b.w0[n * 2 * Ip + Ip + i] = v;
          } else {
            w[n * K + i] = v;
          }
        }
        const int off = l == 0 ? 0 : Hp;
        for (int j = 0; j < H; ++j) w[n * K + off + j] = to_bits(layer.w_hh[row * H + j], b.bf16);
      }
  }
  b.head_w.assign(model.head_w.begin(), model.head_w.end());
  b.head_b.assign(model.head_b.begin(), model.head_b.end());
  return b;
}

double BatchStats::overlap() const {
  const double copy = h2d_s + d2h_s;
  if (copy <= 0) return 1.0;
  return std::clamp(1.0 - (wall_s - compute_s) / copy, 0.0, 1.0);
}

namespace {


using Clock = std::chrono::steady_clock;
// The fresh-window server's lease: it leaves when its heartbeat (every 20 ms) has stopped this long.
constexpr long long kFreshServerLeaseMs = 1000;
// .. and after this long without a request (the next one launches it again): its SMs go back to the device, and
// a device-wide synchronize elsewhere in the process (a framework's) waits at most this long.
constexpr long long kFreshServerIdleMs = 10;

template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // cuda/memory.hpp: freeing never waits for the tick kernels running beside a backtest.
  explicit PinnedBuffer(size_t n) : n_(n) { p_ = static_cast<T*>(pinned_alloc(std::max<size_t>(n, 1) * sizeof(T), cudaHostAllocDefault)); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~PinnedBuffer() {
    pinned_free(p_, std::max<size_t>(n_, 1) * sizeof(T), cudaHostAllocDefault);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

class Event {
 public:
  Event() { HOTPATH_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~Event() {
    if (e_) HOTPATH_CUDA_CHECK_NOTHROW(cudaEventDestroy(e_));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

float elapsed_ms(const Event& a, const Event& b) {
  float ms = 0;
  HOTPATH_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return ms;
}

}  // namespace

struct BatchRunner::Impl {
  BatchWeights wts;
  int device = 0;
  bool tile = false;  // the fused chunk kernel (BatchTuning::tile, where the shape fits)
  BatchCluster cluster;  // its cluster form (BatchTuning::cluster, where a plan fits; before tile)
  bool fused() const { return tile || cluster.cluster; }  // a chunk is one launch of either
  BatchNarrow narrow;         // the narrow cluster kernel, for chunks of up to narrow_rows rows
  long long narrow_rows = 0;
  // The fresh-window server: calls of up to fresh_rows rows of windows up to fresh_window steps, started at the
  // first; a server that failed to answer is not started again (the throughput kernels take its calls).
  long long fresh_rows = 0;
  int fresh_window = 0;
  FreshPlan fresh_plan;
  std::string fresh_why;
  std::unique_ptr<FreshServer> server;
  bool server_failed = false;
  bool weights_held = false;  // a server kernel that would not leave may read the weights: never freed
  unsigned fresh_form = 0;  // FreshParams::form
  // A streaming group's chunks stay on the kernel its first chunk took (the narrow kernel and the GEMMs keep the
  // state between chunks in different buffers): decided at each chunk that starts from zero state.
  bool narrow_group = false;
  long long R = 0;  // rows per chunk
  long long P = 0;  // staged input ticks per chunk
  Stream compute, h2d, d2h;
  DeviceBuffer<uint16_t> w0;
  std::vector<DeviceBuffer<uint16_t>> w;
  std::vector<DeviceBuffer<float>> bias;
  DeviceBuffer<float> bias0, head_w, head_b;
  // Capacity-sized working memory (grown only, never per chunk).
  long long cap_rows = 0, cap_in = 0;
  DeviceBuffer<uint16_t> xhi, xlo;
  DeviceBuffer<float> p0, c, h32;
  std::array<DeviceBuffer<uint16_t>, 2> h;  // [parity]: L x rows x Hp
  struct Slot {
    PinnedBuffer<float> in_pin, out_pin;
    PinnedBuffer<int> meta_pin;
    DeviceBuffer<float> x, out;
    DeviceBuffer<int> meta;
    Event h2d_begin, h2d_end, comp_begin, comp_end, d2h_begin, d2h_end;
    BatchChunk chunk;
    bool busy = false;
    bool narrow = false;  // its chunk runs on the narrow kernel
  };
  std::array<Slot, 2> slots;
  Event legacy_done;  // device arrays: the legacy default stream's work so far, which the copies wait for
  DeviceBuffer<unsigned long long> first_bad;  // first_nonfinite's answer
  // The host's copies into and out of pinned memory, split over a few threads: one core copies a few GB/s,
  // the PCIe link several times that (BatchTuning::copy_threads).
  std::unique_ptr<util::ParallelRanges> copier;

  // Rows [b, e) of the pieces `copies` (each n rows of `width` values, from src row to dst row), counted
  // over the pieces in order: fn(piece, first row, rows) for each part of a piece that falls inside.
  template <class Fn>
  static void rows_of(const std::vector<BatchChunk::Copy>& copies, size_t b, size_t e, Fn fn) {
    size_t at = 0;
    for (const auto& c : copies) {
      const size_t lo = std::max(b, at), hi = std::min(e, at + c.n);
      if (lo < hi) fn(c, lo - at, hi - lo);
      at += c.n;
      if (at >= e) break;
    }
  }
  static size_t total_rows(const std::vector<BatchChunk::Copy>& copies) {
    size_t n = 0;
    for (const auto& c : copies) n += c.n;
    return n;
  }
  // Rows per worker at least: a wake-up costs more than copying a few hundred KB.
  static size_t grain_rows(size_t width) { return std::max<size_t>(1, (size_t(256) << 10) / (width * sizeof(float))); }

  // Device arrays: the pieces as 2D copies on the device (copy_runs: a streaming chunk's rows in one).
  static void copy_on_device(float* dst, const float* src, size_t width, const std::vector<BatchChunk::Copy>& pieces,
                             cudaStream_t st) {
    const size_t row = width * sizeof(float);
    for (const CopyRun& r : copy_runs(pieces))
      HOTPATH_CUDA_CHECK(cudaMemcpy2DAsync(dst + r.dst * width, r.dst_step * row, src + r.src * width, r.src_step * row,
                                           r.n * row, r.count, cudaMemcpyDeviceToDevice, st));
  }

  void ensure(long long rows, long long in_rows) {
    const size_t I = size_t(wts.I), O = size_t(wts.O), Hp = size_t(wts.Hp), Np = size_t(wts.Np), L = size_t(wts.L);
    if (rows > cap_rows) {
      c = DeviceBuffer<float>(L * size_t(rows) * Hp);
      h32 = DeviceBuffer<float>(size_t(rows) * Hp);
      for (auto& hb : h) hb = DeviceBuffer<uint16_t>(L * size_t(rows) * Hp);
    }
    if (in_rows > cap_in && !fused()) {  // the fused kernel splits x itself and makes no P0
      xhi = DeviceBuffer<uint16_t>(size_t(in_rows) * size_t(wts.Ip));
      xlo = DeviceBuffer<uint16_t>(size_t(in_rows) * size_t(wts.Ip));
      p0 = DeviceBuffer<float>(size_t(in_rows) * Np);
    }
    if (rows > cap_rows || in_rows > cap_in) {
      const long long r = std::max(rows, cap_rows), n = std::max(in_rows, cap_in);
      for (auto& s : slots) {
        s.in_pin = PinnedBuffer<float>(size_t(n) * I);
        s.x = DeviceBuffer<float>(size_t(n) * I);
        // outputs: [rows, O] or, streaming, [rows, steps, O] with rows x steps <= staged ticks
        s.out_pin = PinnedBuffer<float>(size_t(std::max(r, n)) * O);
        s.out = DeviceBuffer<float>(size_t(std::max(r, n)) * O);
        s.meta_pin = PinnedBuffer<int>(2 * size_t(r));
        s.meta = DeviceBuffer<int>(2 * size_t(r));
      }
      cap_rows = std::max(rows, cap_rows);
      cap_in = std::max(in_rows, cap_in);
    }
  }

  uint16_t* hbuf(int parity, int layer) const {
    return h[size_t(parity)].get() + size_t(layer) * size_t(cap_rows) * size_t(wts.Hp);
  }
  float* cbuf(int layer) const { return c.get() + size_t(layer) * size_t(cap_rows) * size_t(wts.Hp); }

  // Device arrays: `streams` wait for the work queued on the legacy default stream so far (where the
  // caller's arrays were made, or before this call).
  void after_legacy_stream(std::initializer_list<cudaStream_t> streams) {
    HOTPATH_CUDA_CHECK(cudaEventRecord(legacy_done.get(), cudaStreamLegacy));
    for (cudaStream_t st : streams) HOTPATH_CUDA_CHECK(cudaStreamWaitEvent(st, legacy_done.get()));
  }

  // The fused kernels (the narrow one, the cluster form, the one-block kernel): the whole chunk in one launch,
  // its state in cbuf/hbuf(0, .) between chunks.
  void enqueue_tile(Slot& s, cudaStream_t st) {
    const BatchChunk& ch = s.chunk;
    BatchTile t;
    t.x = s.x.get();
    t.I = wts.I, t.Ip = wts.Ip, t.Hp = wts.Hp, t.Np = wts.Np, t.L = wts.L, t.O = wts.O, t.H = wts.H;
    t.rows = ch.rows, t.steps = ch.steps;
    t.bf16 = wts.bf16, t.reset = ch.reset, t.emit_every = ch.emit_every;
    t.row_p0 = s.meta.get();
    t.row_first = ch.row_first.empty() ? nullptr : s.meta.get() + ch.rows;
    t.w0 = w0.get();
    for (int l = 0; l < wts.L; ++l) {
      t.w[l] = w[size_t(l)].get();
      t.bias[l] = l == 0 ? bias0.get() : bias[size_t(l)].get();
    }
    t.c = cbuf(0), t.c_stride = cap_rows * wts.Hp;
    t.h = hbuf(0, 0), t.h_stride = cap_rows * wts.Hp;
    t.head_w = head_w.get();
    t.head_b = wts.head_b.empty() ? nullptr : head_b.get();
    t.out = s.out.get();
    if (s.narrow)
      HOTPATH_CUDA_CHECK(launch_batch_narrow(t, narrow, st));
    else if (cluster.cluster)
      HOTPATH_CUDA_CHECK(launch_batch_cluster(t, cluster, st));
    else
      HOTPATH_CUDA_CHECK(launch_batch_tile(t, st));
  }

  // The kernels of one chunk on the compute stream; `parity` carries the h double buffer across a
  // streaming group's chunks.
  void enqueue_compute(Slot& s, int& parity) {
    const BatchChunk& ch = s.chunk;
    const cudaStream_t st = compute.get();
    const int Hp = wts.Hp, Np = wts.Np, L = wts.L;
    HOTPATH_CUDA_CHECK(cudaStreamWaitEvent(st, s.h2d_end.get()));
    HOTPATH_CUDA_CHECK(cudaEventRecord(s.comp_begin.get(), st));
    if (fused() || s.narrow) {
      enqueue_tile(s, st);
      HOTPATH_CUDA_CHECK(cudaEventRecord(s.comp_end.get(), st));
      return;
    }
    HOTPATH_CUDA_CHECK(launch_batch_split(s.x.get(), ch.n_in, wts.I, wts.Ip, wts.bf16, xhi.get(), xlo.get(), st));
    BatchGemm pg;
    pg.a1 = xhi.get(), pg.lda1 = wts.Ip, pg.k1 = wts.Ip;
    pg.a2 = xlo.get(), pg.lda2 = wts.Ip, pg.k2 = wts.Ip;
    pg.w = w0.get(), pg.ldw = 2 * wts.Ip;
    pg.rows = ch.n_in, pg.Np = Np, pg.bf16 = wts.bf16;
    pg.bias = bias0.get();
    pg.out = p0.get();
    HOTPATH_CUDA_CHECK(launch_batch_gemm(pg, st));
    if (ch.reset) {
      parity = 0;
      for (int l = 0; l < L; ++l) {
        HOTPATH_CUDA_CHECK(cudaMemsetAsync(cbuf(l), 0, size_t(ch.rows) * Hp * sizeof(float), st));
        HOTPATH_CUDA_CHECK(cudaMemsetAsync(hbuf(0, l), 0, size_t(ch.rows) * Hp * sizeof(uint16_t), st));
      }
    }
    const int* row_p0 = s.meta.get();
    const int* row_first = ch.row_first.empty() ? nullptr : s.meta.get() + ch.rows;
    for (int k = 0; k < ch.steps; ++k) {
      // A step from zero state (every row's first) needs no recurrent product.
      const bool from_zero = ch.reset && k == 0;
      const bool emit = ch.emit_every || k == ch.steps - 1;
      for (int l = 0; l < L; ++l) {
        BatchGemm g;
        g.rows = ch.rows, g.Np = Np, g.bf16 = wts.bf16;
        g.w = w[size_t(l)].get();
        g.c = cbuf(l);
        g.h_out = hbuf(1 - parity, l);
        g.step = k;
        g.row_first = row_first;
        if (l == 0) {
          g.a1 = hbuf(parity, 0), g.lda1 = Hp, g.k1 = from_zero ? 0 : Hp;
          g.ldw = Hp;
          g.p0 = p0.get(), g.row_p0 = row_p0;
        } else {
          g.a1 = hbuf(1 - parity, l - 1), g.lda1 = Hp, g.k1 = Hp;
          g.a2 = hbuf(parity, l), g.lda2 = Hp, g.k2 = from_zero ? 0 : Hp;
          g.ldw = 2 * Hp;
          g.bias = bias[size_t(l)].get();
        }
        if (l == L - 1 && emit) g.h32 = h32.get();
        HOTPATH_CUDA_CHECK(launch_batch_gemm(g, st));
      }
      parity = 1 - parity;
      if (emit)
        HOTPATH_CUDA_CHECK(launch_batch_head(h32.get(), ch.rows, wts.H, Hp, wts.O, head_w.get(),
                                             wts.head_b.empty() ? nullptr : head_b.get(), s.out.get(),
                                             ch.emit_every ? ch.steps : 1, ch.emit_every ? k : 0, st));
    }
    HOTPATH_CUDA_CHECK(cudaEventRecord(s.comp_end.get(), st));
  }

  // The server's end. A kernel that would not leave may still read the weights: the throughput kernels go on
  // using them, and the runner's end leaves them allocated (leak_weights) instead of freeing them under it.
  void retire_server() {
    if (!server) return;
    weights_held |= server->leaked();
    server.reset();
  }
  void leak_weights() {
    (void)w0.release();
    for (auto& b : w) (void)b.release();
    for (auto& b : bias) (void)b.release();
    (void)bias0.release(), (void)head_w.release(), (void)head_b.release();
  }

  // A fresh-window call on the server; false where it does not take it (the throughput kernels do).
  bool serve_fresh(const float* x, size_t batch, size_t window, float* out, BatchStats& stats) {
    if (!fresh_rows || server_failed || batch > size_t(fresh_rows) || window > size_t(fresh_window)) return false;
    const auto t0 = Clock::now();
    if (!server) {
      FreshWeights fw;
      fw.w0 = w0.get();
      for (int l = 0; l < wts.L; ++l) {
        fw.w[l] = w[size_t(l)].get();
        fw.bias[l] = l == 0 ? bias0.get() : bias[size_t(l)].get();
      }
      fw.head_w = head_w.get();
      fw.head_b = wts.head_b.empty() ? nullptr : head_b.get();
      fw.I = wts.I, fw.Ip = wts.Ip, fw.H = wts.H, fw.Hp = wts.Hp, fw.L = wts.L, fw.O = wts.O, fw.bf16 = wts.bf16;
      try {
        server = std::make_unique<FreshServer>(fw, fresh_plan, fresh_window, int(fresh_rows), device, kFreshServerLeaseMs,
                                               kFreshServerIdleMs, fresh_form);
      } catch (const std::exception& e) {  // the throughput kernels take its calls, and say why
        server_failed = true;
        fresh_why = std::string("it did not start: ") + e.what();
        return false;
      }
    }
    // The first answer waits for the kernel's start (its module load, its weights into registers and shared
    // memory); after that a request takes microseconds, and one that has not come in a second never will.
    const auto timeout = server->answered() ? std::chrono::microseconds(1'000'000) : std::chrono::microseconds(10'000'000);
    const size_t I = size_t(wts.I), O = size_t(wts.O);
    bool answered = false;
    try {
      answered = server->run(std::span<const float>(x, batch * window * I), int(batch), int(window),
                             std::span<float>(out, batch * O), timeout);
      if (!answered) fresh_why = "it did not answer in time and was stopped";
    } catch (const std::exception& e) {  // a relaunch that failed
      fresh_why = std::string("it failed: ") + e.what();
    }
    if (!answered) {
      server_failed = true;
      retire_server();
      return false;
    }
    stats = BatchStats{};
    stats.fresh_server = true;
    stats.wall_s = stats.compute_s = std::chrono::duration<double>(Clock::now() - t0).count();
    return true;
  }

  // Runs chunks from `next` (which fills a BatchChunk and returns false when there are none) through the
  // two slots: while the GPU computes chunk j, the host stages chunk j+1 and drains chunk j-1.
  void run(const ChunkSource& next, const float* x, size_t I, Backend::BacktestOutput out, size_t O,
           std::atomic<size_t>* done, BatchStats& stats, ArraysIn where) {
    stats = BatchStats{};
    stats.tile = fused();
    stats.cluster = cluster.cluster;
    const bool on_device = where == ArraysIn::device;
    if (on_device && !out.f32) throw Error("cuda throughput path: outputs in GPU memory are float32");
    stats.device_arrays = on_device;
    const auto t0 = Clock::now();
    int parity = 0;
    if (on_device) after_legacy_stream({h2d.get(), d2h.get()});
    auto drain = [&](Slot& s) {
      HOTPATH_CUDA_CHECK(cudaEventSynchronize(s.d2h_end.get()));
      stats.h2d_s += elapsed_ms(s.h2d_begin, s.h2d_end) * 1e-3;
      stats.compute_s += elapsed_ms(s.comp_begin, s.comp_end) * 1e-3;
      stats.d2h_s += elapsed_ms(s.d2h_begin, s.d2h_end) * 1e-3;
      const auto& outs = s.chunk.out;
      if (on_device) {  // the outputs are already where they belong
        if (done) done->fetch_add(s.chunk.done, std::memory_order_relaxed);
        s.busy = false;
        return;
      }
      copier->run(total_rows(outs), grain_rows(O), [&](size_t b, size_t e) {
        rows_of(outs, b, e, [&](const BatchChunk::Copy& c, size_t r, size_t n) {
          const float* src = s.out_pin.get() + (c.src + r) * O;
          if (out.f64) std::copy(src, src + n * O, out.f64 + (c.dst + r) * O);
          else std::memcpy(out.f32 + (c.dst + r) * O, src, n * O * sizeof(float));
        });
      });
      if (done) done->fetch_add(s.chunk.done, std::memory_order_relaxed);
      s.busy = false;
    };
    for (long long j = 0;; ++j) {
      Slot& s = slots[size_t(j % 2)];
      if (s.busy) drain(s);
      if (!next(s.chunk)) break;
      BatchChunk& ch = s.chunk;
      if (!on_device)
        copier->run(total_rows(ch.in), grain_rows(I), [&](size_t b, size_t e) {
          rows_of(ch.in, b, e, [&](const BatchChunk::Copy& c, size_t r, size_t n) {
            std::memcpy(s.in_pin.get() + (c.dst + r) * I, x + (c.src + r) * I, n * I * sizeof(float));
          });
        });
      std::copy(ch.row_p0.begin(), ch.row_p0.end(), s.meta_pin.get());
      std::copy(ch.row_first.begin(), ch.row_first.end(), s.meta_pin.get() + ch.rows);
      const size_t meta = ch.row_p0.size() + ch.row_first.size();
      if (ch.reset) narrow_group = narrow.cluster && ch.rows <= narrow_rows;
      s.narrow = narrow_group;
      HOTPATH_CUDA_CHECK(cudaEventRecord(s.h2d_begin.get(), h2d.get()));
      if (on_device)
        copy_on_device(s.x.get(), x, I, ch.in, h2d.get());
      else
        HOTPATH_CUDA_CHECK(cudaMemcpyAsync(s.x.get(), s.in_pin.get(), size_t(ch.n_in) * I * sizeof(float),
                                           cudaMemcpyHostToDevice, h2d.get()));
      HOTPATH_CUDA_CHECK(cudaMemcpyAsync(s.meta.get(), s.meta_pin.get(), meta * sizeof(int), cudaMemcpyHostToDevice, h2d.get()));
      HOTPATH_CUDA_CHECK(cudaEventRecord(s.h2d_end.get(), h2d.get()));
      enqueue_compute(s, parity);
      stats.narrow_chunks += s.narrow;
      const size_t out_floats = size_t(ch.rows) * (ch.emit_every ? size_t(ch.steps) : 1) * O;
      HOTPATH_CUDA_CHECK(cudaStreamWaitEvent(d2h.get(), s.comp_end.get()));
      HOTPATH_CUDA_CHECK(cudaEventRecord(s.d2h_begin.get(), d2h.get()));
      if (on_device)
        copy_on_device(out.f32, s.out.get(), O, ch.out, d2h.get());
      else
        HOTPATH_CUDA_CHECK(cudaMemcpyAsync(s.out_pin.get(), s.out.get(), out_floats * sizeof(float), cudaMemcpyDeviceToHost, d2h.get()));
      HOTPATH_CUDA_CHECK(cudaEventRecord(s.d2h_end.get(), d2h.get()));
      s.busy = true;
      stats.copy_bytes += double(size_t(ch.n_in) * I * sizeof(float) + meta * sizeof(int) + out_floats * sizeof(float));
      ++stats.chunks;
    }
    for (long long j = 0; j < 2; ++j)
      if (slots[size_t(j)].busy) drain(slots[size_t(j)]);
    stats.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

void preload_batch_kernels(int device) {
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));
  HOTPATH_CUDA_CHECK(prepare_batch_kernels());
}

BatchRunner::BatchRunner(const Model& model, Precision precision, int device, BatchTuning tuning) {
  BatchWeights wts = pack_batch_weights(model, precision);
  HOTPATH_CUDA_CHECK(cudaSetDevice(device));  // the streams, events and kernel attributes below belong to it
  HOTPATH_CUDA_CHECK(prepare_batch_kernels());
  impl_ = std::make_unique<Impl>();
  Impl& m = *impl_;
  m.wts = std::move(wts);
  m.device = device;
  // The kernels run where the streams are: the partition's SMs, or the whole device's.
  m.compute = Stream::adopt(make_stream(tuning.partition.get(), device, tuning.priority));
  m.h2d = Stream::adopt(make_stream(tuning.partition.get(), device, tuning.priority));
  m.d2h = Stream::adopt(make_stream(tuning.partition.get(), device, tuning.priority));
  int sms = 0;
  HOTPATH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (tuning.partition) sms = tuning.partition->sm_count();
  // Enough 128-row blocks for ~16 per SM across the gate columns: the GEMMs fill the GPU, and a chunk's
  // working set stays a few hundred MB.
  const long long col_blocks = m.wts.Np / (4 * kBatchUnitGroup);
  const long long rows = tuning.rows;  // the caller's (BackendOptions::batch_rows), else from the SMs
  long long R = rows > 0 ? rows : (16LL * sms + col_blocks - 1) / col_blocks * kBatchRowTile;
  m.R = std::clamp<long long>((R + kBatchRowTile - 1) / kBatchRowTile * kBatchRowTile, kBatchRowTile, kMaxBatchRows);
  m.P = 4 * m.R;
  // Not on an SM partition: its green context may split the GPCs finer than a cluster needs, and the plan's
  // co-residency check is the whole device's.
  if (tuning.cluster && !tuning.partition)
    m.cluster = batch_cluster_plan(m.wts.Ip, m.wts.Hp, m.wts.L, m.wts.O, m.wts.bf16, device);
  m.tile = !m.cluster.cluster && tuning.tile && batch_tile_fits(m.wts.Ip, m.wts.Hp, m.wts.L, m.wts.O, device);
  // The narrow kernel for chunks of a few rows (fresh windows by the handful, a few series), same reason.
  if (tuning.narrow_rows != 0 && !tuning.partition) {
    m.narrow = batch_narrow_plan(m.wts.Ip, m.wts.Hp, m.wts.L, m.wts.O, m.wts.bf16, device, tuning.narrow_ksplit);
    if (m.narrow.cluster)
      m.narrow_rows = tuning.narrow_rows > 0 ? tuning.narrow_rows : (long long)m.narrow.clusters * kBatchNarrowRows;
  }
  // The fresh-window server where its plan fits (a window length to size it by: the model's), same reason.
  m.fresh_form = tuning.fresh_form;
  if (tuning.fresh_rows != 0 && !tuning.partition) {
    m.fresh_window = model.config.window.value_or(0);
    if (m.fresh_window < 1) {
      m.fresh_why = "the model has no window";
    } else {
      m.fresh_plan = fresh_plan(m.wts.Ip, m.wts.Hp, m.wts.L, m.wts.O, m.fresh_window, m.wts.bf16, device);
      if (m.fresh_plan.rows)
        m.fresh_rows = tuning.fresh_rows > 0 ? tuning.fresh_rows : m.fresh_plan.rows;
      else
        m.fresh_why = m.fresh_plan.why;
    }
  } else {
    m.fresh_why = tuning.partition ? "not on an SM partition" : "not asked for";
  }
  m.copier = std::make_unique<util::ParallelRanges>(
      tuning.copy_threads > 0 ? tuning.copy_threads : util::ParallelRanges::default_threads(), "cuda backtest copy");
  const cudaStream_t st = m.compute.get();
  auto upload16 = [&](const std::vector<uint16_t>& v) {
    DeviceBuffer<uint16_t> d(v.size());
    d.upload(v.data(), v.size(), st);
    return d;
  };
  auto upload32 = [&](const std::vector<float>& v) {
    DeviceBuffer<float> d(v.size());
    if (!v.empty()) d.upload(v.data(), v.size(), st);
    return d;
  };
  m.w0 = upload16(m.wts.w0);
  for (int l = 0; l < m.wts.L; ++l) {
    m.w.push_back(upload16(m.wts.w[size_t(l)]));
    m.bias.push_back(upload32(m.wts.bias[size_t(l)]));
  }
  m.bias0 = std::move(m.bias[0]);
  m.head_w = upload32(m.wts.head_w);
  m.head_b = upload32(m.wts.head_b);
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(st));
}

BatchRunner::~BatchRunner() {
  if (impl_) {
    impl_->retire_server();  // stops its kernel before the weights it reads are freed
    if (impl_->weights_held) impl_->leak_weights();
    // Work still queued reads the buffers freed below.
    HOTPATH_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(impl_->compute.get()));
    HOTPATH_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(impl_->h2d.get()));
    HOTPATH_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(impl_->d2h.get()));
  }
}

long long BatchRunner::rows_per_chunk() const { return impl_->R; }
int BatchRunner::copy_threads() const { return impl_->copier->threads(); }
bool BatchRunner::tile() const { return impl_->tile; }
int BatchRunner::cluster() const { return impl_->cluster.cluster; }
long long BatchRunner::narrow_rows() const { return impl_->narrow_rows; }
long long BatchRunner::fresh_server_rows() const { return impl_->server_failed ? 0 : impl_->fresh_rows; }
std::map<std::string, double> BatchRunner::fresh_server_profile() const {
  std::map<std::string, double> c;
  const Impl& m = *impl_;
  if (!m.server || !m.server->answered_this_launch()) return c;
  const double n = double(m.server->answered_this_launch());
  const auto prof = m.server->profile();
  for (int l = 0; l < m.wts.L; ++l)
    for (int k = 0; k < kFreshProfSlots; ++k)
      c["fresh_server_l" + std::to_string(l) + "_" + kFreshProfNames[k] + (k == kProfSteps ? "" : "_cycles")] =
          double(prof[size_t(l * kFreshProfSlots + k)]) / n;
  c["fresh_server_requests"] = n;  // by its current launch (the sums above are its)
  c["fresh_server_launches"] = double(m.server->launches());
  return c;
}

std::string BatchRunner::fresh_server_why() const { return impl_->fresh_why; }

void BatchRunner::backtest(const float* x, size_t series, size_t ticks, int window, Backend::BacktestOutput out,
                           std::atomic<size_t>* done, ArraysIn where) {
  Impl& m = *impl_;
  HOTPATH_CUDA_CHECK(cudaSetDevice(m.device));
  const size_t I = size_t(m.wts.I), O = size_t(m.wts.O), T = ticks, S = series;
  if (S == 0 || T == 0) return;
  if (window > 0) {
    // Rule 1: the window ending at t consumes ticks t-W+1 .. t; steps before tick 0 leave its state zero.
    const long long P = std::max(m.P, m.R + window);  // a whole chunk of windows and one history always fit
    m.ensure(m.R, P);
    m.run(window_chunks(S, T, size_t(window), size_t(m.R), size_t(P)), x, I, out, O, done, stats_, where);
    return;
  }
  const StreamingShape sh = streaming_shape(S, T, size_t(m.R), size_t(m.P));
  m.ensure(static_cast<long long>(sh.group), static_cast<long long>(sh.group * sh.slice));
  m.run(streaming_chunks(S, T, size_t(m.R), size_t(m.P)), x, I, out, O, done, stats_, where);
}

void BatchRunner::fresh(const float* x, size_t batch, size_t window, float* out, ArraysIn where) {
  Impl& m = *impl_;
  HOTPATH_CUDA_CHECK(cudaSetDevice(m.device));
  const size_t I = size_t(m.wts.I), O = size_t(m.wts.O), W = window;
  if (batch == 0) return;
  if (where == ArraysIn::host && m.serve_fresh(x, batch, W, out, stats_)) return;
  // Nothing is shared between fresh windows: each row needs its own W projected ticks. Rows per chunk
  // up to R, as far as a 1 GiB projection buffer allows (the backtests' smaller one would leave the
  // GPU mostly idle at W ~ 50).
  const size_t p0_rows = std::max<size_t>(size_t(m.P), (size_t(1) << 30) / (sizeof(float) * size_t(m.wts.Np)));
  const size_t per = std::max<size_t>(1, std::min<size_t>(size_t(m.R), p0_rows / W));
  const size_t rows = std::min(per, batch);
  m.ensure(static_cast<long long>(rows), static_cast<long long>(rows * W));
  m.run(fresh_chunks(batch, W, rows), x, I, Backend::BacktestOutput{out, nullptr}, O, nullptr, stats_, where);
}

size_t BatchRunner::first_nonfinite(const float* x, size_t n) {
  Impl& m = *impl_;
  HOTPATH_CUDA_CHECK(cudaSetDevice(m.device));
  if (!m.first_bad.get()) m.first_bad = DeviceBuffer<unsigned long long>(1);
  const cudaStream_t st = m.compute.get();
  unsigned long long first = n;
  m.after_legacy_stream({st});
  HOTPATH_CUDA_CHECK(cudaMemcpyAsync(m.first_bad.get(), &first, sizeof first, cudaMemcpyHostToDevice, st));
  HOTPATH_CUDA_CHECK(launch_find_nonfinite(x, n, m.first_bad.get(), st));
  HOTPATH_CUDA_CHECK(cudaMemcpyAsync(&first, m.first_bad.get(), sizeof first, cudaMemcpyDeviceToHost, st));
  HOTPATH_CUDA_CHECK(cudaStreamSynchronize(st));
  return size_t(std::min<unsigned long long>(first, n));
}

}  // namespace hotpath::cuda
