// The C ABI (include/hotpath/hotpath.h) over the engine layer. Every entry point checks its arguments,
// calls the engine inside one try block and turns whatever it throws into a status code and the
// thread's last-error message: no exception leaves this file.
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>

#include "capi/handles.hpp"
#include "telemetry/tick_metrics.hpp"
#include "util/error.hpp"

static_assert(HOTPATH_METRICS_BUCKETS == hotpath::telemetry::kBuckets,
              "hotpath.h's HOTPATH_METRICS_BUCKETS is the telemetry histogram's bucket count");

namespace {

// The last failure on this thread. The pointer is what hotpath_last_error returns: it points into the
// string, or at a static message when recording the message itself ran out of memory.
thread_local std::string t_last_error;
thread_local const char* t_last_error_ptr = "";

hotpath_status fail(hotpath_status status, const char* message) noexcept {
  try {
    t_last_error = message;
    // One line, as the CLI prints it.
    for (char& c : t_last_error)
      if (c == '\n' || c == '\r') c = ' ';
    t_last_error_ptr = t_last_error.c_str();
  } catch (...) {
    t_last_error_ptr = "out of memory (while recording an error message)";
    return HOTPATH_ERROR_OUT_OF_MEMORY;
  }
  return status;
}

// A number as text without allocating (argument errors are built where nothing may throw).
struct Num {
  char text[24];
};
Num str(size_t n) noexcept {
  Num num;
  const auto end = std::to_chars(num.text, num.text + sizeof num.text - 1, n).ptr;
  *end = '\0';
  return num;
}
void append(std::string& s, const Num& n) { s += n.text; }
void append(std::string& s, const char* part) { s += part; }

// An argument error built from pieces ("hotpath_engine_step: input_len is 3, expected 4 ..."). Kept out
// of line so the checks on the hot path stay a compare and a branch.
template <class... Parts>
[[gnu::cold, gnu::noinline]] hotpath_status failure(hotpath_status status, const Parts&... parts) noexcept {
  try {
    std::string message;
    (append(message, parts), ...);
    return fail(status, message.c_str());
  } catch (...) {
    return fail(HOTPATH_ERROR_OUT_OF_MEMORY, "out of memory");
  }
}
template <class... Parts>
hotpath_status bad_argument(const Parts&... parts) noexcept {
  return failure(HOTPATH_ERROR_INVALID_ARGUMENT, parts...);
}

// The status and message of the exception being handled (call only inside a catch block).
[[gnu::cold, gnu::noinline]] hotpath_status current_exception_status() noexcept {
  try {
    throw;
  } catch (const hotpath::TickError& e) {
    return fail(HOTPATH_ERROR_TICK, e.what());
  } catch (const hotpath::UnsupportedError& e) {
    return fail(HOTPATH_ERROR_UNSUPPORTED, e.what());
  } catch (const hotpath::BackendError& e) {
    return fail(HOTPATH_ERROR_BACKEND, e.what());
  } catch (const hotpath::Error& e) {
    return fail(HOTPATH_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(HOTPATH_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    try {
      return fail(HOTPATH_ERROR_INTERNAL, (std::string("internal error: ") + e.what()).c_str());
    } catch (...) {
      return fail(HOTPATH_ERROR_INTERNAL, "internal error (and out of memory describing it)");
    }
  } catch (...) {
    return fail(HOTPATH_ERROR_INTERNAL, "internal error: an exception that is not a std::exception");
  }
}

// An optional string argument: NULL and "" both mean "the default".
std::string opt(const char* s, const char* fallback = "") { return s && *s ? std::string(s) : std::string(fallback); }

// a * b, or false when it overflows size_t.
bool checked_mul(size_t a, size_t b, size_t* product) { return !__builtin_mul_overflow(a, b, product); }

// A length argument against the one expected, naming both ("series_len is 10, expected 12 (ticks 3 x
// input size 4)").
#define HOTPATH_CHECK_LEN(fn, name, given, expected, ...)                                                     \
  do {                                                                                                        \
    if ((given) != (expected)) [[unlikely]]                                                                   \
      return bad_argument(fn ": " name " is ", str(given), ", expected ", str(expected), " (", __VA_ARGS__, ")"); \
  } while (0)

#define HOTPATH_CHECK_NOT_NULL(fn, arg) \
  do {                                  \
    if (!(arg)) [[unlikely]]            \
      return bad_argument(fn ": " #arg " is NULL"); \
  } while (0)

// Whether a struct of `size` bytes (the caller's struct_size) holds `field` whole.
template <class S, class F>
bool covers(size_t size, F S::*field) {
  static const S probe{};
  const auto offset = size_t(reinterpret_cast<const char*>(&(probe.*field)) - reinterpret_cast<const char*>(&probe));
  return offset + sizeof(F) <= size;
}

// The first layout of each struct ended with these fields: a caller built against that
// header declares at least this much. Fields added since go at the end.
constexpr size_t kFirstOptionsSize = offsetof(hotpath_engine_options, variant) + sizeof(const char*);
constexpr size_t kFirstSwapOptionsSize = offsetof(hotpath_swap_options, warm_ticks) + sizeof(int64_t);
constexpr size_t kFirstEngineInfoSize = offsetof(hotpath_engine_info, choice_note) + sizeof(const char*);

// The options a caller passed, read within the size it declared. An older, smaller layout is read as far
// as it goes and the fields it lacks keep their defaults (zero); a larger one, from a later header, is
// accepted when the fields this library does not know are zero (their default).
constexpr size_t kMaxOptionsSize = 1024;
hotpath_status read_options(const hotpath_engine_options* given, hotpath_engine_options* out) {
  *out = hotpath_engine_options{};
  if (!given) return HOTPATH_OK;
  const size_t size = given->struct_size;
  if (size < kFirstOptionsSize)
    return bad_argument("hotpath_engine_open: options->struct_size is ", str(size), ", expected ",
                        str(sizeof(hotpath_engine_options)), " (sizeof(hotpath_engine_options), or at least ",
                        str(kFirstOptionsSize), " from an older header; start from HOTPATH_ENGINE_OPTIONS_INIT)");
  // A later layout adds a few fields, not kilobytes: a size beyond that is garbage (an uninitialised
  // struct), and reading that far could leave the caller's memory.
  if (size > kMaxOptionsSize)
    return bad_argument("hotpath_engine_open: options->struct_size is ", str(size), ", expected ",
                        str(sizeof(hotpath_engine_options)), " (sizeof(hotpath_engine_options); at most ",
                        str(kMaxOptionsSize), " from a later header)");
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (size_t i = sizeof(hotpath_engine_options); i < size; ++i)
    if (bytes[i] != 0)
      return failure(HOTPATH_ERROR_UNSUPPORTED, "hotpath_engine_open: options->struct_size is ", str(size),
                     " and sets fields this library (hotpath " HOTPATH_VERSION ") does not know (it knows ",
                     str(sizeof(hotpath_engine_options)), " bytes)");
  std::memcpy(out, given, std::min(size, sizeof(hotpath_engine_options)));
  // Each field added after the first layout: the default unless the caller's size covers it whole (a
  // size that ends inside a field is no layout's, and its bytes there are not a value).
  if (!covers(size, &hotpath_engine_options::scaler)) out->scaler = nullptr;
  if (!covers(size, &hotpath_engine_options::no_warm)) out->no_warm = 0;
  if (!covers(size, &hotpath_engine_options::kernel)) out->kernel = nullptr;
  if (!covers(size, &hotpath_engine_options::cpu_options)) out->cpu_options = nullptr;
  if (!covers(size, &hotpath_engine_options::batch_rows)) out->batch_rows = 0;
  // unused_padding is never read: within the second layout's size its bytes are the caller's padding.
  if (!covers(size, &hotpath_engine_options::metrics)) out->metrics = 0;
  // unused_padding2 likewise: the third layout's tail padding.
  if (!covers(size, &hotpath_engine_options::swap_room)) out->swap_room = 0;
  return HOTPATH_OK;
}

// A choice given as text (NULL and "": the option's default), parsed by its enum's name table
// (backend/options.hpp), as the CLI's flag and Python's keyword are.
template <class E, class Target>
void set_choice(const char* text, Target& out) {
  if (text && *text) out = hotpath::util::parse_name<E>(text);
}

hotpath::EngineOptions engine_options(const hotpath_engine_options& o) {
  using namespace hotpath;
  EngineOptions e;
  set_choice<BackendKind>(o.backend, e.backend);
  set_choice<Precision>(o.precision, e.precision);
  set_choice<Mode>(o.mode, e.mode);
  e.window = o.window;
  e.gpu.device = o.device;
  if (o.cpuset && *o.cpuset) e.cpuset = parse_cpuset(o.cpuset);
  // 0 is the struct's zero default; anything else (negative, NaN, too long) is the engine's to refuse.
  if (o.timeout_us != 0) e.gpu.timeout_us = o.timeout_us;
  set_choice<Fallback>(o.fallback, e.fallback);
  set_choice<CudaVariant>(o.variant, e.gpu.variant);
  set_choice<CudaKernel>(o.kernel, e.gpu.kernel);
  if (o.scaler && *o.scaler) e.scaler = parse_scaler(o.scaler);
  e.warm = o.no_warm == 0;
  if (o.cpu_options && *o.cpu_options) e.cpu = cpu_options_over_env(o.cpu_options);
  e.gpu.batch_rows = o.batch_rows;  // the engine refuses a value out of range, or for ref and cpu
  e.metrics = o.metrics != 0;
  e.swap_room = o.swap_room != 0;
  return e;
}

// A caller's info struct: the declared size must cover the first layout's fields at least; only the
// fields within it are written.
template <class Info>
bool info_size_ok(const Info* info, size_t first_layout = sizeof(Info)) {
  return info->struct_size >= first_layout;
}

}  // namespace

extern "C" {

const char* hotpath_status_name(hotpath_status status) {
  switch (status) {
    case HOTPATH_OK: return "ok";
    case HOTPATH_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case HOTPATH_ERROR_TICK: return "tick error";
    case HOTPATH_ERROR_UNSUPPORTED: return "unsupported";
    case HOTPATH_ERROR_OUT_OF_MEMORY: return "out of memory";
    case HOTPATH_ERROR_INTERNAL: return "internal error";
    case HOTPATH_ERROR_BACKEND: return "backend error";
    case HOTPATH_STATUS_MAX_ENUM: break;
  }
  return "unknown status";
}

const char* hotpath_last_error(void) { return t_last_error_ptr; }

const char* hotpath_version(void) { return HOTPATH_VERSION; }

// ---- models ------------------------------------------------------------------------------------------

hotpath_status hotpath_model_open(const char* path_or_zoo_name, const char* lstm_prefix, const char* head_prefix,
                                  hotpath_model** out) {
  return hotpath_model_open_ex(path_or_zoo_name, lstm_prefix, head_prefix, nullptr, out);
}

hotpath_status hotpath_model_open_bytes(const void* data, size_t size, const char* name, const char* lstm_prefix,
                                        const char* head_prefix, hotpath_model** out) {
  return hotpath_model_open_bytes_ex(data, size, name, lstm_prefix, head_prefix, nullptr, out);
}

hotpath_status hotpath_model_open_ex(const char* path_or_zoo_name, const char* lstm_prefix, const char* head_prefix,
                                     const char* ignore_tensors, hotpath_model** out) {
  HOTPATH_CHECK_NOT_NULL("hotpath_model_open", out);
  *out = nullptr;
  HOTPATH_CHECK_NOT_NULL("hotpath_model_open", path_or_zoo_name);
  try {
    hotpath::LoadOptions load{opt(lstm_prefix), opt(head_prefix)};
    if (ignore_tensors && *ignore_tensors) load.ignore = hotpath::split_ignore_list(ignore_tensors, "ignore_tensors");
    *out = new hotpath_model{hotpath::open_model(path_or_zoo_name, load)};
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_model_open_bytes_ex(const void* data, size_t size, const char* name, const char* lstm_prefix,
                                           const char* head_prefix, const char* ignore_tensors, hotpath_model** out) {
  HOTPATH_CHECK_NOT_NULL("hotpath_model_open_bytes", out);
  *out = nullptr;
  HOTPATH_CHECK_NOT_NULL("hotpath_model_open_bytes", data);
  try {
    hotpath::LoadOptions load{opt(lstm_prefix), opt(head_prefix)};
    if (ignore_tensors && *ignore_tensors) load.ignore = hotpath::split_ignore_list(ignore_tensors, "ignore_tensors");
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(data), size);
    *out = new hotpath_model{hotpath::open_model_bytes(bytes, opt(name, "<bytes>"), load)};
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_model_get_info(const hotpath_model* model, hotpath_model_info* info) {
  HOTPATH_CHECK_NOT_NULL("hotpath_model_get_info", model);
  HOTPATH_CHECK_NOT_NULL("hotpath_model_get_info", info);
  if (!info_size_ok(info))
    return bad_argument("hotpath_model_get_info: info->struct_size is ", str(info->struct_size), ", expected at least ",
                        str(sizeof(hotpath_model_info)), " (sizeof(hotpath_model_info))");
  const hotpath::ModelConfig& c = model->model.config;
  info->input_size = c.input_size;
  info->hidden_size = c.hidden_size;
  info->num_layers = c.num_layers;
  info->output_size = c.output_size;
  info->window = c.window.value_or(0);
  info->name = model->model.name.c_str();
  return HOTPATH_OK;
}

void hotpath_model_close(hotpath_model* model) { delete model; }

// ---- engines -----------------------------------------------------------------------------------------

hotpath_status hotpath_engine_open(const hotpath_model* model, const hotpath_engine_options* options,
                                   hotpath_engine** out) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_open", out);
  *out = nullptr;
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_open", model);
  try {
    hotpath_engine_options o;
    if (const hotpath_status s = read_options(options, &o); s != HOTPATH_OK) return s;
    *out = new hotpath_engine(model->model, engine_options(o));
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_get_info(const hotpath_engine* engine, hotpath_engine_info* info) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_get_info", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_get_info", info);
  if (!info_size_ok(info, kFirstEngineInfoSize))
    return bad_argument("hotpath_engine_get_info: info->struct_size is ", str(info->struct_size), ", expected ",
                        str(sizeof(hotpath_engine_info)), " (sizeof(hotpath_engine_info), or at least ",
                        str(kFirstEngineInfoSize), " from an older header)");
  const hotpath_engine::Description& d = engine->description();
  info->backend = d.backend.c_str();
  info->variant = d.variant.c_str();
  info->precision = d.precision.c_str();
  info->mode = d.mode.c_str();
  info->window = d.window;
  info->input_size = int(engine->input_size);
  info->output_size = int(engine->output_size);
  info->choice_note = d.choice_note.c_str();
  const size_t size = info->struct_size;
  if (covers(size, &hotpath_engine_info::scaler)) info->scaler = d.scaler.c_str();
  if (covers(size, &hotpath_engine_info::warm_ticks)) info->warm_ticks = int64_t(engine->engine.warm_up().ticks);
  if (covers(size, &hotpath_engine_info::warm_seconds)) info->warm_seconds = engine->engine.warm_up().seconds;
  return HOTPATH_OK;
}

hotpath_status hotpath_engine_step(hotpath_engine* engine, const float* x, size_t input_len, float* out,
                                   size_t output_len) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_step", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_step", x);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_step", out);
  HOTPATH_CHECK_LEN("hotpath_engine_step", "input_len", input_len, engine->input_size, "the model's input size I");
  HOTPATH_CHECK_LEN("hotpath_engine_step", "output_len", output_len, engine->output_size,
                    "the model's output size O");
  try {
    engine->engine.step({x, input_len}, {out, output_len});
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

}  // extern "C"

namespace {
// hotpath_engine_run and hotpath_engine_run_f64: `fn` names the entry point in messages.
template <class Out>
hotpath_status run_series(const char* fn, hotpath_engine* engine, const float* series, size_t ticks, size_t series_len,
                          Out* out, size_t output_len) noexcept {
  if (!engine) return bad_argument(fn, ": engine is NULL");
  // NULL buffers are fine for zero ticks (an empty std::vector's data() may be NULL).
  if (!series && ticks != 0) return bad_argument(fn, ": series is NULL");
  if (!out && ticks != 0) return bad_argument(fn, ": out is NULL");
  size_t in_expected = 0, out_expected = 0;
  if (!checked_mul(ticks, engine->input_size, &in_expected) || !checked_mul(ticks, engine->output_size, &out_expected))
    return bad_argument(fn, ": ticks ", str(ticks), " overflows the buffer sizes");
  if (series_len != in_expected)
    return bad_argument(fn, ": series_len is ", str(series_len), ", expected ", str(in_expected), " (ticks ", str(ticks),
                        " x input size ", str(engine->input_size), ")");
  if (output_len != out_expected)
    return bad_argument(fn, ": output_len is ", str(output_len), ", expected ", str(out_expected), " (ticks ",
                        str(ticks), " x output size ", str(engine->output_size), ")");
  try {
    engine->engine.run({series, series_len}, ticks, std::span<Out>(out, output_len));
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}
}  // namespace

extern "C" {

hotpath_status hotpath_engine_run(hotpath_engine* engine, const float* series, size_t ticks, size_t series_len,
                                  float* out, size_t output_len) {
  return run_series("hotpath_engine_run", engine, series, ticks, series_len, out, output_len);
}

hotpath_status hotpath_engine_run_f64(hotpath_engine* engine, const float* series, size_t ticks, size_t series_len,
                                      double* out, size_t output_len) {
  return run_series("hotpath_engine_run_f64", engine, series, ticks, series_len, out, output_len);
}

namespace {
hotpath_status run_batch_call(const char* fn, hotpath_engine* engine, const float* x, size_t batch, size_t window,
                              size_t input_len, float* out, size_t output_len, unsigned flags) {
  if (!engine) return bad_argument(fn, ": engine is NULL");
  if (!x) return bad_argument(fn, ": x is NULL");
  if (!out) return bad_argument(fn, ": out is NULL");
  if (flags & ~HOTPATH_ARRAYS_ON_DEVICE)
    return bad_argument(fn, ": flags ", str(flags), " holds bits that are not HOTPATH_ARRAYS_ON_DEVICE");
  size_t rows = 0, in_expected = 0, out_expected = 0;
  if (!checked_mul(batch, window, &rows) || !checked_mul(rows, engine->input_size, &in_expected) ||
      !checked_mul(batch, engine->output_size, &out_expected))
    return bad_argument(fn, ": batch ", str(batch), " x window ", str(window), " overflows the buffer sizes");
  if (input_len != in_expected)
    return bad_argument(fn, ": input_len is ", str(input_len), ", expected ", str(in_expected), " (",
                    "batch ", str(batch), " x window ", str(window), " x input size ", str(engine->input_size), ")");
  if (output_len != out_expected)
    return bad_argument(fn, ": output_len is ", str(output_len), ", expected ", str(out_expected), " (",
                    "batch ", str(batch), " x output size ", str(engine->output_size), ")");
  try {
    if (flags & HOTPATH_ARRAYS_ON_DEVICE) engine->engine.run_batch_on_device(x, batch, window, out);
    else engine->engine.run_batch({x, input_len}, batch, window, {out, output_len});
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}
}  // namespace

hotpath_status hotpath_engine_run_batch(hotpath_engine* engine, const float* x, size_t batch, size_t window,
                                        size_t input_len, float* out, size_t output_len) {
  return run_batch_call("hotpath_engine_run_batch", engine, x, batch, window, input_len, out, output_len, 0);
}

hotpath_status hotpath_engine_run_batch_ex(hotpath_engine* engine, const float* x, size_t batch, size_t window,
                                           size_t input_len, float* out, size_t output_len, unsigned flags) {
  return run_batch_call("hotpath_engine_run_batch_ex", engine, x, batch, window, input_len, out, output_len, flags);
}

hotpath_status hotpath_engine_backtest(hotpath_engine* engine, const float* series, size_t num_series, size_t ticks,
                                       size_t input_len, float* out, size_t output_len, unsigned flags) {
  const char* fn = "hotpath_engine_backtest";
  if (!engine) return bad_argument(fn, ": engine is NULL");
  if (!series) return bad_argument(fn, ": series is NULL");
  if (!out) return bad_argument(fn, ": out is NULL");
  if (flags & ~HOTPATH_ARRAYS_ON_DEVICE)
    return bad_argument(fn, ": flags ", str(flags), " holds bits that are not HOTPATH_ARRAYS_ON_DEVICE");
  size_t rows = 0, in_expected = 0, out_expected = 0;
  if (!checked_mul(num_series, ticks, &rows) || !checked_mul(rows, engine->input_size, &in_expected) ||
      !checked_mul(rows, engine->output_size, &out_expected))
    return bad_argument(fn, ": ", str(num_series), " series x ", str(ticks), " ticks overflows the buffer sizes");
  if (input_len != in_expected)
    return bad_argument(fn, ": input_len is ", str(input_len), ", expected ", str(in_expected), " (", str(num_series), " series x ", str(ticks),
                    " ticks x input size ", str(engine->input_size), ")");
  if (output_len != out_expected)
    return bad_argument(fn, ": output_len is ", str(output_len), ", expected ", str(out_expected), " (", str(num_series), " series x ", str(ticks),
                    " ticks x output size ", str(engine->output_size), ")");
  try {
    if (flags & HOTPATH_ARRAYS_ON_DEVICE) engine->engine.backtest_on_device(series, num_series, ticks, out);
    else engine->engine.backtest({series, input_len}, num_series, ticks, {out, output_len});
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_swap(hotpath_engine* engine, const hotpath_model* model,
                                   const hotpath_swap_options* options) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_swap", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_swap", model);
  if (options && options->struct_size < kFirstSwapOptionsSize)
    return bad_argument("hotpath_engine_swap: options->struct_size is ", str(options->struct_size), ", expected ",
                        str(sizeof(hotpath_swap_options)), " (sizeof(hotpath_swap_options))");
  try {
    hotpath::SwapOptions so;
    if (options) {
      set_choice<hotpath::Precision>(options->precision, so.precision);
      so.warm_ticks = options->warm_ticks;
    }
    engine->engine.swap(model->model, so);
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_swap_state(const hotpath_engine* engine, hotpath_swap_state* state) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_swap_state", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_swap_state", state);
  const hotpath::Engine& e = engine->engine;
  state->answering_model_id = e.answering_model_id().c_str();
  state->swaps = int64_t(e.swaps());
  state->pending = e.swap_pending() ? 1 : 0;
  return HOTPATH_OK;
}

hotpath_status hotpath_model_id(const hotpath_model* model, char id[17]) {
  HOTPATH_CHECK_NOT_NULL("hotpath_model_id", model);
  HOTPATH_CHECK_NOT_NULL("hotpath_model_id", id);
  const std::string s = hotpath::model_id(model->model);
  std::memcpy(id, s.c_str(), 17);
  return HOTPATH_OK;
}

hotpath_status hotpath_engine_reset(hotpath_engine* engine) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_reset", engine);
  try {
    engine->engine.reset();
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_ticks(const hotpath_engine* engine, int64_t* ticks) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_ticks", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_ticks", ticks);
  try {
    *ticks = int64_t(engine->engine.ticks());
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_counters(hotpath_engine* engine, size_t* count) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_counters", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_counters", count);
  try {
    const auto counters = engine->engine.counters();
    engine->counters.assign(counters.begin(), counters.end());
    *count = engine->counters.size();
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_counter(const hotpath_engine* engine, size_t index, const char** name, double* value) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_counter", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_counter", name);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_counter", value);
  if (index >= engine->counters.size())
    return bad_argument("hotpath_engine_counter: index ", str(index), " is out of range (the snapshot holds ",
                        str(engine->counters.size()), " counters; take one with hotpath_engine_counters)");
  *name = engine->counters[index].first.c_str();
  *value = engine->counters[index].second;
  return HOTPATH_OK;
}

hotpath_status hotpath_engine_facts(hotpath_engine* engine, size_t* count) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_facts", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_facts", count);
  try {
    const auto facts = engine->engine.facts();
    engine->facts.assign(facts.begin(), facts.end());
    *count = engine->facts.size();
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_engine_fact(const hotpath_engine* engine, size_t index, const char** name, const char** value) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_fact", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_fact", name);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_fact", value);
  if (index >= engine->facts.size())
    return bad_argument("hotpath_engine_fact: index ", str(index), " is out of range (the snapshot holds ",
                        str(engine->facts.size()), " facts; take one with hotpath_engine_facts)");
  *name = engine->facts[index].first.c_str();
  *value = engine->facts[index].second.c_str();
  return HOTPATH_OK;
}

hotpath_status hotpath_engine_metrics(const hotpath_engine* engine, hotpath_metrics_snapshot* snapshot) {
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_metrics", engine);
  HOTPATH_CHECK_NOT_NULL("hotpath_engine_metrics", snapshot);
  if (!info_size_ok(snapshot))
    return bad_argument("hotpath_engine_metrics: snapshot->struct_size is ", str(snapshot->struct_size),
                        ", expected ", str(sizeof(hotpath_metrics_snapshot)), " (sizeof(hotpath_metrics_snapshot))");
  // Set once when the engine opened: no lock needed beside the tick thread.
  const std::shared_ptr<const hotpath::telemetry::TickMetrics> metrics = engine->engine.metrics();
  if (!metrics)
    return bad_argument("hotpath_engine_metrics: this engine records no telemetry (open it with options->metrics = 1)");
  try {
    namespace telemetry = hotpath::telemetry;
    const telemetry::Snapshot s = metrics->snapshot();
    // Filled apart, then copied whole: a failure (out of memory) leaves the caller's struct untouched.
    hotpath_metrics_snapshot out{};
    out.struct_size = snapshot->struct_size;
    out.count = s.count;
    out.sum_ns = s.sum_ns;
    out.p50_ns = telemetry::quantile(s, 0.5);
    out.p99_ns = telemetry::quantile(s, 0.99);
    out.p999_ns = telemetry::quantile(s, 0.999);
    out.answered = s.answered;
    out.late = s.late;
    out.lost = s.lost;
    out.fallback = s.fallback;
    out.gpu_timeouts = s.gpu_timeouts;
    out.lease_renewals = s.lease_renewals;
    out.swaps = s.swaps;
    out.precompute_backlog = s.precompute_backlog;
    out.model_id = engine->kept(s.model_id);
    out.backend = engine->kept(s.backend);
    out.variant = engine->kept(s.variant);
    for (int i = 0; i < telemetry::kBuckets; ++i) {
      out.bucket_upper_ns[i] = telemetry::kBucketUpperNs[size_t(i)];
      out.cumulative[i] = s.cumulative[size_t(i)];
    }
    *snapshot = out;  // the first (and only) layout: struct_size covers all of it
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

void hotpath_engine_close(hotpath_engine* engine) {
  if (engine && engine->own) delete engine;  // an instance's engine is its set's to close
}

hotpath_status hotpath_instances_open(const hotpath_model* model, const hotpath_engine_options* options,
                                      const hotpath_instances_options* instances, hotpath_instances** out) {
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_open", out);
  *out = nullptr;
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_open", model);
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_open", instances);
  // One layout so far: the caller's struct must be this header's (a later, larger one is refused
  // rather than read past what this library knows).
  if (instances->struct_size != sizeof(hotpath_instances_options))
    return bad_argument("hotpath_instances_open: instances->struct_size is ", str(instances->struct_size),
                        ", expected ", str(sizeof(hotpath_instances_options)),
                        " (sizeof(hotpath_instances_options); start from HOTPATH_INSTANCES_OPTIONS_INIT)");
  if (instances->count < 1)
    return bad_argument("hotpath_instances_open: instances->count is 0, expected at least 1");
  if (instances->sms_each < 0)
    return bad_argument("hotpath_instances_open: instances->sms_each is ", str(instances->sms_each),
                        ", expected 0 (the largest equal share) or more");
  try {
    hotpath_engine_options o;
    if (const hotpath_status s = read_options(options, &o); s != HOTPATH_OK) return s;
    hotpath::engine::InstanceOptions io;
    io.count = int(std::min<size_t>(instances->count, size_t(1) << 20));
    set_choice<hotpath::engine::Isolation>(instances->isolation, io.isolation);
    io.sms_each = instances->sms_each;
    set_choice<hotpath::engine::Placement>(instances->placement, io.placement);
    *out = new hotpath_instances(model->model, engine_options(o), io);
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

hotpath_status hotpath_instances_count(const hotpath_instances* set, size_t* count) {
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_count", set);
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_count", count);
  *count = set->handles.size();
  return HOTPATH_OK;
}

hotpath_status hotpath_instances_engine(hotpath_instances* set, size_t k, hotpath_engine** engine) {
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_engine", engine);
  *engine = nullptr;
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_engine", set);
  if (k >= set->handles.size())
    return bad_argument("hotpath_instances_engine: instance ", str(k), " of a set of ", str(set->handles.size()));
  if (!set->handles[k])
    return failure(HOTPATH_ERROR_BACKEND, "hotpath_instances_engine: instance ", str(k),
                   " has no engine (its last restart failed; restart it again)");
  *engine = set->handles[k].get();
  return HOTPATH_OK;
}

hotpath_status hotpath_instances_restart(hotpath_instances* set, size_t k) {
  HOTPATH_CHECK_NOT_NULL("hotpath_instances_restart", set);
  if (k >= set->handles.size())
    return bad_argument("hotpath_instances_restart: instance ", str(k), " of a set of ", str(set->handles.size()));
  try {
    set->handles[k].reset();  // its engine goes now
    set->set.restart(k);
    set->handles[k] = std::make_unique<hotpath_engine>(set->set[k]);
    return HOTPATH_OK;
  } catch (...) {
    return current_exception_status();
  }
}

void hotpath_instances_close(hotpath_instances* set) { delete set; }

}  // extern "C"
