// hotpath: a thin C++ wrapper over the C ABI (hotpath/hotpath.h). Header-only, C++17: owning handles
// (move-only), and a failed call throws hotpath::error carrying the status and the library's one-line
// message. The C ABI's rules hold: one engine is used by one thread at a time, different engines run in
// parallel, buffers are the caller's (step/run write straight into them).
#ifndef HOTPATH_HOTPATH_HPP
#define HOTPATH_HOTPATH_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hotpath/hotpath.h"

namespace hotpath {

// A failed call: what() is the library's message (hotpath_last_error), status() says what kind.
class error : public std::runtime_error {
 public:
  error(hotpath_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  hotpath_status status() const noexcept { return status_; }

 private:
  hotpath_status status_;
};

namespace detail {
inline void check(hotpath_status status) {
  if (status != HOTPATH_OK) throw error(status, hotpath_last_error());
}
struct model_closer {
  void operator()(hotpath_model* m) const noexcept { hotpath_model_close(m); }
};
struct engine_closer {
  void operator()(hotpath_engine* e) const noexcept { hotpath_engine_close(e); }
};
inline const char* or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }
}  // namespace detail

inline std::string version() { return hotpath_version(); }

// A model: a safetensors file or a zoo name, or the bytes of a file held in memory.
class model {
 public:
  static model open(const std::string& path_or_zoo_name, const std::string& lstm_prefix = "",
                    const std::string& head_prefix = "") {
    hotpath_model* m = nullptr;
    detail::check(hotpath_model_open(path_or_zoo_name.c_str(), detail::or_null(lstm_prefix),
                                     detail::or_null(head_prefix), &m));
    return model(m);
  }
  static model from_bytes(const void* data, size_t size, const std::string& name = "<bytes>",
                          const std::string& lstm_prefix = "", const std::string& head_prefix = "") {
    hotpath_model* m = nullptr;
    detail::check(hotpath_model_open_bytes(data, size, name.c_str(), detail::or_null(lstm_prefix),
                                           detail::or_null(head_prefix), &m));
    return model(m);
  }

  hotpath_model_info info() const {
    hotpath_model_info i{};
    i.struct_size = sizeof i;
    detail::check(hotpath_model_get_info(handle_.get(), &i));
    return i;
  }
  int input_size() const { return info().input_size; }
  int output_size() const { return info().output_size; }
  std::string name() const { return info().name; }

  const hotpath_model* get() const noexcept { return handle_.get(); }
  // The content hash that names the model after a live swap (16 hex digits).
  std::string id() const {
    char id[17] = {};
    detail::check(hotpath_model_id(handle_.get(), id));
    return id;
  }

 private:
  explicit model(hotpath_model* m) : handle_(m) {}
  std::unique_ptr<hotpath_model, detail::model_closer> handle_;
};

// The engine's options as the CLI spells them; empty strings and zeros mean the defaults.
struct engine_options {
  std::string backend = "auto";  // auto | ref | cpu | cuda
  std::string precision;         // fp64 | fp32 | fp16 | bf16 | int8; "": the backend's default
  std::string mode = "window";   // window | streaming | batch
  int window = 0;                // 0: the model's metadata window
  int device = 0;
  std::string cpuset;            // e.g. "2-5"
  double timeout_us = 0;         // 0: the default (1 s)
  std::string fallback;          // "" | "cpu"
  std::string variant;
  std::string kernel;            // cuda: auto | cta | cluster | grid; "": auto
  std::string scaler;            // none | model | rolling:N; "": model when the model carries one, else none
  bool warm = true;              // false: no warm-up on open
  std::string cpu_options;       // cpu knobs, e.g. "isa=avx2,prefetch=0"; "": the environment's (HOTPATH_CPU_*)
  int batch_rows = 0;            // cuda: rows of a batch run's chunks; 0: sized to the device
  bool metrics = false;          // record tick telemetry (engine::metrics)
  bool swap_room = false;        // cuda: serve on half the GPU, so that swap() brings the next model up on the other
};

// A model served by one backend. Move-only; one thread at a time.
class engine {
 public:
  explicit engine(const model& m, const engine_options& options = {}) {
    const hotpath_engine_options o = c_options(options);
    hotpath_engine* e = nullptr;
    detail::check(hotpath_engine_open(m.get(), &o, &e));
    handle_.reset(e);
    detail::check(hotpath_engine_get_info(e, &info_));
  }

  // The C struct for `options` (its strings point into `options`).
  static hotpath_engine_options c_options(const engine_options& options) {
    hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
    o.backend = detail::or_null(options.backend);
    o.precision = detail::or_null(options.precision);
    o.mode = detail::or_null(options.mode);
    o.window = options.window;
    o.device = options.device;
    o.cpuset = detail::or_null(options.cpuset);
    o.timeout_us = options.timeout_us;
    o.fallback = detail::or_null(options.fallback);
    o.variant = detail::or_null(options.variant);
    o.scaler = detail::or_null(options.scaler);
    o.no_warm = options.warm ? 0 : 1;
    o.kernel = detail::or_null(options.kernel);
    o.cpu_options = detail::or_null(options.cpu_options);
    o.batch_rows = options.batch_rows;
    o.metrics = options.metrics ? 1 : 0;
    o.swap_room = options.swap_room ? 1 : 0;
    return o;
  }

  const hotpath_engine_info& info() const noexcept { return info_; }
  std::string backend() const { return info_.backend; }
  std::string variant() const { return info_.variant; }
  std::string precision() const { return info_.precision; }
  std::string mode() const { return info_.mode; }
  int window() const noexcept { return info_.window; }
  size_t input_size() const noexcept { return size_t(info_.input_size); }
  size_t output_size() const noexcept { return size_t(info_.output_size); }
  std::string scaler() const { return info_.scaler; }
  int64_t warm_ticks() const noexcept { return info_.warm_ticks; }  // 0: not warmed

  // One tick, zero copy: x[input_len] -> out[output_len].
  void step(const float* x, size_t input_len, float* out, size_t output_len) {
    detail::check(hotpath_engine_step(handle_.get(), x, input_len, out, output_len));
  }
  void step(const std::vector<float>& x, std::vector<float>& out) {
    out.resize(output_size());
    step(x.data(), x.size(), out.data(), out.size());
  }
  std::vector<float> step(const std::vector<float>& x) {
    std::vector<float> out;
    step(x, out);
    return out;
  }

  // A series [ticks, I] -> [ticks, O], continuing from the current state.
  void run(const float* series, size_t ticks, size_t series_len, float* out, size_t output_len) {
    detail::check(hotpath_engine_run(handle_.get(), series, ticks, series_len, out, output_len));
  }
  std::vector<float> run(const std::vector<float>& series) {
    const size_t ticks = input_size() ? series.size() / input_size() : 0;
    std::vector<float> out(ticks * output_size());
    run(series.data(), ticks, series.size(), out.data(), out.size());
    return out;
  }

  // Fresh windows [batch, window, I] -> [batch, O].
  std::vector<float> run_batch(const std::vector<float>& x, size_t batch, size_t window) {
    std::vector<float> out(batch * output_size());
    detail::check(hotpath_engine_run_batch(handle_.get(), x.data(), batch, window, x.size(), out.data(), out.size()));
    return out;
  }

  // Backtest: series [num_series, ticks, I] -> every tick's output [num_series, ticks, O], each series from
  // zero state; leaves the engine reset.
  std::vector<float> backtest(const std::vector<float>& series, size_t num_series, size_t ticks) {
    std::vector<float> out(num_series * ticks * output_size());
    detail::check(hotpath_engine_backtest(handle_.get(), series.data(), num_series, ticks, series.size(), out.data(),
                                          out.size(), HOTPATH_ARRAYS_IN_HOST));
    return out;
  }
  // The same with both arrays in the engine's GPU's memory (HOTPATH_ARRAYS_ON_DEVICE): device pointers of
  // num_series * ticks * I and num_series * ticks * O floats.
  void backtest_on_device(const float* series, size_t num_series, size_t ticks, float* out) {
    detail::check(hotpath_engine_backtest(handle_.get(), series, num_series, ticks, num_series * ticks * input_size(),
                                          out, num_series * ticks * output_size(), HOTPATH_ARRAYS_ON_DEVICE));
  }
  // Fresh windows in GPU memory: x [batch, window, I] -> out [batch, O], device pointers.
  void run_batch_on_device(const float* x, size_t batch, size_t window, float* out) {
    detail::check(hotpath_engine_run_batch_ex(handle_.get(), x, batch, window, batch * window * input_size(), out,
                                              batch * output_size(), HOTPATH_ARRAYS_ON_DEVICE));
  }

  void reset() { detail::check(hotpath_engine_reset(handle_.get())); }
  // Live swap (hotpath_engine_swap): `m` answers from the tick after the next one; may be called from
  // another thread while one thread ticks. precision: "" for the engine's; warm_ticks: streaming only.
  void swap(const model& m, const std::string& precision = "", int64_t warm_ticks = 0) {
    hotpath_swap_options o = HOTPATH_SWAP_OPTIONS_INIT;
    o.precision = precision.empty() ? nullptr : precision.c_str();
    o.warm_ticks = warm_ticks;
    detail::check(hotpath_engine_swap(handle_.get(), m.get(), &o));
  }
  hotpath_swap_state swap_state() const {
    hotpath_swap_state s{};
    detail::check(hotpath_engine_swap_state(handle_.get(), &s));
    return s;
  }
  // The id of the model that answered the last tick.
  std::string answering_model_id() const { return swap_state().answering_model_id; }
  int64_t ticks() const {
    int64_t t = 0;
    detail::check(hotpath_engine_ticks(handle_.get(), &t));
    return t;
  }
  std::map<std::string, double> counters() {
    size_t n = 0;
    detail::check(hotpath_engine_counters(handle_.get(), &n));
    std::map<std::string, double> result;
    for (size_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      double value = 0;
      detail::check(hotpath_engine_counter(handle_.get(), i, &name, &value));
      result[name] = value;
    }
    return result;
  }
  std::map<std::string, std::string> facts() {
    size_t n = 0;
    detail::check(hotpath_engine_facts(handle_.get(), &n));
    std::map<std::string, std::string> result;
    for (size_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      const char* value = nullptr;
      detail::check(hotpath_engine_fact(handle_.get(), i, &name, &value));
      result[name] = value;
    }
    return result;
  }

  // The tick telemetry of an engine made with options.metrics (hotpath_engine_metrics): counts,
  // quantiles in ns, the histogram's buckets. Any thread, also while another one ticks; throws
  // hotpath::error for an engine made without.
  hotpath_metrics_snapshot metrics() const {
    hotpath_metrics_snapshot s{};
    s.struct_size = sizeof s;
    detail::check(hotpath_engine_metrics(handle_.get(), &s));
    return s;
  }

  hotpath_engine* get() const noexcept { return handle_.get(); }

 private:
  friend class instances;
  // An instance's engine, owned by its set (closing the handle leaves it).
  explicit engine(hotpath_engine* instance) : handle_(instance) { detail::check(hotpath_engine_get_info(instance, &info_)); }

  std::unique_ptr<hotpath_engine, detail::engine_closer> handle_;
  hotpath_engine_info info_{sizeof(hotpath_engine_info), nullptr, nullptr, nullptr, nullptr, 0, 0, 0, nullptr,
                            nullptr, 0, 0.0};
};

// Many instances of one model on one GPU (cuda backend), each an engine on SMs of its own; drive each
// from a thread of its own. Move-only.
struct instances_options {
  size_t count = 1;
  std::string isolation = "green";  // green | shared
  int sms_each = 0;                 // 0: the largest equal share
  std::string placement = "sm";     // shared: sm | block
};

class instances {
 public:
  instances(const model& m, const engine_options& options, const instances_options& set) {
    const hotpath_engine_options o = engine::c_options(options);
    hotpath_instances_options io = HOTPATH_INSTANCES_OPTIONS_INIT;
    io.count = set.count;
    io.isolation = detail::or_null(set.isolation);
    io.sms_each = set.sms_each;
    io.placement = detail::or_null(set.placement);
    hotpath_instances* s = nullptr;
    detail::check(hotpath_instances_open(m.get(), &o, &io, &s));
    handle_.reset(s);
  }

  size_t size() const {
    size_t n = 0;
    detail::check(hotpath_instances_count(handle_.get(), &n));
    return n;
  }
  // Instance k's engine (a view: valid until restart(k) or the set goes).
  engine at(size_t k) {
    hotpath_engine* e = nullptr;
    detail::check(hotpath_instances_engine(handle_.get(), k, &e));
    return engine(e);
  }
  // Closes instance k and opens it again while the others serve; take at(k) again after.
  void restart(size_t k) { detail::check(hotpath_instances_restart(handle_.get(), k)); }
  hotpath_instances* get() const noexcept { return handle_.get(); }

 private:
  struct closer {
    void operator()(hotpath_instances* s) const noexcept { hotpath_instances_close(s); }
  };
  std::unique_ptr<hotpath_instances, closer> handle_;
};

}  // namespace hotpath

#endif  // HOTPATH_HOTPATH_HPP
