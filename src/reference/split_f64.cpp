// Built with -ffp-contract=off (src/reference/CMakeLists.txt): every a += w * x here is a multiply and an
// add, each rounded, as in FastF64 and lstm_step, whatever the vector width of the clone that runs.
#include "reference/split_f64.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "util/arch.hpp"

namespace hotpath::reference {
namespace {

// A waiting thread spins with a pause for kPause (a barrier inside a step on idle cores: load
// imbalance, a few microseconds), then yields until kSpin (on busy cores the thread it waits for may be
// queued behind it: spinning on would keep it off; measured on the 2-core VM at load 5, vollo_small on 2
// threads: 0.71-0.76 ms a step spinning, 0.52-0.56 ms yielding), then sleeps on a futex: long enough to
// bridge the checker's work between two steps, short enough to cost little while it waits for the
// benchmark's next output.
constexpr auto kPause = std::chrono::microseconds(5);
constexpr auto kSpin = std::chrono::microseconds(50);

using arch::cpu_relax;

// Waits until `word` differs from `seen`: spins, yields, then sleeps on the futex behind atomic::wait.
// `sleepers` counts the threads that may be asleep, so that wake() makes a system call only when one
// might be.
void await(const std::atomic<uint32_t>& word, uint32_t seen, std::atomic<int>& sleepers) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0{};
  bool yielding = false;
  for (unsigned i = 1;; ++i) {
    if (word.load(std::memory_order_acquire) != seen) return;
    if (yielding) sched_yield();
    else cpu_relax();
    if (yielding || i % 16 == 0) {  // the clock costs more than a pause: read it now and then
      const auto now = Clock::now();
      if (t0 == Clock::time_point{}) t0 = now;
      else if (now - t0 > kSpin) break;
      else yielding = now - t0 > kPause;
    }
  }
  // Dekker with wake(): either wake() sees this count, or this thread sees the new word.
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (word.load(std::memory_order_seq_cst) == seen) word.wait(seen, std::memory_order_seq_cst);
  sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void wake(std::atomic<uint32_t>& word, uint32_t value, const std::atomic<int>& sleepers) {
  word.store(value, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) > 0) word.notify_all();
}

using Buf = std::unique_ptr<double[], void (*)(void*)>;
using FloatBuf = std::unique_ptr<float[], void (*)(void*)>;

// n values, zeroed, on a 64-byte boundary (whole vector loads, no line split).
template <class T>
std::unique_ptr<T[], void (*)(void*)> zeroed(size_t n) {
  const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return {static_cast<T*>(p), std::free};
}
Buf zeros(size_t n) { return zeroed<double>(n); }

// Rows per block: 4 hidden units x their 4 gates, unit-major (row 4u + g: unit u's gate g, PyTorch's
// order i, f, g, o). A block's weights are [n][16], so the k loop reads one contiguous stream.
constexpr int kRows = 16;
constexpr int kUnits = 4;

// Eight doubles, loaded and stored through any double pointer (8-byte alignment is enough); eight floats
// loaded and widened (exactly: every float is a double). Generic vectors: each clone below maps them onto
// its own registers. Macros, not functions: a function taking or returning one would have a different ABI
// in each clone.
typedef double d8 __attribute__((vector_size(64), aligned(8), may_alias));
typedef float f8 __attribute__((vector_size(32), aligned(4), may_alias));
#define LOAD8(p) (*reinterpret_cast<const d8*>(p))
#define STORE8(p, v) (*reinterpret_cast<d8*>(p) = (v))
#define LOAD8_double(p) LOAD8(p)
#define LOAD8_float(p) __builtin_convertvector(*reinterpret_cast<const f8*>(p), d8)

// One clone per vector width, chosen at load time.
#if defined(__x86_64__)
#define HOTPATH_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOTPATH_VECTOR_CLONES
#endif

// For weights stored as W (double, or float where every weight is one):
//
// dot_blocks: acc[r] += w[k][r] * v[k] for k = 0 .. n-1 in order, for the 16 rows of `blocks` (1 or 2)
// blocks whose weights start at w0 and w1; each row has its own lane of an accumulator, so the order of
// every row's sum is the plain one. Two blocks at once keep four independent add chains in flight.
//
// dot_four_ticks: the same for two blocks and four ticks at once (step_many's input terms): tick t's
// input at xs + t * xstride, its 32 accumulators at acc + t * astride. Each weight vector loaded once
// serves four ticks, so the loop runs on the arithmetic rather than on the weights' stream.
#define HOTPATH_DEFINE_DOTS(W)                                                                                      \
  HOTPATH_VECTOR_CLONES void dot_blocks(const W* w0, const W* w1, const double* v, size_t n, int blocks,            \
                                        double* acc0, double* acc1) {                                               \
    d8 a0 = LOAD8(acc0), a1 = LOAD8(acc0 + 8);                                                                      \
    if (blocks == 2) {                                                                                              \
      d8 b0 = LOAD8(acc1), b1 = LOAD8(acc1 + 8);                                                                    \
      for (size_t k = 0; k < n; ++k) {                                                                              \
        const double x = v[k];                                                                                      \
        a0 += LOAD8_##W(w0 + k * kRows) * x;                                                                        \
        a1 += LOAD8_##W(w0 + k * kRows + 8) * x;                                                                    \
        b0 += LOAD8_##W(w1 + k * kRows) * x;                                                                        \
        b1 += LOAD8_##W(w1 + k * kRows + 8) * x;                                                                    \
      }                                                                                                             \
      STORE8(acc1, b0);                                                                                             \
      STORE8(acc1 + 8, b1);                                                                                         \
    } else {                                                                                                        \
      for (size_t k = 0; k < n; ++k) {                                                                              \
        const double x = v[k];                                                                                      \
        a0 += LOAD8_##W(w0 + k * kRows) * x;                                                                        \
        a1 += LOAD8_##W(w0 + k * kRows + 8) * x;                                                                    \
      }                                                                                                             \
    }                                                                                                               \
    STORE8(acc0, a0);                                                                                               \
    STORE8(acc0 + 8, a1);                                                                                           \
  }                                                                                                                 \
  HOTPATH_VECTOR_CLONES void dot_four_ticks(const W* w0, const W* w1, const double* xs, size_t xstride, size_t n,   \
                                            double* acc, size_t astride) {                                          \
    d8 a[4][4];                                                                                                     \
    for (int t = 0; t < 4; ++t)                                                                                     \
      for (int j = 0; j < 4; ++j) a[t][j] = LOAD8(acc + t * astride + 8 * j);                                       \
    for (size_t k = 0; k < n; ++k) {                                                                                \
      const d8 p0 = LOAD8_##W(w0 + k * kRows), p1 = LOAD8_##W(w0 + k * kRows + 8);                                 \
      const d8 q0 = LOAD8_##W(w1 + k * kRows), q1 = LOAD8_##W(w1 + k * kRows + 8);                                 \
      for (int t = 0; t < 4; ++t) {                                                                                 \
        const double x = xs[t * xstride + k];                                                                       \
        a[t][0] += p0 * x;                                                                                          \
        a[t][1] += p1 * x;                                                                                          \
        a[t][2] += q0 * x;                                                                                          \
        a[t][3] += q1 * x;                                                                                          \
      }                                                                                                             \
    }                                                                                                               \
    for (int t = 0; t < 4; ++t)                                                                                     \
      for (int j = 0; j < 4; ++j) STORE8(acc + t * astride + 8 * j, a[t][j]);                                       \
  }
HOTPATH_DEFINE_DOTS(double)
HOTPATH_DEFINE_DOTS(float)
#undef HOTPATH_DEFINE_DOTS
#undef LOAD8_double
#undef LOAD8_float
#undef LOAD8
#undef STORE8
#undef HOTPATH_VECTOR_CLONES

}  // namespace

F64Team::F64Team(int threads, std::function<void(int)> on_start)
    : n_(std::max(1, threads)), threads_([this] {
        stop_ = true;
        wake(go_, go_.load(std::memory_order_relaxed) + 1, go_sleepers_);
      }) {
  for (int k = 1; k < n_; ++k)
    threads_.start("float64 reference thread " + std::to_string(k + 1) + " of " + std::to_string(n_),
                   [this, k, on_start] {
                     if (on_start) on_start(k);
                     helper(k);
                   });
}

F64Team::~F64Team() { threads_.stop_and_join(); }

void F64Team::helper(int k) {
  // run() N + 1 starts only after every worker finished run() N, so no generation is ever skipped.
  for (uint32_t seen = 0;; ++seen) {
    await(go_, seen, go_sleepers_);
    if (stop_) return;
    job_(ctx_, k);
    sync();
  }
}

void F64Team::run(Job job, void* ctx) {
  if (n_ > 1) {
    job_ = job;
    ctx_ = ctx;
    wake(go_, go_.load(std::memory_order_relaxed) + 1, go_sleepers_);  // publishes job_ and ctx_
  }
  job(ctx, 0);
  sync();
}

void F64Team::sync() {
  if (n_ == 1) return;
  const uint32_t gen = passed_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(n_)) {
    arrived_.store(0, std::memory_order_relaxed);
    wake(passed_, gen + 1, passed_sleepers_);
    return;
  }
  await(passed_, gen, passed_sleepers_);
}

// Worker k's part: blocks [b0, b1) of ceil(H / 4), i.e. units [4 b0, min(H, 4 b1)); only the last block
// of the model can be partial (its missing units have zero rows and are never written).
struct SplitF64::Slice {
  int b0 = 0, b1 = 0;
  // per layer: [blocks][in + H][16], the w_ih columns then the w_hh columns; as floats when every weight
  // of the model is one (SplitF64::floats_: the same values in half the bytes a step streams)
  std::vector<Buf> w;
  std::vector<FloatBuf> wf;
  std::vector<Buf> bias;    // per layer: [blocks][16], b_ih + b_hh
  std::vector<double> c;    // [L][blocks * 4]: the cell state of its own units, read by no other thread
  std::vector<double> acc;  // step_many: [T][blocks][16], the gate sums of every tick of the batch
  std::exception_ptr error;
  template <class W>
  const W* weights(int l) const {
    if constexpr (std::is_same_v<W, float>) return wf[size_t(l)].get();
    else return w[size_t(l)].get();
  }
};

namespace {

// Every weight of the LSTM layers is a float (a model saved in fp32 or rounded to half precision):
// SplitF64 then keeps them as floats, widened exactly when read.
bool lstm_weights_are_floats(const Model& m) {
  auto is_float = [](double v) { return double(float(v)) == v || std::isnan(v); };
  for (const LstmLayer& layer : m.layers) {
    for (double v : layer.w_ih)
      if (!is_float(v)) return false;
    for (double v : layer.w_hh)
      if (!is_float(v)) return false;
  }
  return true;
}

}  // namespace

namespace {

// Worker-owned weights of blocks [b0, b1): per layer [blocks][in + H][16], the w_ih columns then the w_hh
// columns (as floats when `floats`), and [blocks][16] of b_ih + b_hh. Run by the worker that uses them, so
// that its pages are first touched there.
void pack_blocks(const Model& m, int b0, int b1, bool floats, std::vector<Buf>& ws, std::vector<FloatBuf>& wfs,
                 std::vector<Buf>& biases) {
  const ModelConfig& cfg = m.config;
  const int H = cfg.hidden_size, nb = b1 - b0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const LstmLayer& layer = m.layers[size_t(l)];
    const size_t in = size_t(cfg.layer_input_size(l)), K = in + size_t(H);
    Buf w(nullptr, std::free), bias = zeros(size_t(nb) * kRows);
    FloatBuf wf(nullptr, std::free);
    if (floats) wf = zeroed<float>(size_t(nb) * K * kRows);
    else w = zeros(size_t(nb) * K * kRows);
    const std::vector<double> bsum = layer.bias_sum(H);
    for (int b = 0; b < nb; ++b)
      for (int j = 0; j < kRows; ++j) {
        const int unit = (b0 + b) * kUnits + j / 4, gate = j % 4;
        if (unit >= H) continue;
        const size_t r = size_t(gate) * H + unit, at = size_t(b) * K * kRows + j;
        bias[size_t(b) * kRows + j] = bsum[r];
        for (size_t k = 0; k < K; ++k) {
          const double v = k < in ? layer.w_ih[r * in + k] : layer.w_hh[r * H + (k - in)];
          if (floats) wf[at + k * kRows] = float(v);
          else w[at + k * kRows] = v;
        }
      }
    ws.push_back(std::move(w));
    wfs.push_back(std::move(wf));
    biases.push_back(std::move(bias));
  }
}

// The head's weights as [ceil(O / 16)][H][16] and its biases [ceil(O / 16) * 16] (zeros without a bias).
void pack_head(const Model& m, Buf& w, std::vector<double>& b) {
  const int H = m.config.hidden_size, O = m.config.output_size;
  const size_t ob = (size_t(O) + kRows - 1) / kRows;
  w = zeros(ob * H * kRows);
  b.assign(ob * kRows, 0.0);
  for (int o = 0; o < O; ++o) {
    if (!m.head_b.empty()) b[size_t(o)] = m.head_b[size_t(o)];
    for (int k = 0; k < H; ++k) w[(size_t(o) / kRows * H + k) * kRows + o % kRows] = m.head_w[size_t(o) * H + k];
  }
}

// The head on h (H values): O values into z, each from its bias adding w[o][k] h[k] in order.
void head_on(const double* w, const std::vector<double>& b, const double* h, size_t H, size_t O, std::span<double> z) {
  alignas(64) double acc[kRows];
  for (size_t ob = 0; ob * kRows < O; ++ob) {
    std::memcpy(acc, &b[ob * kRows], sizeof acc);
    dot_blocks(w + ob * H * kRows, static_cast<const double*>(nullptr), h, H, 1, acc, nullptr);
    for (size_t o = ob * kRows; o < std::min(O, (ob + 1) * kRows); ++o) z[o] = acc[o - ob * kRows];
  }
}

// Worker k of n owns the blocks of 4 units [blocks k / n, blocks (k + 1) / n).
template <class Slice>
std::vector<std::unique_ptr<Slice>> split_blocks(int H, int n) {
  const int blocks = (H + kUnits - 1) / kUnits;
  std::vector<std::unique_ptr<Slice>> out;
  for (int k = 0; k < n; ++k) {
    auto s = std::make_unique<Slice>();
    s->b0 = int(long(blocks) * k / n);
    s->b1 = int(long(blocks) * (k + 1) / n);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

SplitF64::SplitF64(const Model& m, F64Team& team)
    : cfg_(m.config), team_(team), floats_(lstm_weights_are_floats(m)), head_w_(nullptr, std::free) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers;
  slices_ = split_blocks<Slice>(H, team.size());
  Packing packing{this, &m};
  team_.run(&SplitF64::pack_job, &packing);
  for (const auto& s : slices_)
    if (s->error) std::rethrow_exception(s->error);

  h_[0].assign(size_t(L) * H, 0.0);
  h_[1].assign(size_t(L) * H, 0.0);
  x_.assign(size_t(cfg_.input_size), 0.0);
  pack_head(m, head_w_, head_b_);
}

SplitF64::~SplitF64() = default;

void SplitF64::pack_job(void* ctx, int worker) {
  const auto& p = *static_cast<Packing*>(ctx);
  SplitF64& self = *p.self;
  Slice& s = *self.slices_[size_t(worker)];
  try {
    pack_blocks(*p.model, s.b0, s.b1, self.floats_, s.w, s.wf, s.bias);
    s.c.assign(size_t(self.cfg_.num_layers) * (s.b1 - s.b0) * kUnits, 0.0);
  } catch (...) {
    s.error = std::current_exception();  // a job must not throw: the constructor rethrows it
  }
}

namespace {

// The cells of the units of one or two blocks from their gate sums g ([blocks][16], unit-major rows):
// c in place, h into h[unit].
void cells(const double* acc, int first_unit, int units, int H, double* c, double* h) {
  for (int u = 0; u < units; ++u) {
    const int unit = first_unit + u;
    if (unit >= H) break;
    const double* g = acc + (u / kUnits) * kRows + (u % kUnits) * 4;
    const double i = sigmoid(g[0]), f = sigmoid(g[1]), gg = std::tanh(g[2]), o = sigmoid(g[3]);
    double& cu = c[u];
    cu = f * cu + i * gg;
    h[unit] = o * std::tanh(cu);
  }
}

}  // namespace

template <class W>
void SplitF64::step_slice(SplitF64& self, Slice& s) {
  const int H = self.cfg_.hidden_size, L = self.cfg_.num_layers, nb = s.b1 - s.b0;
  const double* old_h = self.h_[self.cur_].data();
  double* new_h = self.h_[self.cur_ ^ 1].data();
  for (int l = 0; l < L; ++l) {
    const double* in = l == 0 ? self.x_.data() : new_h + size_t(l - 1) * H;
    const size_t n_in = size_t(self.cfg_.layer_input_size(l)), K = n_in + size_t(H);
    const W* w = s.template weights<W>(l);
    const double* bias = s.bias[size_t(l)].get();
    double* c = s.c.data() + size_t(l) * nb * kUnits;
    for (int b = 0; b < nb; b += 2) {
      const int pair = std::min(2, nb - b);
      alignas(64) double acc[2 * kRows];
      std::memcpy(acc, bias + size_t(b) * kRows, sizeof(double) * kRows * size_t(pair));
      const W* w0 = w + size_t(b) * K * kRows;
      const W* w1 = w0 + K * kRows;
      // Bias, then the input's terms, then the recurrent ones: FastF64's order.
      dot_blocks(w0, w1, in, n_in, pair, acc, acc + kRows);
      dot_blocks(w0 + n_in * kRows, w1 + n_in * kRows, old_h + size_t(l) * H, size_t(H), pair, acc, acc + kRows);
      cells(acc, (s.b0 + b) * kUnits, pair * kUnits, H, c + size_t(b) * kUnits, new_h + size_t(l) * H);
    }
    // The next layer reads every unit's new h; the last layer's barrier is run()'s own.
    if (l + 1 < L) self.team_.sync();
  }
}

void SplitF64::step_job(void* ctx, int worker) {
  auto& self = *static_cast<SplitF64*>(ctx);
  Slice& s = *self.slices_[size_t(worker)];
  if (self.floats_) step_slice<float>(self, s);
  else step_slice<double>(self, s);
}

// T ticks layer by layer: a layer's input terms for the whole batch first (each weight read once for
// four ticks), then its recurrence tick by tick, a barrier after each (every unit's h of tick t before
// tick t + 1). Every row's sum is step()'s: bias, the input's terms, the recurrent ones, in order.
template <class W>
void SplitF64::many_slice(SplitF64& self, Slice& s) {
  const int H = self.cfg_.hidden_size, L = self.cfg_.num_layers, I = self.cfg_.input_size, nb = s.b1 - s.b0;
  const int T = self.many_;
  const size_t astride = size_t(nb) * kRows;
  double* const acc = s.acc.data();
  for (int l = 0; l < L; ++l) {
    const size_t n_in = size_t(self.cfg_.layer_input_size(l)), K = n_in + size_t(H);
    const W* w = s.template weights<W>(l);
    const double* bias = s.bias[size_t(l)].get();
    const double* in = l == 0 ? self.xs_.data() : self.seq_[(l - 1) & 1].data();
    const size_t in_stride = l == 0 ? size_t(I) : size_t(H);
    double* out = self.seq_[l & 1].data();  // [T][H]
    double* c = s.c.data() + size_t(l) * nb * kUnits;
    if (nb > 0)  // a worker with no blocks has no sums, only the barriers
      for (int t = 0; t < T; ++t) std::memcpy(acc + t * astride, bias, sizeof(double) * astride);
    for (int b = 0; b < nb; b += 2) {
      const int pair = std::min(2, nb - b);
      const W* w0 = w + size_t(b) * K * kRows;
      const W* w1 = w0 + K * kRows;
      int t = 0;
      if (pair == 2)
        for (; t + 4 <= T; t += 4) dot_four_ticks(w0, w1, in + t * in_stride, in_stride, n_in, acc + t * astride + b * kRows, astride);
      for (; t < T; ++t) {
        double* a = acc + t * astride + b * kRows;
        dot_blocks(w0, w1, in + t * in_stride, n_in, pair, a, a + kRows);
      }
    }
    for (int t = 0; t < T; ++t) {
      const double* h_prev = t == 0 ? self.h_[self.cur_].data() + size_t(l) * H : out + size_t(t - 1) * H;
      for (int b = 0; b < nb; b += 2) {
        const int pair = std::min(2, nb - b);
        const W* w0 = w + size_t(b) * K * kRows + n_in * kRows;
        const W* w1 = w0 + K * kRows;
        double* a = acc + t * astride + b * kRows;
        dot_blocks(w0, w1, h_prev, size_t(H), pair, a, a + kRows);
        cells(a, (s.b0 + b) * kUnits, pair * kUnits, H, c + size_t(b) * kUnits, out + size_t(t) * H);
      }
      self.team_.sync();
    }
    // The batch's last h of this layer, for the next call (every worker read the old one at tick 0)
    for (int unit = s.b0 * kUnits; unit < std::min(H, s.b1 * kUnits); ++unit)
      self.h_[self.cur_][size_t(l) * H + unit] = out[size_t(T - 1) * H + unit];
  }
}

void SplitF64::many_job(void* ctx, int worker) {
  auto& self = *static_cast<SplitF64*>(ctx);
  Slice& s = *self.slices_[size_t(worker)];
  if (self.floats_) many_slice<float>(self, s);
  else many_slice<double>(self, s);
}

void SplitF64::step(std::span<const double> x) {
  std::copy(x.begin(), x.end(), x_.begin());
  team_.run(&SplitF64::step_job, this);
  cur_ ^= 1;
}

void SplitF64::step(std::span<const float> x) {
  std::copy(x.begin(), x.end(), x_.begin());  // exact: every float is a double
  team_.run(&SplitF64::step_job, this);
  cur_ ^= 1;
}

void SplitF64::step_many(std::span<const double> xs) {
  const size_t I = size_t(cfg_.input_size), H = size_t(cfg_.hidden_size);
  const size_t T = I ? xs.size() / I : 0;
  if (T == 0) return;
  xs_.assign(xs.begin(), xs.begin() + ptrdiff_t(T * I));
  for (auto& q : seq_)
    if (q.size() < T * H) q.resize(T * H);
  for (auto& s : slices_)
    if (s->acc.size() < T * size_t(s->b1 - s->b0) * kRows) s->acc.resize(T * size_t(s->b1 - s->b0) * kRows);
  many_ = int(T);
  team_.run(&SplitF64::many_job, this);
}

void SplitF64::head(std::span<double> z) const {
  const size_t H = size_t(cfg_.hidden_size), O = size_t(cfg_.output_size);
  head_on(head_w_.get(), head_b_, h_[cur_].data() + (size_t(cfg_.num_layers) - 1) * H, H, O, z);
}

void SplitF64::reset() {
  // No job is running: the next run() publishes these stores to the workers.
  for (auto& h : h_) std::fill(h.begin(), h.end(), 0.0);
  for (auto& s : slices_) std::fill(s->c.begin(), s->c.end(), 0.0);
}

LstmState SplitF64::state() const {
  LstmState st(cfg_);
  const int H = cfg_.hidden_size;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    std::copy_n(h_[cur_].begin() + ptrdiff_t(l) * H, H, st.h[size_t(l)].begin());
    for (const auto& s : slices_) {
      const int nb = s->b1 - s->b0;
      for (int u = 0; u < nb * kUnits; ++u) {
        const int unit = s->b0 * kUnits + u;
        if (unit < H) st.c[size_t(l)][size_t(unit)] = s->c[size_t(l) * nb * kUnits + u];
      }
    }
  }
  return st;
}

int SplitF64::useful_threads(const ModelConfig& cfg, int asked) {
  const long long H = cfg.hidden_size;
  long long mac = 0;
  for (int l = 0; l < cfg.num_layers; ++l) mac += 4 * H * (cfg.layer_input_size(l) + H);
  const long long by_work = std::max(1LL, mac / kMinMultiplyAdds), by_units = std::max(1LL, (H + kUnits - 1) / kUnits);
  return int(std::max(1LL, std::min({(long long)asked, by_work, by_units})));
}

// ---- SplitStatesF64 ----------------------------------------------------------------------------------

// Worker k's blocks [b0, b1) of every state: its weights (as SplitF64's slice, always as doubles: read
// from cache for four states at a time, a float's widening would cost more than its bytes save), its
// units' c of every state [L][S][blocks * 4], and the gate sums of one layer for every state [S][blocks][16].
struct SplitStatesF64::Slice {
  int b0 = 0, b1 = 0;
  std::vector<Buf> w;
  std::vector<FloatBuf> unused;  // pack_blocks' float weights: none here
  std::vector<Buf> bias;
  std::vector<double> c;
  std::vector<double> acc;
  std::exception_ptr error;
};

namespace {
struct StatesPacking {
  SplitStatesF64* self;
  const Model* model;
  void (*pack)(StatesPacking&, int);
};
}  // namespace

SplitStatesF64::SplitStatesF64(const Model& m, F64Team& team, int states)
    : cfg_(m.config), team_(team), states_(std::max(1, states)), head_w_(nullptr, std::free) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers;
  slices_ = split_blocks<Slice>(H, team.size());
  StatesPacking packing{this, &m, [](StatesPacking& p, int worker) {
                          SplitStatesF64& self = *p.self;
                          Slice& s = *self.slices_[size_t(worker)];
                          try {
                            const size_t nb = size_t(s.b1 - s.b0), S = size_t(self.states_);
                            pack_blocks(*p.model, s.b0, s.b1, /*floats=*/false, s.w, s.unused, s.bias);
                            s.c.assign(size_t(self.cfg_.num_layers) * S * nb * kUnits, 0.0);
                            s.acc.assign(S * nb * kRows, 0.0);
                          } catch (...) {
                            s.error = std::current_exception();  // a job must not throw: rethrown below
                          }
                        }};
  team_.run([](void* ctx, int worker) {
    auto& p = *static_cast<StatesPacking*>(ctx);
    p.pack(p, worker);
  }, &packing);
  for (const auto& s : slices_)
    if (s->error) std::rethrow_exception(s->error);
  h_.assign(size_t(states_) * L * H, 0.0);
  pack_head(m, head_w_, head_b_);
}

SplitStatesF64::~SplitStatesF64() = default;

// One layer at a time: every state's gate sums of the worker's blocks (a pair of blocks and a run of
// kChunkColumns columns at a time, four states at a time through them), a barrier (every worker has read
// the layer's old h), the cells, a barrier (the new h is everyone's). Each row's sum is SplitF64's: bias,
// the input's terms in order, then the recurrent ones.
void SplitStatesF64::step_slice(Slice& s, const double* xs) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers, I = cfg_.input_size, nb = s.b1 - s.b0, S = states_;
  const size_t astride = size_t(nb) * kRows;
  double* const acc = s.acc.data();
  for (int l = 0; l < L; ++l) {
    const size_t n_in = size_t(cfg_.layer_input_size(l)), K = n_in + size_t(H);
    const double* w = s.w[size_t(l)].get();
    const double* bias = s.bias[size_t(l)].get();
    // state j's input at in + j * in_stride (x, or this tick's h of layer l - 1), its old h at
    // hold + j * hstride
    const double* in = l == 0 ? xs : h_.data() + size_t(l - 1) * H;
    const size_t in_stride = l == 0 ? size_t(I) : size_t(L) * H;
    const double* hold = h_.data() + size_t(l) * H;
    const size_t hstride = size_t(L) * H;
    if (nb > 0)  // a worker with no blocks (more workers than blocks) has no sums, only the barriers
      for (int j = 0; j < S; ++j) std::memcpy(acc + j * astride, bias, sizeof(double) * astride);
    // The input's columns [0, n_in), then the recurrent ones [n_in, K), a run of kChunkColumns at a time
    // over all the worker's blocks and all the states: one run's weights (its blocks) and inputs (every
    // state's) stay in L2 together, a pair of blocks' in L1 while the states pass four at a time. Each
    // row still adds its columns in order.
    auto terms = [&](size_t col0, size_t ncols, const double* v, size_t vstride) {
      for (size_t k0 = 0; k0 < ncols; k0 += kChunkColumns) {
        const size_t kc = std::min<size_t>(kChunkColumns, ncols - k0);
        for (int b = 0; b < nb; b += 2) {
          const int pair = std::min(2, nb - b);
          const double* p0 = w + (size_t(b) * K + col0 + k0) * kRows;
          const double* p1 = p0 + K * kRows;
          int j = 0;
          if (pair == 2)
            for (; j + 4 <= S; j += 4) dot_four_ticks(p0, p1, v + j * vstride + k0, vstride, kc, acc + j * astride + b * kRows, astride);
          for (; j < S; ++j) {
            double* a = acc + j * astride + b * kRows;
            dot_blocks(p0, p1, v + j * vstride + k0, kc, pair, a, a + kRows);
          }
        }
      }
    };
    terms(0, n_in, in, in_stride);
    terms(n_in, size_t(H), hold, hstride);
    team_.sync();  // every worker is done with the old h of layer l (and the new h of l - 1)
    double* c = s.c.data() + size_t(l) * S * nb * kUnits;
    for (int j = 0; j < S; ++j)
      for (int b = 0; b < nb; b += 2) {
        const int pair = std::min(2, nb - b);
        cells(acc + j * astride + b * kRows, (s.b0 + b) * kUnits, pair * kUnits, H, c + (size_t(j) * nb + b) * kUnits,
              h_.data() + (size_t(j) * L + l) * H);
      }
    team_.sync();  // the new h of layer l, every unit of every state
  }
}

void SplitStatesF64::step_worker(int worker, const double* xs) {
  step_slice(*slices_[size_t(worker)], xs);
}

void SplitStatesF64::head(int s, std::span<double> z) const {
  const size_t H = size_t(cfg_.hidden_size), L = size_t(cfg_.num_layers), O = size_t(cfg_.output_size);
  head_on(head_w_.get(), head_b_, h_.data() + (size_t(s) * L + L - 1) * H, H, O, z);
}

LstmState SplitStatesF64::state(int s) const {
  LstmState st(cfg_);
  const int H = cfg_.hidden_size, L = cfg_.num_layers, S = states_;
  for (int l = 0; l < L; ++l) {
    std::copy_n(h_.begin() + (ptrdiff_t(s) * L + l) * H, H, st.h[size_t(l)].begin());
    for (const auto& sl : slices_) {
      const int nb = sl->b1 - sl->b0;
      for (int u = 0; u < nb * kUnits; ++u) {
        const int unit = sl->b0 * kUnits + u;
        if (unit < H) st.c[size_t(l)][size_t(unit)] = sl->c[(size_t(l) * S + s) * nb * kUnits + u];
      }
    }
  }
  return st;
}

void SplitStatesF64::set_state(int s, const LstmState& st) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers, S = states_;
  for (int l = 0; l < L; ++l) {
    std::copy_n(st.h[size_t(l)].begin(), H, h_.begin() + (ptrdiff_t(s) * L + l) * H);
    for (const auto& sl : slices_) {
      const int nb = sl->b1 - sl->b0;
      for (int u = 0; u < nb * kUnits; ++u) {
        const int unit = sl->b0 * kUnits + u;
        sl->c[(size_t(l) * S + s) * nb * kUnits + u] = unit < H ? st.c[size_t(l)][size_t(unit)] : 0.0;
      }
    }
  }
}

}  // namespace hotpath::reference
