// The engine layer: the one way every front end (CLI, bench harness, C ABI, Python) opens a model,
// chooses and creates a backend (`auto` included), wraps it with a fallback, and runs ticks. The backend
// registry lives here, above the backends (ref, cpu, cuda), so no lower layer reaches up to them.
#pragma once
#include <pthread.h>

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "engine/swap.hpp"
#include "engine/swap_room.hpp"
#include "engine/warm.hpp"
#include "model/loader.hpp"
#include "model/model.hpp"
#include "telemetry/tick_metrics.hpp"

namespace hotpath {

namespace engine {
class EngineMetrics;
}

// --- models -----------------------------------------------------------------------------------------
// A file path, else a zoo name (`hotpath models`); throws hotpath::Error naming both when neither.
Model open_model(const std::string& path_or_zoo_name, const LoadOptions& options = {});
// A safetensors state_dict held in memory (the bytes of a .safetensors file); `name` names it in
// messages and reports. Throws hotpath::Error naming the problem, like a file.
Model open_model_bytes(std::span<const std::byte> bytes, const std::string& name = "<bytes>",
                       const LoadOptions& options = {});

// --- backends ---------------------------------------------------------------------------------------
// Backends built into this library (ref, cpu, and cuda when built with CUDA); auto is not one.
std::vector<BackendKind> built_backends();
// Their names, "ref, cpu, cuda", for help texts.
std::string built_backend_names();
// Why `--precision int8` on the cpu backend would run on the portable kernels here, many times slower
// than fp32 (this CPU lacks AVX512_VNNI, or the cpu option isa=generic); empty when the VNNI kernels serve
// it. Such a backend also warns once on stderr and says so in facts()["cpu_int8"]. Throws as the
// backend would for an ISA this CPU cannot run. No precision is ever chosen as int8 unless asked.
std::string cpu_int8_note();
// Whether a bf16 cpu backend made here with the environment's options would run its matrix products of
// several columns on AMX tiles (the backend's own choice, choose_isa). Throws as the backend would for an
// ISA this CPU cannot run.
bool cpu_has_amx();
// One backend (not auto, no fallback wrapper). Throws hotpath::Error for auto or bad options,
// UnsupportedError when the platform or the model cannot be served (e.g. no CUDA device, or a build
// without CUDA).
std::unique_ptr<Backend> make_backend(BackendKind kind, const Model& model, const BackendOptions& options);

// --- engine -----------------------------------------------------------------------------------------
// The backend's options (backend/options.hpp, one definition of each) and which backend serves them.
struct EngineOptions : BackendOptions {
  // auto: cuda when a GPU is usable and the model fits its kernels, else cpu (dropping cuda's own options)
  BackendKind backend = BackendKind::automatic;
  // cpu: a CPU backend answers when the primary (cuda) is late; refused for ref and cpu, dropped when
  // auto picks cpu
  Fallback fallback = Fallback::none;
  // Warm the backend on creation (engine/warm.hpp); false: the first ticks meet a cold backend (to
  // measure the difference).
  bool warm = true;
  // Tick telemetry (Engine::metrics): each tick's latency and the backend's counts into a
  // telemetry::TickMetrics. Off: the tick path pays one untaken branch.
  bool metrics = false;
  // cuda: keep room for live swaps (engine/swap_room.hpp): the GPU split into two equal SM partitions, the
  // model served on one half and a swap's next model made on the other while it answers. Without it a
  // cuda engine's swap is refused (its kernel holds every SM). Costs half the SMs (the window precompute's
  // rate of the smaller models; a large model may not fit half). Refused for ref and cpu (their swaps
  // need no room), dropped when auto picks cpu.
  bool swap_room = false;
};

// How a model swapped into a running engine starts (Engine::swap).
struct SwapOptions {
  // The new model's precision; unset: the engine's --precision, else the new model's default.
  std::optional<Precision> precision;
  // Streaming mode: the new model's state is its state after the last K inputs from zero state (0: zero
  // state, the default); at most kMaxSwapWarmTicks. Window mode has no choice to make: the new model's
  // windows are rebuilt from the last W-1 inputs exactly.
  long long warm_ticks = 0;
};
inline constexpr long long kMaxSwapWarmTicks = 4096;

// "0-3,8" -> {0,1,2,3,8} (the first listed core stays first); throws hotpath::Error naming the bad part.
std::vector<int> parse_cpuset(const std::string& text);

// The options of the backend an engine with `options` makes for `model`: the window defaulted from the
// model's metadata, and every option checked (window, fallback, timeout, kernel name, cpuset cores this
// process may use) before any device is touched; throws hotpath::Error naming the bad one.
BackendOptions backend_options(const Model& model, const EngineOptions& options);

// Resolves auto in *options as an Engine would (auto: cuda when a GPU is usable and a cuda backend can
// be made for the model, else cpu, dropping cuda's own options: fallback, variant, kernel, fp16), without
// keeping the probe (its kernel is stopped before returning); returns the backend. `note` (if given)
// says why auto chose cpu and what it dropped. A named backend is left as it is.
BackendKind choose_backend(const Model& model, EngineOptions* options, std::string* note = nullptr);

// A model served by one backend. Not thread-safe: one thread at a time per engine (engines are
// independent: many may run in parallel on different threads).
class Engine {
 public:
  // Throws hotpath::Error for bad options (named as the CLI names them), UnsupportedError when the
  // chosen backend cannot serve the model here. The window defaults to the model's metadata window.
  // The backend is warmed (options.warm) on the thread that runs its critical step, once pinned.
  Engine(Model model, const EngineOptions& options);
  // Serves `backend` (already made for `model`, not warmed here): tests, and harnesses that build
  // their own backend; `metrics` as EngineOptions::metrics.
  Engine(Model model, std::unique_ptr<Backend> backend, bool metrics = false);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The model serving now (after a swap, the new one).
  const Model& model() const { return swappable_->model(); }
  const ModelConfig& config() const { return model().config; }
  int input_size() const { return input_size_; }    // the same for every model a swap brings
  int output_size() const { return output_size_; }
  Mode mode() const;
  int window() const;                 // W in window mode, 1 otherwise
  std::string backend_name() const;   // the backend serving (auto resolved), e.g. "cuda"
  std::string variant() const;
  Precision precision() const;
  ScalerChoice scaler() const;        // the input scaling in force (the default resolved)
  // Why `auto` chose what it chose (e.g. "cuda unavailable for this model (...), using cpu"); empty
  // when the backend was named.
  const std::string& choice_note() const { return choice_note_; }

  // One tick: x [I] -> out [O] (critical step, then the precompute for the next tick). Throws TickError
  // for a bad input (NaN/Inf, wrong length), leaving the state as before.
  void step(std::span<const float> x, std::span<float> out);
  // A series [T, I] row-major -> out [T, O], continuing from the current state. A bad tick stops the
  // run with TickError: the ticks before it were consumed and their outputs written.
  void run(std::span<const float> series, size_t ticks, std::span<float> out);
  // The same with float64 outputs: exact for the float64 reference backend, widened from float otherwise.
  void run(std::span<const float> series, size_t ticks, std::span<double> out);
  // Fresh windows: x [B, W, I] -> out [B, O], each from zero state (state of step/run untouched).
  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out);
  // Backtest: S recorded series x [S, T, I] -> every tick's output [S, T, O], each series from zero
  // state by the engine's mode (docs/model.md, "Backtests"), on the backend's throughput path. Every
  // input is checked first: a NaN/Inf throws TickError naming series, tick and input, before anything is
  // computed. `done` (may be null) counts the output rows finished, for a progress display on another
  // thread. `stop` (may be null), set by another thread, ends it early with the outputs incomplete (ref
  // and cpu stop within a step; cuda runs to the end; Backend::backtest). Leaves the engine reset (the
  // next step() is t = 0), stopped or not.
  void backtest(std::span<const float> x, size_t series, size_t ticks, std::span<float> out,
                std::atomic<size_t>* done = nullptr, const std::atomic<bool>* stop = nullptr);
  // The same with float64 outputs: exact for the float64 reference backend, widened from float otherwise.
  void backtest(std::span<const float> x, size_t series, size_t ticks, std::span<double> out,
                std::atomic<size_t>* done = nullptr, const std::atomic<bool>* stop = nullptr);
  // The backtest (float32 outputs) and fresh windows with their arrays in the memory of the engine's GPU:
  // x and out device pointers, row-major as above (cuda backend; docs/cuda.md, "Arrays in GPU memory").
  // The throughput path copies them on the device, never through the host. x must be ready when the call
  // starts (work on it finished, or queued on the legacy default stream); out is complete when it returns.
  // Throws hotpath::Error when a pointer is not memory of the engine's GPU, its allocation ends before the
  // sizes given, or the two overlap; TickError for a NaN/Inf input, named as above, nothing computed;
  // UnsupportedError on the other backends. The backtest leaves the engine reset, as above.
  void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done = nullptr);
  void run_batch_on_device(const float* x, size_t batch, size_t window, float* out);
  // Forget all state: the next tick is t = 0.
  void reset();
  long long ticks() const;
  std::map<std::string, double> counters() const;
  std::map<std::string, std::string> facts() const;
  // The warm-up the backend got on creation (ticks 0: none).
  const engine::WarmUp& warm_up() const { return warm_up_; }

  // Live model swap (docs/production.md, "Swapping a model while it serves"). Makes `model` ready to
  // answer in place of the serving one and returns its id (model_id) once it is: its backend made with
  // this engine's options (the precision from `swap`), warmed, and its state rebuilt from the engine's
  // record of its last inputs while the old model keeps answering. The switch is at a tick boundary: the
  // tick thread's next finish of a tick hands over, and the tick after it is the new model's (window
  // mode: bit-identical to an engine that served the new model from the start; streaming: from the
  // state SwapOptions::warm_ticks says). The one call that may run on another thread while one thread
  // ticks (it blocks that thread, not the ticking one); or call it between ticks. It checks, hashes and
  // copies the model on the calling thread (milliseconds for a model of megabytes): call it from a
  // thread off the critical core, or the ticks share the core with that work. Throws hotpath::Error
  // naming the problem, the old model still serving, for another input or output size, a model that
  // cannot be served (bad weights, too big), another cuda kernel family, or an engine not made from
  // options (Engine(Model, backend)). A swap asked while one waits for its tick replaces it.
  std::string swap(Model model, const SwapOptions& swap = {});
  // The id of the model that answered the last tick (model_id; before any tick, the serving one's).
  const std::string& answering_model_id() const { return swappable_->answering_id(); }
  // The id of the model serving now (the one model() returns).
  const std::string& model_id() const { return swappable_->serving_id(); }
  // Swaps that took over, and whether one is made ready but not yet switched to.
  long long swaps() const { return swappable_->swaps(); }
  bool swap_pending() const { return swappable_->swap_pending(); }
  // Why a swap that had returned then failed before its switch (empty otherwise).
  std::string swap_failure() const { return swappable_->late_failure(); }

  // Tick telemetry (EngineOptions::metrics; docs/production.md, "Telemetry"); null when off. step() and
  // run() record each answered tick's latency, from entry into the backend's step to its answer (two
  // telemetry::TickClock reads, written once the answer is), and count it answered; a tick the backend failed
  // (BackendError) counts lost. The backend's counts (CPU fallback answers, GPU timeouts, lease
  // renewals) are folded in every engine::kFoldEvery ticks and at reset() and backtest(); swaps and the
  // serving model as they happen. Any thread may take a snapshot while the tick thread writes; a
  // telemetry::MetricsServer may hold it past the engine.
  std::shared_ptr<const telemetry::TickMetrics> metrics() const;
  // metrics()->snapshot(), from any thread; throws hotpath::Error when the engine was made without.
  telemetry::Snapshot metrics_snapshot() const;
  // For a harness that drives backend() itself (the bench): the recording step() does, with the
  // harness's own latency (the bench's: from the instant the tick was due), a tick it got no answer
  // for, and a tick sent late on its schedule. Nothing when telemetry is off. The tick thread only.
  void record_answered(std::int64_t latency_ns) noexcept;
  void record_lost() noexcept;
  void record_late() noexcept;

  // The backend itself, for harnesses that time step() and finish_precompute() apart (bench).
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

 private:
  std::shared_ptr<engine::SwapRoom> room_;  // EngineOptions::swap_room's halves (outlives every backend)
  std::unique_ptr<Backend> backend_;  // the SwappableBackend below, serving the model
  engine::SwappableBackend* swappable_ = nullptr;
  std::unique_ptr<engine::EngineMetrics> metrics_;  // null: telemetry off
  void tick(std::span<const float> x, std::span<float> out);
  void recorded_tick(std::span<const float> x, std::span<float> out);
  int input_size_ = 0, output_size_ = 0;
  std::optional<EngineOptions> options_;  // auto resolved; unset for an engine given its backend
  std::vector<int> creator_cores_;        // the creating thread's cores before any backend pinned it
  pthread_t creator_thread_{};
  std::string choice_note_;
  void wrap(Model model, std::unique_ptr<Backend> backend, int slot = -1);
  engine::WarmUp warm_up_;
  void restore_caller_cores();
  // The creating thread, pinned to the cpuset's first core (backends other than cpu), and its cores before.
  bool pinned_ = false;
  pthread_t pinned_thread_{};
  std::vector<int> pinned_from_;
};

}  // namespace hotpath
