#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>

#include "cpu/cpu_backend.hpp"
#include "cpu/isa_choice.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/fallback.hpp"
#include "engine/gpu.hpp"
#include "hybrid/hybrid_backend.hpp"
#include "model/safetensors.hpp"
#include "reference/reference_backend.hpp"
#include "util/error.hpp"
#include "util/number.hpp"
#include "util/threads.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace hotpath {

Model open_model(const std::string& path_or_zoo_name, const LoadOptions& options) {
  return resolve_model(path_or_zoo_name, options);
}

Model open_model_bytes(std::span<const std::byte> bytes, const std::string& name, const LoadOptions& options) {
  std::vector<uint8_t> copy(bytes.size());
  if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
  return model_from_safetensors(safetensors::File::parse(std::move(copy), name), options);
}

std::string cpu_int8_note() { return cpu::int8_slow_note(cpu::cpu_features()); }
bool cpu_has_amx() {
  const cpu::IsaChoice c = cpu::choose_isa(Precision::bf16, cpu::cpu_features(), cpu_options_from_env());
  return c.table && c.table->amx;
}

std::vector<BackendKind> built_backends() {
#ifdef HOTPATH_HAVE_CUDA
  return {BackendKind::ref, BackendKind::cpu, BackendKind::cuda, BackendKind::hybrid};
#else
  return {BackendKind::ref, BackendKind::cpu};
#endif
}

std::string built_backend_names() {
  std::string s;
  for (const BackendKind k : built_backends()) s += (s.empty() ? "" : ", ") + std::string(util::name_of(k));
  return s;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, const BackendOptions& options) {
  if (options.mode == Mode::window && options.window < 1)
    throw Error("window mode needs a window length >= 1 (--window, or `window` in the model's metadata)");
  const std::string name = util::name_of(kind);
  if (kind == BackendKind::ref || kind == BackendKind::cpu || kind == BackendKind::hybrid) {
    // cuda's own options, refused by name where they would silently do nothing
    const GpuOptions& g = options.gpu;
    if (g.variant != CudaVariant::automatic)
      throw Error("backend " + name + " has no kernel variants (--variant is for cuda); the cpu path is chosen "
                  "from the processor at run time (--cpu-options isa=... overrides it)");
    if (g.kernel != CudaKernel::automatic)
      throw Error("backend " + name + " has no kernel families (--kernel " + util::name_of(g.kernel) + " is for cuda)");
    if (g.batch_rows != 0)
      throw Error("backend " + name + " has no batch chunks (--batch-rows " + std::to_string(g.batch_rows) +
                  " is for cuda)");
    if (g.batch_copy_threads != 0)
      throw Error("backend " + name + " has no batch chunks to copy (--batch-copy-threads " +
                  std::to_string(g.batch_copy_threads) + " is for cuda)");
    if (g.tick_trace) throw Error("backend " + name + " has no tick kernel to trace (--tick-trace is for cuda's grid kernel)");
  }
  switch (kind) {
    case BackendKind::ref: return make_reference_backend(model, options);
    case BackendKind::cpu: return make_cpu_backend(model, options);
    case BackendKind::cuda:
#ifdef HOTPATH_HAVE_CUDA
      return make_cuda_backend(model, options);
#else
      throw UnsupportedError("backend cuda: this hotpath was built without CUDA (no usable CUDA device)");
#endif
    case BackendKind::hybrid: return make_hybrid_backend(model, options);
    case BackendKind::automatic: break;
  }
  throw Error("make_backend: auto is resolved by the engine (choose_backend), not a backend of its own");
}

std::vector<int> parse_cpuset(const std::string& text) {
  std::set<int> cores;
  std::vector<int> order;
  size_t pos = 0;
  auto bad = [&](const std::string& part) {
    return Error("bad --cpuset '" + text + "': '" + part + "' is not a core number or range like 2-5");
  };
  auto number = [&](const std::string& s, const std::string& part) {
    // The bound keeps a typo from walking a huge range of cores.
    const auto n = util::parse_int<int>(s);
    if (!n || *n < 0 || *n > 999999) throw bad(part);
    return *n;
  };
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string part = text.substr(pos, comma - pos);
    const size_t dash = part.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      lo = hi = number(part, part);
    } else {
      lo = number(part.substr(0, dash), part);
      hi = number(part.substr(dash + 1), part);
      if (hi < lo) throw bad(part);
    }
    for (int c = lo; c <= hi; ++c)
      if (cores.insert(c).second) order.push_back(c);  // first listed core stays first
    pos = comma + 1;
  }
  return order;
}

namespace {

// The window a window-mode engine uses: the option, else the model's metadata; 1 in other modes.
int resolve_window(const Model& model, const EngineOptions& o) {
  if (o.mode != Mode::window) return 1;
  if (o.window < 0 || o.window > kMaxWindow)
    throw Error("window " + std::to_string(o.window) + " is outside 1.." + std::to_string(kMaxWindow));
  if (o.window > 0) return o.window;
  if (model.config.window) return *model.config.window;
  throw Error("window mode needs --window: the model '" + model.name + "' carries no window in its metadata");
}

}  // namespace

BackendOptions backend_options(const Model& model, const EngineOptions& o) {
  const GpuOptions& g = o.gpu;
  if (g.batch_rows < 0 || g.batch_rows > kMaxBatchRows)
    throw Error("batch rows " + std::to_string(g.batch_rows) + " is outside 1.." + std::to_string(kMaxBatchRows) +
                " (0: sized to the device)");
  if (g.batch_copy_threads < 0 || g.batch_copy_threads > kMaxBatchCopyThreads)
    throw Error("batch copy threads " + std::to_string(g.batch_copy_threads) + " is outside 1.." +
                std::to_string(kMaxBatchCopyThreads) + " (0: half the cores, up to 8)");
  if (!(g.timeout_us > 0) || g.timeout_us > kMaxTimeoutUs)
    throw Error("timeout " + std::to_string(g.timeout_us) + " us is outside (0, 3.6e9] (an hour)");
  if (!o.cpuset.empty()) {
    for (int c : o.cpuset)
      if (!util::core_usable(c))
        throw Error("--cpuset names cpu " + std::to_string(c) + ", which this process may not use (" +
                    std::to_string(util::allowed_cores().size()) + " cpus allowed to this thread now)");
  }
  BackendOptions b = o;  // the backend's part of the engine's options
  b.window = resolve_window(model, o);
  b.scaler = resolve_scaler(model, o.scaler);  // checked here, named as the option
  if (o.cpu && o.backend == BackendKind::ref)
    throw Error("--cpu-options is for the cpu backend (and cuda's --fallback cpu); backend ref has none");
  return b;
}

namespace {

// The primary backend, wrapped with the CPU fallback when asked: the shadow takes the cores after the
// first (its critical step on the second), at its own default precision. Only a backend that can be
// late (cuda) is wrapped: ref and cpu answer every tick themselves.
// `room` (cuda only): the primary's kernels on half `half` of it.
std::unique_ptr<Backend> make_served(BackendKind kind, const Model& model, const BackendOptions& bo,
                                     Fallback fallback, const engine::SwapRoom* room = nullptr, int half = 0) {
  if (fallback != Fallback::none && (kind == BackendKind::cpu || kind == BackendKind::ref))
    throw Error(std::string("--fallback ") + util::name_of(fallback) +
                " is for a backend that can miss a deadline (cuda); backend " + util::name_of(kind) +
                " answers every tick itself");
  auto primary = room && kind == BackendKind::cuda ? room->make(model, bo, half) : make_backend(kind, model, bo);
  if (fallback == Fallback::none) return primary;
  BackendOptions so = bo;
  so.precision.reset();
  so.gpu = GpuOptions{};
  // The shadow's critical step on one core: the cores after the primary's first are its whole cpuset.
  CpuOptions shadow_cpu = cpu_options_or_env(bo.cpu);
  shadow_cpu.crit_cores = 1;
  so.cpu = shadow_cpu;
  int cpu = -1;
  if (so.cpuset.size() >= 2) {
    so.cpuset.erase(so.cpuset.begin());
    cpu = so.cpuset.front();
  } else {
    so.cpuset.clear();
  }
  // The shadow's cpu backend pins the thread that makes it to its first core: give the caller its own
  // cores back (the shadow's worker pins itself when it runs its first tick).
  const std::vector<int> caller_cores = util::allowed_cores();
  auto shadow = make_backend(BackendKind::cpu, model, so);  // the one fallback there is
  if (!caller_cores.empty()) util::set_thread_cores(pthread_self(), caller_cores);
  return engine::with_fallback(std::move(primary), std::move(shadow), cpu, bo.staging_cores);
}

// auto fell to the cpu, which answers every tick itself (no fallback) and takes none of cuda's own
// options: they are dropped, and the note says so.
void drop_cuda_options(EngineOptions* o, std::string* note) {
  GpuOptions& g = o->gpu;
  if (o->fallback != Fallback::none) *note += std::string("; --fallback ") + util::name_of(o->fallback) + " dropped";
  if (g.variant != CudaVariant::automatic) *note += std::string("; --variant ") + util::name_of(g.variant) + " dropped";
  if (g.kernel != CudaKernel::automatic) *note += std::string("; --kernel ") + util::name_of(g.kernel) + " dropped";
  if (o->precision == Precision::fp16) *note += "; precision fp16 (cuda's) dropped";
  if (g.batch_rows != 0) *note += "; --batch-rows " + std::to_string(g.batch_rows) + " dropped";
  if (g.batch_copy_threads != 0) *note += "; --batch-copy-threads " + std::to_string(g.batch_copy_threads) + " dropped";
  if (g.tick_trace) *note += "; --tick-trace dropped";
  if (o->swap_room) *note += "; swap_room dropped (a cpu engine's swap needs none)";
  o->swap_room = false;
  o->fallback = Fallback::none;
  g.variant = CudaVariant::automatic;
  g.kernel = CudaKernel::automatic;
  g.batch_rows = 0;
  g.batch_copy_threads = 0;
  g.tick_trace = false;
  if (o->precision == Precision::fp16) o->precision.reset();
}

// auto: the cuda backend when a GPU is usable and one can be made for the model; nullptr (and `note`
// saying why) otherwise.
std::unique_ptr<Backend> try_auto_cuda(const Model& model, const BackendOptions& bo, const EngineOptions& o,
                                       std::string* note, std::shared_ptr<engine::SwapRoom>* room = nullptr) {
  std::string why;
  if (!gpu::available(&why, o.gpu.device)) {
    *note = "auto backend: no usable GPU (" + why + "), using cpu";
    return nullptr;
  }
  try {
    if (room && o.swap_room) {
      *room = std::make_shared<engine::SwapRoom>(o.gpu.device);
      try {
        return make_served(BackendKind::cuda, model, bo, o.fallback, room->get(), 0);
      } catch (...) {
        room->reset();
        throw;
      }
    }
    return make_served(BackendKind::cuda, model, bo, o.fallback);
  } catch (const UnsupportedError& e) {
    *note = std::string("auto backend: cuda unavailable for this model (") + e.what() + "), using cpu";
    return nullptr;
  }
}
}  // namespace

BackendKind choose_backend(const Model& model, EngineOptions* options, std::string* note) {
  if (options->backend != BackendKind::automatic) return options->backend;
  std::string why;
  // A probe: destroyed (its kernel stopped) on return.
  const bool cuda = try_auto_cuda(model, backend_options(model, *options), *options, &why) != nullptr;
  options->backend = cuda ? BackendKind::cuda : BackendKind::cpu;
  if (!cuda) drop_cuda_options(options, &why);
  if (note) *note = why;
  return options->backend;
}

Engine::Engine(Model model_in, const EngineOptions& options) {
  creator_cores_ = util::allowed_cores();
  creator_thread_ = pthread_self();
  const Model& model = model_in;
  BackendOptions bo = backend_options(model, options);
  std::unique_ptr<Backend> backend;
  EngineOptions resolved = options;
  if (options.swap_room && (options.backend == BackendKind::cpu || options.backend == BackendKind::ref ||
                            options.backend == BackendKind::hybrid))
    throw Error(std::string("swap_room is for cuda: backend ") + util::name_of(options.backend) +
                " swaps without it (the new model's threads are made on cores beside the cpuset)");
  if (options.backend == BackendKind::automatic) {
    backend = try_auto_cuda(model, bo, options, &choice_note_, &room_);
    resolved.backend = BackendKind::cuda;
    if (!backend) {
      drop_cuda_options(&resolved, &choice_note_);
      resolved.backend = BackendKind::cpu;
      bo = backend_options(model, resolved);
      backend = make_backend(BackendKind::cpu, model, bo);
    }
  } else {
    if (options.swap_room) room_ = std::make_shared<engine::SwapRoom>(options.gpu.device);
    backend = make_served(options.backend, model, bo, options.fallback, room_.get(), 0);
  }
  options_ = resolved;
  // The calling thread runs the critical step: on the cpuset's first core. The cpu backend pins it
  // itself (and again on each new calling thread); for the others it is done here, after the backend's
  // own threads (heartbeat, shadow worker) were started with the caller's cores.
  if (!bo.cpuset.empty() && backend->name() != "cpu" && backend->name() != "hybrid") {
    pinned_from_ = creator_cores_;
    util::pin_thread(pthread_self(), {bo.cpuset.front()}, "engine caller (--cpuset's first core)");
    pinned_thread_ = pthread_self();
    pinned_ = true;
  }
  // Here, on the pinned caller: the thread and core that will run the critical step.
  if (options.warm) {
    try {
      warm_up_ = engine::warm(*backend);
    } catch (...) {
      backend.reset();
      restore_caller_cores();
      throw;
    }
  }
  wrap(std::move(model_in), std::move(backend), room_ ? 0 : -1);
  if (options.metrics) metrics_ = std::make_unique<engine::EngineMetrics>(*swappable_);
}

Engine::Engine(Model model, std::unique_ptr<Backend> backend, bool metrics) {
  if (!backend) throw Error("engine: no backend given");
  creator_cores_ = util::allowed_cores();
  creator_thread_ = pthread_self();
  wrap(std::move(model), std::move(backend));
  if (metrics) metrics_ = std::make_unique<engine::EngineMetrics>(*swappable_);
}

namespace {
engine::ReplayPlan replay_plan(const BackendOptions& bo, const ScalerChoice& scaler, long long warm_ticks) {
  engine::ReplayPlan p;
  p.mode = bo.mode;
  p.window = bo.mode == Mode::window ? bo.window : 1;
  p.history = scaler.kind == ScalerKind::rolling ? scaler.window : 0;
  p.warm_ticks = warm_ticks;
  return p;
}
// The creating thread's cores beyond the cpuset (the serving backend's).
std::vector<int> cores_beyond(const std::vector<int>& creator, const std::vector<int>& cpuset) {
  std::vector<int> beyond;
  for (int c : creator)
    if (std::find(cpuset.begin(), cpuset.end(), c) == cpuset.end()) beyond.push_back(c);
  return beyond;
}
// The swap worker's cores: the creating thread's beyond the cpuset, else those less the critical core,
// else all of them.
std::vector<int> swap_worker_cores(const std::vector<int>& creator, const std::vector<int>& cpuset) {
  if (auto beyond = cores_beyond(creator, cpuset); !beyond.empty()) return beyond;
  std::vector<int> but_critical;
  for (int c : creator)
    if (cpuset.empty() || c != cpuset.front()) but_critical.push_back(c);
  return !but_critical.empty() ? but_critical : creator;
}
// Where a swap's new backend makes its threads until it serves (BackendOptions::staging_cores): the
// creating thread's cores beyond the cpuset; none (on the cpuset from the start, sharing the serving
// backend's cores) without a cpuset or cores beyond it.
std::vector<int> staging_cores(const std::vector<int>& creator, const std::vector<int>& cpuset) {
  return cpuset.empty() ? std::vector<int>{} : cores_beyond(creator, cpuset);
}
}  // namespace

void Engine::wrap(Model model, std::unique_ptr<Backend> backend, int slot) {
  input_size_ = model.config.input_size;
  output_size_ = model.config.output_size;
  const BackendOptions& bo = backend->options();
  // The record is sized for the largest replay a swap may ask (streaming's warm ticks; window mode's is
  // fixed by W and the scaler).
  const engine::ReplayPlan plan = replay_plan(bo, resolve_scaler(model, bo.scaler), kMaxSwapWarmTicks);
  engine::ServedModel first;
  first.id = hotpath::model_id(model);
  first.model = std::make_shared<const Model>(std::move(model));
  first.backend = std::move(backend);
  first.slot = slot;
  auto wrapped = std::make_unique<engine::SwappableBackend>(std::move(first), engine::record_ticks(plan, input_size_),
                                                           swap_worker_cores(creator_cores_, bo.cpuset));
  swappable_ = wrapped.get();
  backend_ = std::move(wrapped);
}

std::string Engine::swap(Model model, const SwapOptions& swap) {
  if (!options_)
    throw Error("swap: this engine was given its backend by the caller; only an engine made from options can "
                "make the new model's backend");
  model.validate();  // NaN or Inf weights, sizes that disagree: refused before anything is made
  if (model.config.input_size != input_size_)
    throw Error("swap: the new model '" + model.name + "' takes " + std::to_string(model.config.input_size) +
                " inputs a tick, the serving one " + std::to_string(input_size_) + "; a swap keeps the input size");
  if (model.config.output_size != output_size_)
    throw Error("swap: the new model '" + model.name + "' gives " + std::to_string(model.config.output_size) +
                " outputs a tick, the serving one " + std::to_string(output_size_) +
                "; a swap keeps the output size (the caller's buffers)");
  if (swap.warm_ticks < 0 || swap.warm_ticks > kMaxSwapWarmTicks)
    throw Error("swap: warm ticks " + std::to_string(swap.warm_ticks) + " is outside 0.." +
                std::to_string(kMaxSwapWarmTicks));
  if (swap.warm_ticks > 0 && mode() != Mode::streaming)
    throw Error("swap: warm ticks are for streaming mode; window mode rebuilds the windows from the last W-1 inputs");
  if (backend_name() == "cuda" && !room_)
    throw Error("swap: this engine's cuda kernel holds every SM of GPU " + std::to_string(options_->gpu.device) +
                "; a live swap on cuda needs the engine made with swap_room (which serves on half the SMs and "
                "brings the next model up on the other half; hotpath bench --swap-model sets it)");
  EngineOptions o = *options_;
  o.window = window();  // the engine's, not the new model's metadata: the record is kept for it
  if (swap.precision) o.precision = swap.precision;
  BackendOptions bo = backend_options(model, o);
  bo.staging_cores = staging_cores(creator_cores_, bo.cpuset);
  const engine::ReplayPlan plan = replay_plan(bo, resolve_scaler(model, bo.scaler), swap.warm_ticks);
  const std::string id = hotpath::model_id(model);
  auto shared = std::make_shared<const Model>(std::move(model));
  const bool warm = o.warm;
  engine::SwappableBackend* served = swappable_;
  swappable_->swap(
      [shared, bo, o, id, warm, room = room_, served] {
        engine::ServedModel s;
        // The half the serving model leaves (no other backend holds it: the last swap's is gone).
        s.slot = room ? 1 - served->serving_slot() : -1;
        s.backend = make_served(o.backend, *shared, bo, o.fallback, room.get(), std::max(0, s.slot));
        if (warm) (void)engine::warm(*s.backend);
        s.model = shared;
        s.id = id;
        return s;
      },
      plan);
  return id;
}

Engine::~Engine() {
  metrics_.reset();  // reads the backend's counters no more
  const bool swapped = swappable_ && swappable_->swaps() > 0;
  backend_.reset();
  restore_caller_cores();
  // A swapped-in cpu backend was made on the swap worker and would give the creating thread the worker's
  // cores: the creating thread gets its own back.
  if (swapped && !creator_cores_.empty() && pthread_equal(creator_thread_, pthread_self()))
    util::set_thread_cores(pthread_self(), creator_cores_);
}

void Engine::restore_caller_cores() {
  // The creating thread gets its cores back (another thread's mask is not this engine's to change).
  if (pinned_ && !pinned_from_.empty() && pthread_equal(pinned_thread_, pthread_self()))
    util::set_thread_cores(pthread_self(), pinned_from_);
}

Mode Engine::mode() const { return backend_->options().mode; }
int Engine::window() const { return backend_->options().mode == Mode::window ? backend_->options().window : 1; }
std::string Engine::backend_name() const { return backend_->name(); }
std::string Engine::variant() const { return backend_->variant(); }
Precision Engine::precision() const { return backend_->precision(); }
ScalerChoice Engine::scaler() const { return resolve_scaler(model(), backend_->options().scaler); }
long long Engine::ticks() const { return backend_->ticks(); }
std::map<std::string, double> Engine::counters() const { return backend_->counters(); }
std::map<std::string, std::string> Engine::facts() const {
  auto f = backend_->facts();
  if (room_) f["swap_room"] = room_->describe() + ", serving on half " + std::to_string(swappable_->serving_slot());
  return f;
}

void Engine::record_answered(std::int64_t latency_ns) noexcept {
  if (metrics_) metrics_->tick(latency_ns, *swappable_);
}
void Engine::record_lost() noexcept {
  if (metrics_) metrics_->lost();
}
void Engine::record_late() noexcept {
  if (metrics_) metrics_->metrics()->count_late();
}

std::shared_ptr<const telemetry::TickMetrics> Engine::metrics() const {
  return metrics_ ? metrics_->metrics() : nullptr;
}

telemetry::Snapshot Engine::metrics_snapshot() const {
  if (!metrics_) throw Error("this engine records no telemetry: make it with the metrics option on");
  return metrics_->metrics()->snapshot();
}

// One tick. Telemetry off: one branch on a null pointer, never taken.
inline void Engine::tick(std::span<const float> x, std::span<float> out) {
  if (metrics_) [[unlikely]] return recorded_tick(x, out);
  backend_->step(x, out);
  backend_->finish_precompute();
}

// One tick, timed from entry into the backend's step to its answer (telemetry::TickClock: the CPU's
// counter, a few ns a read), and recorded once the answer is written and the precompute done: the
// histogram's writes then delay only a next tick already due.
void Engine::recorded_tick(std::span<const float> x, std::span<float> out) {
  const telemetry::TickClock& clock = metrics_->clock();
  const std::uint64_t start = clock.now();
  std::uint64_t answered;
  try {
    backend_->step(x, out);
    answered = clock.now();
    if (swappable_->take_over_due()) [[unlikely]] metrics_->fold(*swappable_);  // the old backend's last counts
    backend_->finish_precompute();
  } catch (const BackendError&) {
    // The caller gets no answer: lost. (A bad input, TickError, is refused before it is consumed.)
    metrics_->lost();
    throw;
  }
  metrics_->tick(clock.ns(start, answered), *swappable_);
}

void Engine::step(std::span<const float> x, std::span<float> out) {
  if (out.size() != size_t(output_size()))
    throw Error("output buffer holds " + std::to_string(out.size()) + " floats, the model gives " +
                std::to_string(output_size()));
  tick(x, out);
}

namespace {
void check_series(const Engine& e, std::span<const float> series, size_t ticks, size_t out_size) {
  const size_t I = size_t(e.input_size()), O = size_t(e.output_size());
  if (ticks > series.size() / std::max<size_t>(I, 1) || series.size() != ticks * I)
    throw Error("series holds " + std::to_string(series.size()) + " floats, " + std::to_string(ticks) + " ticks of " +
                std::to_string(I) + " inputs need " + std::to_string(ticks * I));
  if (out_size != ticks * O)
    throw Error("output buffer holds " + std::to_string(out_size) + " values, " + std::to_string(ticks) +
                " ticks of " + std::to_string(O) + " outputs need " + std::to_string(ticks * O));
}
}  // namespace

void Engine::run(std::span<const float> series, size_t ticks, std::span<float> out) {
  check_series(*this, series, ticks, out.size());
  const size_t I = size_t(input_size()), O = size_t(output_size());
  for (size_t t = 0; t < ticks; ++t) tick(series.subspan(t * I, I), out.subspan(t * O, O));
}

void Engine::run(std::span<const float> series, size_t ticks, std::span<double> out) {
  check_series(*this, series, ticks, out.size());
  const size_t I = size_t(input_size()), O = size_t(output_size());
  std::vector<float> z(O);
  for (size_t t = 0; t < ticks; ++t) {
    tick(series.subspan(t * I, I), z);
    const auto exact = backend_->last_output_f64();
    for (size_t o = 0; o < O; ++o) out[t * O + o] = exact.empty() ? double(z[o]) : exact[o];
  }
}

void Engine::run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) {
  const size_t I = size_t(input_size()), O = size_t(output_size());
  if (window < 1 || window > size_t(kMaxWindow))
    throw Error("batch window " + std::to_string(window) + " is outside 1.." + std::to_string(kMaxWindow));
  if (batch > x.size() / std::max<size_t>(window * I, 1) || x.size() != batch * window * I)
    throw Error("batch input holds " + std::to_string(x.size()) + " floats, " + std::to_string(batch) + " windows of " +
                std::to_string(window) + " x " + std::to_string(I) + " need " + std::to_string(batch * window * I));
  if (out.size() != batch * O)
    throw Error("batch output buffer holds " + std::to_string(out.size()) + " floats, " + std::to_string(batch) +
                " windows need " + std::to_string(batch * O));
  backend_->run_batch(x, batch, window, out);
}

namespace {
void check_backtest(const Engine& e, std::span<const float> x, size_t series, size_t ticks, size_t out_size) {
  const size_t I = size_t(e.input_size()), O = size_t(e.output_size());
  const size_t rows = ticks == 0 ? 0 : series;
  if ((ticks > 0 && series > x.size() / ticks / std::max<size_t>(I, 1)) || x.size() != rows * ticks * I)
    throw Error("backtest input holds " + std::to_string(x.size()) + " floats, " + std::to_string(series) +
                " series of " + std::to_string(ticks) + " ticks of " + std::to_string(I) + " inputs need " +
                std::to_string(series * ticks * I));
  if (out_size != series * ticks * O)
    throw Error("backtest output buffer holds " + std::to_string(out_size) + " values, " + std::to_string(series) +
                " series of " + std::to_string(ticks) + " ticks of " + std::to_string(O) + " outputs need " +
                std::to_string(series * ticks * O));
  for (size_t k = 0; k < x.size(); ++k)
    if (!std::isfinite(x[k])) throw_backtest_input_error(k, ticks, I, x[k]);
}
}  // namespace

void Engine::backtest(std::span<const float> x, size_t series, size_t ticks, std::span<float> out,
                      std::atomic<size_t>* done, const std::atomic<bool>* stop) {
  check_backtest(*this, x, series, ticks, out.size());
  if (out.empty()) return reset();  // nothing to run, and still the promised reset
  backend_->backtest(x, series, ticks, Backend::BacktestOutput{out.data(), nullptr, stop}, done);
  if (metrics_) metrics_->fold(*swappable_);
}

void Engine::backtest(std::span<const float> x, size_t series, size_t ticks, std::span<double> out,
                      std::atomic<size_t>* done, const std::atomic<bool>* stop) {
  check_backtest(*this, x, series, ticks, out.size());
  if (out.empty()) return reset();  // nothing to run, and still the promised reset
  backend_->backtest(x, series, ticks, Backend::BacktestOutput{nullptr, out.data(), stop}, done);
  if (metrics_) metrics_->fold(*swappable_);
}

namespace {
// A device array of `bytes` for `what` on `device`: memory of that GPU, its allocation long enough.
void check_device_array(const void* p, size_t bytes, const char* what, int device) {
  if (bytes == 0) return;
  if (!p) throw Error(std::string(what) + ": a null pointer where " + std::to_string(bytes) + " bytes of GPU memory belong");
  const gpu::DevicePointer d = gpu::device_pointer(p);
  if (d.device < 0)
    throw Error(std::string(what) + ": the pointer is not GPU memory (host memory, or unknown to CUDA); the device "
                "calls take arrays in the memory of GPU " + std::to_string(device));
  if (d.device != device)
    throw Error(std::string(what) + ": the pointer is memory of GPU " + std::to_string(d.device) + ", the engine runs on GPU " +
                std::to_string(device));
  if (d.bytes_from > 0 && d.bytes_from < bytes)
    throw Error(std::string(what) + ": its allocation holds " + std::to_string(d.bytes_from) + " bytes from the pointer, " +
                std::to_string(bytes) + " are needed");
}
// Sizes in floats of `count` rows of `width`, refusing a product that overflows.
size_t floats_of(size_t a, size_t b, size_t c, const char* what) {
  if ((b != 0 && a > SIZE_MAX / b) || (c != 0 && a * b > SIZE_MAX / c / sizeof(float)))
    throw Error(std::string(what) + ": " + std::to_string(a) + " x " + std::to_string(b) + " x " + std::to_string(c) +
                " floats is more than memory can hold");
  return a * b * c;
}
void check_apart(const void* x, size_t xb, const void* out, size_t ob) {
  const auto a = reinterpret_cast<uintptr_t>(x), b = reinterpret_cast<uintptr_t>(out);
  if (xb > 0 && ob > 0 && a < b + ob && b < a + xb) throw Error("device arrays: the output overlaps the input");
}
}  // namespace

void Engine::backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done) {
  const size_t I = size_t(input_size()), O = size_t(output_size());
  const int device = backend_->options().gpu.device;
  const size_t nx = floats_of(series, ticks, I, "backtest input"), no = floats_of(series, ticks, O, "backtest output");
  check_device_array(x, nx * sizeof(float), "backtest input", device);
  check_device_array(out, no * sizeof(float), "backtest output", device);
  check_apart(x, nx * sizeof(float), out, no * sizeof(float));
  if (no == 0) return reset();  // nothing to run, and still the promised reset
  backend_->backtest_on_device(x, series, ticks, out, done);
  if (metrics_) metrics_->fold(*swappable_);
}

void Engine::run_batch_on_device(const float* x, size_t batch, size_t window, float* out) {
  const size_t I = size_t(input_size()), O = size_t(output_size());
  if (window < 1 || window > size_t(kMaxWindow))
    throw Error("batch window " + std::to_string(window) + " is outside 1.." + std::to_string(kMaxWindow));
  const int device = backend_->options().gpu.device;
  const size_t nx = floats_of(batch, window, I, "batch input"), no = floats_of(batch, 1, O, "batch output");
  check_device_array(x, nx * sizeof(float), "batch input", device);
  check_device_array(out, no * sizeof(float), "batch output", device);
  check_apart(x, nx * sizeof(float), out, no * sizeof(float));
  if (no == 0) return;
  backend_->run_batch_on_device(x, batch, window, out);
}

void Engine::reset() {
  backend_->reset();
  if (metrics_) metrics_->fold(*swappable_);
}

}  // namespace hotpath
