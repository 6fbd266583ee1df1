/* hotpath: microsecond LSTM inference, the C ABI.
 *
 * Plain C (C89 and later) and C++. Link libhotpath.so (CMake: find_package(hotpath CONFIG) and
 * hotpath::hotpath; pkg-config: hotpath); it needs neither CUDA nor LD_LIBRARY_PATH at build or run time.
 *
 * Conventions
 * - Every call that can fail returns a hotpath_status. On failure hotpath_last_error() holds one line
 *   naming the problem (the text the `hotpath` CLI prints after "hotpath: error: "). A failed open sets
 *   *out to NULL; other failed calls leave their out-parameters untouched, except where said otherwise.
 *   No C++ exception crosses this interface.
 * - Handles are opaque. hotpath_*_close(NULL) does nothing.
 * - Buffers belong to the caller and are never retained: the library reads inputs and writes outputs in
 *   place (no copies). Every buffer comes with its length in elements (floats), checked against the
 *   expected one; a mismatch is HOTPATH_ERROR_INVALID_ARGUMENT naming both.
 * - Strings passed in are NUL-terminated UTF-8; NULL where an optional string is allowed means "default".
 *   Strings handed out stay valid as long as their handle (or as documented).
 *
 * Thread safety
 * - An engine is used by one thread at a time (calls on one engine must not overlap; the caller may
 *   hand it from thread to thread). Different engines run in parallel on different threads.
 * - A model is read-only once opened: any number of threads may open engines from it concurrently.
 * - Two calls may run on another thread while one thread ticks an engine: hotpath_engine_swap() and
 *   hotpath_engine_metrics() (a scrape of its telemetry).
 * - hotpath_last_error() is per thread: it describes the last failed call made on the calling thread.
 * - hotpath_version() and hotpath_status_name() may be called from anywhere at any time.
 */
#ifndef HOTPATH_HOTPATH_H
#define HOTPATH_HOTPATH_H

#include <stddef.h>
#include <stdint.h> /* C99, and provided by C89 compilers too (gcc, clang, MSVC) */

#if defined(HOTPATH_BUILDING_LIBRARY) && defined(__GNUC__)
#define HOTPATH_API __attribute__((visibility("default")))
#else
#define HOTPATH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ---------------------------------------------------------------------------------- */

typedef enum hotpath_status {
  HOTPATH_OK = 0,
  /* Bad input of any kind: a NULL or wrongly sized argument, an unknown option value, a missing,
   * corrupt or unsupported model file (what the CLI exits 2 for). */
  HOTPATH_ERROR_INVALID_ARGUMENT = 1,
  /* A tick input holding NaN or Inf. The engine's state is exactly as before the call. */
  HOTPATH_ERROR_TICK = 2,
  /* The platform cannot do what was asked (e.g. backend "cuda" without a usable GPU, a model too large
   * for a kernel). */
  HOTPATH_ERROR_UNSUPPORTED = 3,
  HOTPATH_ERROR_OUT_OF_MEMORY = 4,
  /* A bug in hotpath; the message says what went wrong. */
  HOTPATH_ERROR_INTERNAL = 5,
  /* The backend failed at run time, not the input: a GPU answer past its deadline (timeout_us), a
   * kernel that stopped or would not start, a fallback whose CPU shadow failed. The engine may answer
   * again later (a late GPU catches up) or keep failing; reset or reopen it. */
  HOTPATH_ERROR_BACKEND = 6,
  /* Never returned: makes every int value a valid hotpath_status, in C and C++ alike. */
  HOTPATH_STATUS_MAX_ENUM = 0x7fffffff
} hotpath_status;

/* "ok", "invalid argument", "tick error", "unsupported", "out of memory", "internal error", "backend
 * error"; "unknown
 * status" for any other value. Static storage. */
HOTPATH_API const char* hotpath_status_name(hotpath_status status);

/* The last failure on the calling thread, one line without a trailing newline; "" when no call on this
 * thread has failed. Valid until the next failing call on this thread. Successful calls leave it as it
 * is (so an error survives the cleanup calls that follow it). */
HOTPATH_API const char* hotpath_last_error(void);

/* The library's version, e.g. "0.1.0" (static storage). */
HOTPATH_API const char* hotpath_version(void);

/* ---- models ---------------------------------------------------------------------------------- */

typedef struct hotpath_model hotpath_model;

/* A safetensors model file (a PyTorch nn.LSTM + nn.Linear state_dict), else a zoo name ("lstm_s", see
 * `hotpath models`). lstm_prefix/head_prefix (NULL or "": detect) name the key prefixes when a file's
 * are ambiguous, e.g. "lstm." and "fc."; with a zoo name they must be NULL or "". Every tensor of the
 * file must be used by the model: one that is not (a second Linear layer, ...) is refused naming it
 * (hotpath_model_open_ex lets a caller name the ones the module deliberately leaves unused). On success
 * *out owns the model (hotpath_model_close). */
HOTPATH_API hotpath_status hotpath_model_open(const char* path_or_zoo_name, const char* lstm_prefix,
                                              const char* head_prefix, hotpath_model** out);

/* The bytes of a safetensors model file held in memory (size bytes at data, read during the call only).
 * name (NULL: "<bytes>") names it in messages and reports. */
HOTPATH_API hotpath_status hotpath_model_open_bytes(const void* data, size_t size, const char* name,
                                                    const char* lstm_prefix, const char* head_prefix,
                                                    hotpath_model** out);

/* As the two above, with ignore_tensors (NULL or "": none): the file's tensors that the module does not
 * use, comma-separated, each a tensor name or a prefix ending in '.' (e.g. "aux.,probe.weight"); an
 * entry that matches no tensor, or a tensor the model uses, is refused. The CLI's --ignore-tensors. */
HOTPATH_API hotpath_status hotpath_model_open_ex(const char* path_or_zoo_name, const char* lstm_prefix,
                                                 const char* head_prefix, const char* ignore_tensors,
                                                 hotpath_model** out);
HOTPATH_API hotpath_status hotpath_model_open_bytes_ex(const void* data, size_t size, const char* name,
                                                       const char* lstm_prefix, const char* head_prefix,
                                                       const char* ignore_tensors, hotpath_model** out);

/* Shape and name of a model. Set struct_size = sizeof(hotpath_model_info) before the call (fields added
 * by later versions go at the end, and only the first struct_size bytes are written). */
typedef struct hotpath_model_info {
  size_t struct_size;
  int input_size;   /* I */
  int hidden_size;  /* H */
  int num_layers;   /* L */
  int output_size;  /* O */
  int window;       /* the default sliding window from the file's metadata, 0 when it has none */
  const char* name; /* zoo name or file path; valid while the model is open */
} hotpath_model_info;

HOTPATH_API hotpath_status hotpath_model_get_info(const hotpath_model* model, hotpath_model_info* info);

/* Frees the model. Engines opened from it hold their own copy and stay usable. NULL: nothing. */
HOTPATH_API void hotpath_model_close(hotpath_model* model);

/* ---- engines --------------------------------------------------------------------------------- */

typedef struct hotpath_engine hotpath_engine;

/* Options of a new engine. Start from HOTPATH_ENGINE_OPTIONS_INIT (or zero every byte and set
 * struct_size = sizeof(hotpath_engine_options)): a zero or NULL field means the default. Fields added
 * by later versions go at the end and default to zero, so code built against this header keeps working:
 * a library reads the struct within struct_size only, and gives every field that size does not cover
 * its default (an older, smaller struct works with a newer library). */
typedef struct hotpath_engine_options {
  size_t struct_size;     /* sizeof(hotpath_engine_options) */
  const char* backend;    /* "auto" (NULL), "ref", "cpu", "cuda", "hybrid" (the CPU answers, the GPU
                             precomputes; docs/hybrid.md). auto: cuda when a GPU is usable and the model
                             fits its kernels, else cpu */
  const char* precision;  /* NULL: the backend's default; "fp64" (ref), "fp32", "bf16", "int8" (cpu),
                             "fp16", "bf16" (cuda) */
  const char* mode;       /* "window" (NULL) or "streaming"; "batch": hotpath_engine_run_batch only */
  int window;             /* W in window mode; 0: the model's metadata window */
  int device;             /* CUDA device ordinal */
  const char* cpuset;     /* cores as the CLI's --cpuset, e.g. "2-5" or "2,4,6": the first runs the
                             critical step, the rest precompute. NULL or "": not pinned */
  double timeout_us;      /* cuda: give up on an output after this long; 0: 1,000,000 */
  const char* fallback;   /* NULL, "" or "none": none; "cpu": a CPU backend answers when the GPU (cuda)
                             is late; refused for "ref"/"cpu", dropped when "auto" picks the CPU */
  const char* variant;    /* cuda: the one-SM kernel's critical step, "auto" (NULL or ""), "smem" or
                             "regs"; refused for "ref"/"cpu" */
  /* The first layout ended here: a program built against it passes a struct_size that stops here. */
  const char* scaler;     /* input scaling, as the CLI's --scaler: "none", "model" (the model file's
                             input_scaler tensors) or "rolling:N" (mean and std of the past N ticks, N in
                             2..1,000,000); NULL or "": "model" when the model carries a scaler, else
                             "none" */
  int no_warm;            /* 0: the engine is warmed on open (synthetic ticks on the critical core, then
                             a reset); nonzero: not (its first ticks meet a cold backend) */
  const char* kernel;     /* cuda kernel family, as the CLI's --kernel: "auto" (NULL or ""), "cta",
                             "cluster", "grid"; another name is HOTPATH_ERROR_INVALID_ARGUMENT naming the
                             choices; refused for "ref"/"cpu", dropped when "auto" picks the CPU */
  const char* cpu_options; /* the cpu backend's knobs (and cuda's CPU fallback's), as the CLI's
                             --cpu-options: comma-separated key=value, keys isa (auto, avx512, avx2, neon, sve,
                             generic), bf16 (auto, dot, cvt), int8_act (16, 8), prefetch (auto, bytes
                             0..65536), rewarm (1, 0), hugepages (1, 0), each over the environment's
                             HOTPATH_CPU_* (e.g. "isa=avx2,prefetch=0"); NULL or "": the environment's;
                             refused for "ref" */
  int batch_rows;         /* cuda: rows of the chunks hotpath_engine_run_batch and backtests compute at
                             once, 1..65536 (rounded up to 128), as the CLI's --batch-rows; 0: sized to
                             the device's SMs; refused for "ref"/"cpu", dropped when "auto" picks the CPU */
  /* The second layout ended here. On 64-bit targets padding followed batch_rows, inside that layout's
     struct_size, and its bytes are whatever the caller's stack held: a field there could not be told
     from them. It is named and never read. */
  int unused_padding;     /* ignored */
  int metrics;            /* nonzero: record tick telemetry (hotpath_engine_metrics); 0: none, and the
                             tick path pays one untaken branch */
  /* The third layout ended here, its size rounded up to 8 with 4 bytes of padding after metrics: those
     are named and never read, as above. */
  int unused_padding2;    /* ignored */
  int swap_room;          /* cuda: nonzero keeps room for live swaps (hotpath_engine_swap): the GPU split
                             into two halves of its SMs, the model served on one and a swap's next model
                             brought up on the other while it answers; without it a cuda engine's swap is
                             refused (its kernel holds every SM). Refused for "ref"/"cpu", dropped when
                             "auto" picks the CPU. (4 bytes of padding follow on 64-bit targets: a later
                             field goes after them.) */
} hotpath_engine_options;

#define HOTPATH_ENGINE_OPTIONS_INIT \
  { sizeof(hotpath_engine_options), NULL, NULL, NULL, 0, 0, NULL, 0.0, NULL, NULL, NULL, 0, NULL, NULL, 0, 0, 0, 0, 0 }

/* Creates an engine serving a copy of model (the model may be closed afterwards). options may be NULL
 * (all defaults). HOTPATH_ERROR_UNSUPPORTED when the chosen backend cannot serve the model here. */
HOTPATH_API hotpath_status hotpath_engine_open(const hotpath_model* model, const hotpath_engine_options* options,
                                               hotpath_engine** out);

/* What serves the engine. Set struct_size = sizeof(hotpath_engine_info) before the call: only the fields
 * within struct_size are written (an older, smaller struct gets the fields it has). Strings are valid
 * while the engine is open. */
typedef struct hotpath_engine_info {
  size_t struct_size;
  const char* backend;      /* the backend serving ("auto" resolved), e.g. "cpu" */
  const char* variant;      /* its kernel variant, e.g. "avx512-bf16" */
  const char* precision;    /* "fp64", "fp32", "fp16", "bf16", "int8" */
  const char* mode;         /* "window", "streaming", "batch" */
  int window;               /* W in window mode, 1 otherwise */
  int input_size;           /* I: floats per tick input */
  int output_size;          /* O: floats per tick output */
  const char* choice_note;  /* why "auto" chose this backend; "" when the backend was named */
  /* The first layout ended here: a program built against it passes a struct_size that stops here. */
  const char* scaler;       /* the input scaling in force (the default resolved): "none", "model",
                               "rolling:N" */
  int64_t warm_ticks;       /* synthetic ticks of the warm-up on open; 0: not warmed (no_warm) */
  double warm_seconds;      /* what the warm-up took, its reset included */
} hotpath_engine_info;

HOTPATH_API hotpath_status hotpath_engine_get_info(const hotpath_engine* engine, hotpath_engine_info* info);

/* One tick: x[input_len] (input_len = I) -> out[output_len] (output_len = O). A tick holding NaN/Inf is
 * HOTPATH_ERROR_TICK and leaves the state as it was. */
HOTPATH_API hotpath_status hotpath_engine_step(hotpath_engine* engine, const float* x, size_t input_len,
                                               float* out, size_t output_len);

/* A series [ticks, I] row-major (series_len = ticks * I) -> out [ticks, O] (output_len = ticks * O),
 * continuing from the current state. A bad tick stops the run with HOTPATH_ERROR_TICK: the ticks before
 * it were consumed and their outputs written; the state is that after them. */
HOTPATH_API hotpath_status hotpath_engine_run(hotpath_engine* engine, const float* series, size_t ticks,
                                              size_t series_len, float* out, size_t output_len);

/* The same with float64 outputs: exact for the float64 reference backend ("ref"), the float answers
 * widened otherwise. */
HOTPATH_API hotpath_status hotpath_engine_run_f64(hotpath_engine* engine, const float* series, size_t ticks,
                                                  size_t series_len, double* out, size_t output_len);

/* Fresh windows: x [batch, window, I] (input_len = batch * window * I) -> out [batch, O] (output_len =
 * batch * O), each window from zero state; the state of step/run is untouched. */
HOTPATH_API hotpath_status hotpath_engine_run_batch(hotpath_engine* engine, const float* x, size_t batch,
                                                    size_t window, size_t input_len, float* out,
                                                    size_t output_len);

/* Where a call's arrays are: the flags of hotpath_engine_backtest and hotpath_engine_run_batch_ex.
 * HOTPATH_ARRAYS_ON_DEVICE: x and out are memory of the engine's GPU (the cuda backend; float32), copied
 * on the device into the throughput kernels and out of them, never through the host. x must be ready when
 * the call starts (the work that wrote it finished, or queued on the legacy default stream); out is
 * complete when the call returns. A pointer that is not memory of that GPU, an allocation shorter than
 * the lengths given, or arrays that overlap are HOTPATH_ERROR_INVALID_ARGUMENT; another backend is
 * HOTPATH_ERROR_UNSUPPORTED. */
#define HOTPATH_ARRAYS_IN_HOST 0u
#define HOTPATH_ARRAYS_ON_DEVICE 1u

/* Backtest: num_series recorded series [num_series, ticks, I] row-major (input_len = num_series * ticks
 * * I) -> every tick's output [num_series, ticks, O] (output_len = num_series * ticks * O), each series
 * from zero state by the engine's mode (docs/model.md, "Backtests"), on the throughput path. Every input
 * is checked first: a NaN/Inf is HOTPATH_ERROR_TICK naming series, tick and input, nothing computed.
 * Leaves the engine reset. flags: HOTPATH_ARRAYS_IN_HOST or HOTPATH_ARRAYS_ON_DEVICE. */
HOTPATH_API hotpath_status hotpath_engine_backtest(hotpath_engine* engine, const float* series, size_t num_series,
                                                   size_t ticks, size_t input_len, float* out, size_t output_len,
                                                   unsigned flags);

/* hotpath_engine_run_batch with the flags above (HOTPATH_ARRAYS_ON_DEVICE: fresh windows in GPU memory;
 * the engine opened in mode "batch"). */
HOTPATH_API hotpath_status hotpath_engine_run_batch_ex(hotpath_engine* engine, const float* x, size_t batch,
                                                       size_t window, size_t input_len, float* out,
                                                       size_t output_len, unsigned flags);

/* Forgets all state: the next tick is t = 0. */
HOTPATH_API hotpath_status hotpath_engine_reset(hotpath_engine* engine);

/* Ticks consumed since the engine was opened or last reset. */
HOTPATH_API hotpath_status hotpath_engine_ticks(const hotpath_engine* engine, int64_t* ticks);

/* Counters (e.g. "fallback_answers"): hotpath_engine_counters takes a snapshot and says how many it
 * holds; hotpath_engine_counter reads entry index (0 <= index < count) of the latest snapshot. Names are
 * valid until the next snapshot or close. */
HOTPATH_API hotpath_status hotpath_engine_counters(hotpath_engine* engine, size_t* count);
HOTPATH_API hotpath_status hotpath_engine_counter(const hotpath_engine* engine, size_t index, const char** name,
                                                  double* value);

/* Facts for reports (e.g. "gpu_name"), the same way: a snapshot, then name/value strings by index. */
HOTPATH_API hotpath_status hotpath_engine_facts(hotpath_engine* engine, size_t* count);
HOTPATH_API hotpath_status hotpath_engine_fact(const hotpath_engine* engine, size_t index, const char** name,
                                               const char** value);

/* ---- tick telemetry (docs/production.md, "Telemetry") ----------------------------------------- */

/* The latency histogram's buckets: 4 per power of two, from (0, 128 ns] to 2^34 ns (17.2 s), then +Inf. */
#define HOTPATH_METRICS_BUCKETS 110

/* What an engine opened with options->metrics has recorded since it was opened. Set struct_size =
 * sizeof(hotpath_metrics_snapshot) before the call: only the fields within struct_size are written (a
 * larger struct, from a later header, gets the fields this library knows). */
typedef struct hotpath_metrics_snapshot {
  size_t struct_size;
  /* Answered ticks of hotpath_engine_step and _run (not backtests, not run_batch), each timed from entry
     into the backend's step to its answer. */
  uint64_t count;
  uint64_t sum_ns;            /* their latencies added, ns (each capped at 2^34 ns) */
  double p50_ns;              /* quantiles of the histogram, ns, as PromQL's histogram_quantile computes */
  double p99_ns;              /* them from the same buckets; NaN before the first tick */
  double p999_ns;
  uint64_t answered;          /* ticks answered */
  uint64_t late;              /* ticks answered past a deadline: 0 here (an engine knows no deadline; the
                                 hotpath bench counts them) */
  uint64_t lost;              /* ticks the backend consumed and failed to answer (HOTPATH_ERROR_BACKEND) */
  uint64_t fallback;          /* ticks answered by the CPU fallback (options->fallback "cpu") */
  uint64_t gpu_timeouts;      /* GPU answers or precomputes past timeout_us */
  uint64_t lease_renewals;    /* renewals of the GPU kernel's lease (its heartbeat) */
  uint64_t swaps;             /* hotpath_engine_swap()s that took over */
  int64_t precompute_backlog; /* ticks whose precompute is not done: no backend reports one yet (0) */
  /* The backend's counts (fallback, gpu_timeouts, lease_renewals) are folded in every 1024 ticks and at
     hotpath_engine_reset: they may trail by up to 1023 ticks. */
  const char* model_id;       /* the serving model's id (hotpath_model_id); valid while the engine is open */
  const char* backend;        /* e.g. "cuda"; valid while the engine is open */
  const char* variant;        /* its kernel variant; valid while the engine is open */
  double bucket_upper_ns[HOTPATH_METRICS_BUCKETS]; /* bucket i's upper bound, ns; the last one +Inf */
  uint64_t cumulative[HOTPATH_METRICS_BUCKETS];    /* ticks with latency <= bucket_upper_ns[i]; the last
                                                      is count */
} hotpath_metrics_snapshot;

/* Reads the engine's telemetry into *snapshot. Any thread, any time while the engine is open, also
 * while another thread ticks it: each field is exact when read, the fields read a few nanoseconds
 * apart (count always equals the last cumulative bucket). HOTPATH_ERROR_INVALID_ARGUMENT when the
 * engine was opened without options->metrics. */
HOTPATH_API hotpath_status hotpath_engine_metrics(const hotpath_engine* engine, hotpath_metrics_snapshot* snapshot);

/* ---- live model swap (docs/production.md, "Swapping a model while it serves") -------------------- */

/* A model's id: 16 hex digits (and a NUL) of a hash of its content as loaded (config, weights, scaler),
 * the same whatever the file is called. */
HOTPATH_API hotpath_status hotpath_model_id(const hotpath_model* model, char id[17]);

typedef struct hotpath_swap_options {
  size_t struct_size;     /* sizeof(hotpath_swap_options) */
  const char* precision;  /* the new model's; NULL or "": the engine's precision option, else the
                             backend's default for the new model */
  int64_t warm_ticks;     /* streaming: the new model's state is its state after the last K inputs
                             from zero (0: zero state), K at most 4096; window mode: 0 (its windows
                             are rebuilt exactly from the last W-1 inputs) */
} hotpath_swap_options;
#define HOTPATH_SWAP_OPTIONS_INIT { sizeof(hotpath_swap_options), NULL, 0 }

/* Makes model ready to answer in place of the serving one, and returns once it is: its backend made with
 * the engine's options and warmed, its state rebuilt from the engine's record of its last inputs, while
 * the old model keeps answering. The switch is at a tick boundary: the old model answers the next tick,
 * and the new one every tick after it (window mode: bit-identical to an engine that served the new model
 * from the start). The one call that may run on another thread while one thread ticks (it blocks the
 * calling thread only). Refused with the old model still serving (HOTPATH_ERROR_INVALID_ARGUMENT or
 * _UNSUPPORTED, hotpath_last_error on the calling thread says why): another input or output size, weights
 * that are not finite, a model the backend cannot serve, another cuda kernel family. options may be NULL.
 * The engine keeps its own copy of model. */
HOTPATH_API hotpath_status hotpath_engine_swap(hotpath_engine* engine, const hotpath_model* model,
                                               const hotpath_swap_options* options);

typedef struct hotpath_swap_state {
  const char* answering_model_id; /* the model that answered the last tick (before any tick, the serving
                                     one): valid while the engine is open */
  int64_t swaps;                  /* swaps that took over */
  int pending;                    /* 1: a swap is made ready and waits for its tick */
} hotpath_swap_state;
/* On the ticking thread (or between ticks), like hotpath_engine_step. */
HOTPATH_API hotpath_status hotpath_engine_swap_state(const hotpath_engine* engine, hotpath_swap_state* state);

/* Stops and frees the engine (its GPU kernel and threads included). NULL: nothing. An instance's
 * engine (hotpath_instances_engine) belongs to its set: closing it does nothing. */
HOTPATH_API void hotpath_engine_close(hotpath_engine* engine);

/* ---- many instances on one GPU --------------------------------------------------------------- */

/* N independent instances of one model on one GPU (cuda backend), each with its own inputs, windows,
 * state and outputs, each on SMs of its own: green contexts (an SM partition and a kernel each) or one
 * persistent launch serving all (docs/cuda.md, "Many instances on one GPU"). Each instance is an
 * ordinary engine: drive each from a thread of its own. */
typedef struct hotpath_instances hotpath_instances;

/* Start from HOTPATH_INSTANCES_OPTIONS_INIT; a zero or NULL field means the default. */
typedef struct hotpath_instances_options {
  size_t struct_size;    /* sizeof(hotpath_instances_options) */
  size_t count;          /* instances, at least 1 */
  const char* isolation; /* "green" (NULL) or "shared" */
  int sms_each;          /* SMs per instance; 0: the largest equal share */
  const char* placement; /* shared: "sm" (NULL: neighbouring SMs) or "block" */
} hotpath_instances_options;

#define HOTPATH_INSTANCES_OPTIONS_INIT \
  { sizeof(hotpath_instances_options), 0, NULL, 0, NULL }

/* Opens `instances->count` engines of `model` with `options` (backend "cuda" or "auto", which must find
 * the GPU; no fallback), each warmed. HOTPATH_ERROR_UNSUPPORTED when the GPU cannot hold them (the
 * message names what fits), HOTPATH_ERROR_INVALID_ARGUMENT for bad options. */
HOTPATH_API hotpath_status hotpath_instances_open(const hotpath_model* model, const hotpath_engine_options* options,
                                                  const hotpath_instances_options* instances,
                                                  hotpath_instances** out);
HOTPATH_API hotpath_status hotpath_instances_count(const hotpath_instances* set, size_t* count);
/* Instance k's engine, for every hotpath_engine_* call; owned by the set: valid until
 * hotpath_instances_restart(set, k) or hotpath_instances_close. */
HOTPATH_API hotpath_status hotpath_instances_engine(hotpath_instances* set, size_t k, hotpath_engine** engine);
/* Closes instance k and opens it again on its SMs, warmed, while the others keep serving (no other
 * call on instance k meanwhile). Its old engine handle is gone; ask hotpath_instances_engine again
 * (HOTPATH_ERROR_BACKEND there while a failed restart left it without one). */
HOTPATH_API hotpath_status hotpath_instances_restart(hotpath_instances* set, size_t k);
/* Stops and frees every instance. NULL: nothing. */
HOTPATH_API void hotpath_instances_close(hotpath_instances* set);

#ifdef __cplusplus
}
#endif

#endif /* HOTPATH_HOTPATH_H */
