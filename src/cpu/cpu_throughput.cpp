// The CPU backend's throughput path (Backend::run_batch, Backend::backtest): tiles of up to kMaxTileCols
// sequences (an AMX tile's rows; the vector kernels take them 4 at a time) advanced in lockstep from zero
// state on the pool's workers and the caller (or a thread per allowed core without a cpuset), each thread
// taking the next tile as it finishes one. A backtest's windows (docs/model.md: the partial ones from tick
// 0, then one full window a tick) are cut into tiles here; the tick path is cpu_backend.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/cpu_backend_impl.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::cpu {

CpuBackend::TileScratch::TileScratch(const PackedModel& pm)
    : P(size_t(kMaxTileCols) * pm.num_layers * pm.gate_floats()),
      c(size_t(kMaxTileCols) * pm.num_layers * pm.Hp),
      ha(size_t(kMaxTileCols) * pm.Hp),
      hb(size_t(kMaxTileCols) * pm.Hp),
      z(pm.Op),
      pairs(gemm_scratch_words(std::max(pm.I, pm.H))) {}

void CpuBackend::run_tile(const Tile& tile, TileScratch& s, BacktestOutput out, std::atomic<size_t>* done) const {
  const int nb = pm_.nb, Hp = pm_.Hp, L = pm_.num_layers, n = tile.n;
  const size_t G = pm_.gate_floats(), O = size_t(pm_.O);
  const float* in[kMaxTileCols];
  const float* add[kMaxTileCols];
  float* Pp[kMaxTileCols];
  float* hp[kMaxTileCols];
  // Zero state: P = b (W_hh·0 + b), c = 0.
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < L; ++l) {
      std::memcpy(s.P.data() + (size_t(j) * L + l) * G, pm_.layers[l].bias.data(), G * sizeof(float));
      std::memset(s.c.data() + (size_t(j) * L + l) * Hp, 0, size_t(Hp) * sizeof(float));
    }
  // Progress within the tile too: a streaming series is one tile of T steps.
  size_t unreported = 0;
  for (size_t t = 0; t < tile.steps && !out.stopped(); ++t) {
    float* hin = s.ha.data();
    float* hout = s.hb.data();
    for (int l = 0; l < L; ++l) {
      for (int j = 0; j < n; ++j) {
        Pp[j] = s.P.data() + (size_t(j) * L + l) * G;
        in[j] = l == 0 ? tile.x[j] + t * size_t(pm_.I) : hin + size_t(j) * Hp;
        add[j] = Pp[j];
        hp[j] = hout + size_t(j) * Hp;
      }
      gemm(pm_.layers[l], false, 0, nb, n, in, add, Pp, s.pairs.data());
      for (int j = 0; j < n; ++j) k_->cell(Pp[j], nullptr, s.c.data() + (size_t(j) * L + l) * Hp, hp[j], 0, nb);
      if (t + 1 < tile.steps) {  // the next step's P = W_hh·h + b
        for (int j = 0; j < n; ++j) {
          add[j] = pm_.layers[l].bias.data();
          in[j] = hp[j];
        }
        gemm(pm_.layers[l], true, 0, nb, n, in, add, Pp, s.pairs.data());
      }
      std::swap(hin, hout);
    }
    if (t < tile.emit_from) continue;
    for (int j = 0; j < n; ++j) {
      k_->head(pm_.head_w.data(), pm_.head_bias ? pm_.head_b.data() : nullptr, pm_.O, Hp, hin + size_t(j) * Hp,
               s.z.data());
      const size_t row = tile.row0[j] + (t - tile.emit_from);
      if (out.f32) std::memcpy(out.f32 + row * O, s.z.data(), O * sizeof(float));
      else
        for (size_t o = 0; o < O; ++o) out.f64[row * O + o] = s.z[o];
    }
    unreported += size_t(n);
    if (done && (unreported >= 1024 || t + 1 == tile.steps)) {
      done->fetch_add(unreported, std::memory_order_relaxed);
      unreported = 0;
    }
  }
}

void CpuBackend::tiles_part(TileJob& job, TileScratch& scratch) const {
  for (size_t k; !job.out.stopped() && (k = job.next.fetch_add(1, std::memory_order_relaxed)) < job.count;)
    run_tile(job.tile(k), scratch, job.out, job.done);
}

void CpuBackend::run_tiles(TileJob& job) {
  if (job.count == 0) return;
  if (pending_) finish_precompute();
  if (pool_.size() > 0) {
    // The cpuset's workers and its first core (this thread) all take tiles.
    const int n = pool_.size() + 1;
    job.scratch.reserve(size_t(n));
    for (int p = 0; p < n; ++p) job.scratch.emplace_back(pm_);
    std::pair<CpuBackend*, TileJob*> ctx{this, &job};
    pool_.start(&tiles_job, &ctx);
    tiles_part(job, job.scratch.back());
    pool_.wait();
  } else {
    // No cpuset: a thread per core this process may use, for this call.
    const size_t cores = std::max<size_t>(1, util::allowed_cores().size());
    const int n = int(std::min(job.count, cores));
    job.scratch.reserve(size_t(n));
    for (int p = 0; p < n; ++p) job.scratch.emplace_back(pm_);
    util::ThreadGroup threads;  // joined however this ends (a thread the system refuses throws)
    for (int p = 1; p < n; ++p)
      threads.start("cpu backend throughput thread " + std::to_string(p) + " of " + std::to_string(n - 1),
                    [this, &job, p] { tiles_part(job, job.scratch[size_t(p)]); });
    tiles_part(job, job.scratch[0]);
    threads.join();
  }
}

void CpuBackend::run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) {
  const size_t I = size_t(pm_.I), O = size_t(pm_.O);
  if (window < 1) throw Error("cpu backend: run_batch needs a window length >= 1");
  if (x.size() != batch * window * I)
    throw Error("cpu backend: run_batch input holds " + std::to_string(x.size()) + " floats, expected " +
                std::to_string(batch) + " x " + std::to_string(window) + " x " + std::to_string(I));
  if (out.size() < batch * O)
    throw Error("cpu backend: run_batch output holds " + std::to_string(out.size()) + " floats, expected " +
                std::to_string(batch * O));
  check_batch_input(x, window);
  // A fixed scaler applies to every element (a rolling one is refused: batch windows have no stream).
  AlignedArray<float> scaled;
  if (scaler_.active()) {
    scaled = AlignedArray<float>(x.size());
    scaler_.scale_batch(x, scaled.data());
  }
  const float* xs = scaler_.active() ? scaled.data() : x.data();
  TileJob job;
  job.count = (batch + kMaxTileCols - 1) / kMaxTileCols;
  job.out.f32 = out.data();
  job.tile = [&](size_t k) {
    Tile t;
    t.n = int(std::min<size_t>(kMaxTileCols, batch - k * kMaxTileCols));
    t.steps = window;
    t.emit_from = window - 1;
    for (int j = 0; j < t.n; ++j) {
      t.row0[j] = k * kMaxTileCols + j;
      t.x[j] = xs + t.row0[j] * window * I;
    }
    return t;
  };
  run_tiles(job);
}

void CpuBackend::backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                          std::atomic<size_t>* done) {
  const size_t I = size_t(pm_.I), T = ticks, G = kMaxTileCols;
  if (series == 0 || ticks == 0) return;
  // Scaled as step() would scale each series: a fixed scaler elementwise, a rolling one restarting
  // with every series (its statistics for tick t come from ticks before t only).
  AlignedArray<float> scaled;
  if (scaler_.active()) {
    scaled = AlignedArray<float>(x.size());
    scaler_.scale_series(x, series, T, scaled.data());
  }
  const float* xs = scaler_.active() ? scaled.data() : x.data();
  TileJob job;
  job.out = out;
  job.done = done;
  // Tile k of series from tick 0, G series in lockstep, every step emitted.
  auto series_tile = [&](size_t k, size_t steps) {
    Tile t;
    t.n = int(std::min(G, series - k * G));
    t.steps = steps;
    for (int j = 0; j < t.n; ++j) {
      t.x[j] = xs + (k * G + j) * T * I;
      t.row0[j] = (k * G + j) * T;
    }
    return t;
  };
  if (streaming_) {
    // One sequence per series, the whole series.
    job.count = (series + G - 1) / G;
    job.tile = [&](size_t k) { return series_tile(k, T); };
  } else {
    // The window rule (docs/model.md): ticks t < W-1 are the partial windows that start at tick 0, i.e.
    // one sequence per series over its first min(W-1, T) ticks with every step emitted (the head tiles, G
    // series each); every later tick is one full window of W steps ending there (G consecutive windows per
    // tile).
    const size_t W = size_t(W_), head = std::min(W - 1, T), full = T > head ? T - head : 0;
    const size_t head_tiles = head > 0 ? (series + G - 1) / G : 0, per_series = (full + G - 1) / G;
    job.count = head_tiles + series * per_series;
    job.tile = [&, W, head, full, head_tiles, per_series](size_t k) {
      if (k < head_tiles) return series_tile(k, head);
      k -= head_tiles;
      Tile t;
      const size_t s = k / per_series, first = (k % per_series) * G;  // window index within the series
      t.n = int(std::min(G, full - first));
      t.steps = W;
      t.emit_from = W - 1;
      for (int j = 0; j < t.n; ++j) {
        const size_t end = head + first + j;  // the tick the window ends at
        t.x[j] = xs + (s * T + end + 1 - W) * I;
        t.row0[j] = s * T + end;
      }
      return t;
    };
  }
  // The head tiles (longest, up to W-1 steps) come first, so no thread is left with one at the end.
  run_tiles(job);
  reset();
}

}  // namespace hotpath::cpu
