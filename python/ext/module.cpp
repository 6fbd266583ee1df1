// hotpath._hotpath: the engine layer (src/engine/engine.hpp) for Python, through nanobind. The package
// hotpath (python/hotpath/) re-exports it; docs/python.md is the user's guide, _hotpath.pyi the types.
//
// The rules here: numpy arrays in and out without copies where the layout allows (a float32
// C-contiguous input is read in place; anything else is converted once by numpy), one output array
// allocated per call (or the caller's `out=`), the GIL released while the engine works, and every
// hotpath error raised as hotpath.Error / TickError / UnsupportedError with the CLI's one-line message.
// No C++ exception crosses into Python untranslated (nanobind maps the rest to RuntimeError/MemoryError).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gpu.hpp"
#include "engine/instances.hpp"
#include "model/loader.hpp"
#include "model/narrowing.hpp"
#include "model/safetensors.hpp"
#include "model/zoo.hpp"
#include "telemetry/tick_metrics.hpp"
#include "util/error.hpp"
#include "util/warn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The exception classes (module attributes Error, TickError, UnsupportedError), made at import.
PyObject* g_error = nullptr;
PyObject* g_tick_error = nullptr;
PyObject* g_unsupported_error = nullptr;
PyObject* g_backend_error = nullptr;

// Arrays go through numpy's C API, not a generic array protocol: on the tick path a numpy array is
// checked and read in a few nanoseconds, and an output array costs one PyArray_SimpleNew.

// A tick or series input: float32, C-contiguous, aligned, native byte order, read in place. Anything
// else (another dtype, a strided view, a list, a CPU torch tensor) is converted once into `holder` by
// numpy, through float64 (as_input).
struct Input {
  nb::object holder;  // a converted copy, when one was needed
  PyArrayObject* array = nullptr;
  int ndim() const { return PyArray_NDIM(array); }
  size_t shape(int d) const { return size_t(PyArray_DIM(array, d)); }
  const float* data() const { return static_cast<const float*>(PyArray_DATA(array)); }
  std::string shape_text() const {
    std::string s = "(";
    for (int d = 0; d < ndim(); ++d) s += (d ? ", " : "") + std::to_string(shape(d));
    return s + (ndim() == 1 ? ",)" : ")");
  }
};

bool is_float32_carray(PyObject* o, bool writable) {
  if (!PyArray_Check(o)) return false;
  auto* a = reinterpret_cast<PyArrayObject*>(o);
  return PyArray_TYPE(a) == NPY_FLOAT32 && PyArray_ISNOTSWAPPED(a) &&
         (writable ? PyArray_ISCARRAY(a) : PyArray_ISCARRAY_RO(a));
}

// `x` as the float32 C array the engine reads; `what` names it in messages. A float32 C array is used in
// place; anything else is converted once. A finite value past float32's range would arrive as an Inf
// that the engine then calls "Inf": it is refused naming its element instead (the rule of the CLI's
// readers, model/narrowing.hpp), before numpy's cast could overflow (and warn).
Input as_input(nb::handle x, const char* what) {
  if (x.is_none()) throw nb::type_error((std::string(what) + " is None, expected an array of numbers").c_str());
  Input in;
  if (is_float32_carray(x.ptr(), false)) {
    in.array = reinterpret_cast<PyArrayObject*>(x.ptr());
    return in;
  }
  nb::object source = nb::borrow(x);
  const int type = PyArray_Check(x.ptr()) ? PyArray_TYPE(reinterpret_cast<PyArrayObject*>(x.ptr())) : -1;
  // Float32, float16, integers and bools cannot overflow float32; anything else (float64, lists of Python
  // floats, ...) is checked in float64, a C-order float64 array in place.
  if (type != NPY_FLOAT32 && type != NPY_FLOAT16 && !PyTypeNum_ISINTEGER(type) && !PyTypeNum_ISBOOL(type)) {
    PyObject* wide = PyArray_FromAny(x.ptr(), PyArray_DescrFromType(NPY_FLOAT64), 0, 0,
                                     NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST, nullptr);
    if (!wide) throw nb::python_error();
    source = nb::steal(wide);
    auto* w = reinterpret_cast<PyArrayObject*>(wide);
    const auto* v = static_cast<const double*>(PyArray_DATA(w));
    for (npy_intp k = 0, n = PyArray_SIZE(w); k < n; ++k)
      if (std::isfinite(v[k]) && std::isinf(static_cast<float>(v[k]))) {
        const std::vector<int64_t> shape(PyArray_DIMS(w), PyArray_DIMS(w) + PyArray_NDIM(w));
        float unused = 0;
        hotpath::narrow_f64_to_f32(reinterpret_cast<const uint8_t*>(v + k), 1, &unused, uint64_t(k), shape, what);
      }
  }
  PyObject* converted = PyArray_FromAny(source.ptr(), PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
                                        NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST, nullptr);
  if (!converted) throw nb::python_error();
  in.holder = nb::steal(converted);
  in.array = reinterpret_cast<PyArrayObject*>(converted);
  return in;
}

// A keyword argument no parameter of `fn` takes is named (with the parameter it is closest to, when one
// is near), instead of nanobind's dump of every signature: the package's one message for it
// (hotpath._keywords.unknown_keyword, which its Python functions raise too).
void refuse_unknown_keywords(const char* fn, const nb::kwargs& extra, std::initializer_list<const char*> params) {
  for (auto [key, value] : extra) {
    nb::list names;
    for (const char* p : params) names.append(p);
    const nb::object error = nb::module_::import_("hotpath._keywords").attr("unknown_keyword")(fn, nb::str(key), names);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    throw nb::python_error();
  }
}

// A new float32 array of `shape` and its data.
std::pair<nb::object, float*> new_array(std::initializer_list<npy_intp> shape) {
  PyObject* a = PyArray_SimpleNew(int(shape.size()), const_cast<npy_intp*>(shape.begin()), NPY_FLOAT32);
  if (!a) throw nb::python_error();
  return {nb::steal(a), static_cast<float*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(a)))};
}

// One engine's call guard: `busy` keeps a second thread out while one is inside the engine with the
// GIL released (an Engine is one thread at a time); `live` turns false when a set of instances
// restarts or closes the instance. Every handle of one engine shares it.
struct CallGuard {
  std::atomic<bool> busy{false};
  std::atomic<bool> live{true};
};

constexpr const char* kRestarted =
    "this instance was restarted or its set closed (hotpath.Instances): take instances[k] again";

// The engine behind a hotpath.Engine. `engine` is null once closed. An instance's engine
// (hotpath.Instances) is its set's: `engine` then shares the set's ownership, and `guard` is the
// instance's, shared by every handle of it.
struct PyEngine {
  std::shared_ptr<hotpath::Engine> engine;
  std::shared_ptr<CallGuard> guard = std::make_shared<CallGuard>();
  size_t I = 0, O = 0;
  nb::object model;  // the hotpath.Model served first
  std::map<std::string, nb::object> swapped_in;  // by model id: every model swap() was given (engine.model)
};

// Holds the engine for one call: refuses a closed engine, a restarted instance and a concurrent call,
// by name.
class Use {
 public:
  explicit Use(PyEngine& e) : e_(e) {
    if (!e.engine) throw hotpath::Error("this engine is closed (close() or the end of its with block); make a new Engine");
    if (!e.guard->live.load(std::memory_order_acquire)) throw hotpath::Error(kRestarted);
    if (e.guard->busy.exchange(true, std::memory_order_acquire)) {
      if (!e.guard->live.load(std::memory_order_acquire)) throw hotpath::Error(kRestarted);
      throw hotpath::Error("this engine is in use by another thread: an Engine runs one call at a time "
                           "(make one Engine per thread)");
    }
  }
  ~Use() { e_.guard->busy.store(false, std::memory_order_release); }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  hotpath::Engine& engine() { return *e_.engine; }

 private:
  PyEngine& e_;
};

// For what never changes after construction (names, sizes): no need to keep other threads out.
const hotpath::Engine& open_engine(const PyEngine& e) {
  if (!e.engine) throw hotpath::Error("this engine is closed (close() or the end of its with block); make a new Engine");
  if (!e.guard->live.load(std::memory_order_acquire)) throw hotpath::Error(kRestarted);
  return *e.engine;
}

// The set behind a hotpath.Instances, shared with every instance's Engine handle (a handle keeps the
// set's engines alive; no Python reference cycle). guards[k] is instance k's call guard: its `live`
// turns false when instance k is restarted or the set closed, and handles taken before then refuse
// every call. `mutex` orders a restart against taking handles (both change or read the set's engines).
struct InstanceSetHolder {
  std::unique_ptr<hotpath::engine::InstanceSet> set;
  std::vector<std::shared_ptr<CallGuard>> guards;
  std::mutex mutex;
};
struct PyInstances {
  std::shared_ptr<InstanceSetHolder> holder;
  nb::object model;
};

// Instance k of an open set (negative k counts from the end where `negative` allows it).
size_t instance_index(const PyInstances& self, long long k, bool negative) {
  if (!self.holder) throw hotpath::Error("this set of instances is closed");
  const long long n = (long long)self.holder->set->size();
  if (k < (negative ? -n : 0) || k >= n)
    throw nb::index_error(("instance " + std::to_string(k) + " of a set of " + std::to_string(n)).c_str());
  return size_t(k < 0 ? k + n : k);
}

// `with x:` for a class with close().
template <class Class>
Class with_context(Class cls) {
  cls.def("__enter__", [](nb::handle self) { return nb::borrow(self); }).def("__exit__", [](nb::handle self, nb::args) {
    self.attr("close")();
    return false;
  });
  return cls;
}

void check_window(std::optional<int> window) {
  if (window && (*window < 1 || *window > hotpath::kMaxWindow))
    throw hotpath::Error("window " + std::to_string(*window) + " is outside 1.." + std::to_string(hotpath::kMaxWindow));
}

hotpath::Model with_window(hotpath::Model m, std::optional<int> window) {
  if (window) m.config.window = *window;
  return m;
}

hotpath::LoadOptions load_options(const std::optional<std::string>& lstm_prefix,
                                  const std::optional<std::string>& head_prefix,
                                  std::optional<std::vector<std::string>> ignore) {
  hotpath::LoadOptions o;
  o.lstm_prefix = lstm_prefix.value_or("");
  o.head_prefix = head_prefix.value_or("");
  o.ignore = std::move(ignore).value_or(std::vector<std::string>{});
  return o;
}

std::vector<int> cpuset_from(nb::handle cpuset) {
  if (cpuset.is_none()) return {};
  if (nb::isinstance<nb::str>(cpuset)) return hotpath::parse_cpuset(nb::cast<std::string>(cpuset));
  std::vector<int> cores;
  if (!nb::try_cast(cpuset, cores, /*convert=*/false))
    throw hotpath::Error("cpuset must be a string like \"2-5\" or a list of core numbers");
  for (int c : cores)
    if (c < 0) throw hotpath::Error("cpuset: core " + std::to_string(c) + " is not a core number");
  return cores;
}

// x [I] -> z [O] into `out`, GIL released.
void step_into(Use& use, const Input& x, float* out, size_t O) {
  if (x.ndim() != 1)
    throw hotpath::TickError("step takes one tick x of shape (" + std::to_string(use.engine().input_size()) +
                             ",), got an array of shape " + x.shape_text());
  nb::gil_scoped_release unlocked;
  use.engine().step({x.data(), x.shape(0)}, {out, O});
}

nb::object step(PyEngine& self, nb::handle x_in, nb::handle out) {
  if (x_in.is_none())
    throw nb::type_error(("step: x is None; pass one tick, an array of " + std::to_string(self.I) + " numbers").c_str());
  Input x;
  try {
    x = as_input(x_in, "x");
  } catch (const hotpath::TickError&) {
    throw;
  } catch (const hotpath::Error& e) {
    throw hotpath::TickError(std::string("step: ") + e.what());  // a bad tick, as NaN is
  }
  Use use(self);
  if (out.is_none()) {
    auto [z, data] = new_array({npy_intp(self.O)});
    step_into(use, x, data, self.O);
    return std::move(z);
  }
  auto* o = reinterpret_cast<PyArrayObject*>(out.ptr());
  if (!is_float32_carray(out.ptr(), true) || PyArray_NDIM(o) != 1 || size_t(PyArray_DIM(o, 0)) != self.O)
    throw hotpath::Error("out must be a writable float32 C-contiguous array of shape (" + std::to_string(self.O) + ",)");
  step_into(use, x, static_cast<float*>(PyArray_DATA(o)), self.O);
  return nb::borrow(out);
}

// NPY_FLOAT32 or NPY_FLOAT64 from a dtype-like (None: float32); `method` names the caller in the message.
int output_type(nb::handle dtype, const char* method) {
  if (dtype.is_none()) return NPY_FLOAT32;
  PyArray_Descr* d = nullptr;
  if (!PyArray_DescrConverter(dtype.ptr(), &d)) throw nb::python_error();
  const int type = d->type_num;
  Py_DECREF(d);
  if (type != NPY_FLOAT32 && type != NPY_FLOAT64)
    throw hotpath::Error(std::string(method) + ": dtype must be float32 or float64, got " +
                         std::string(nb::str(dtype).c_str()));
  return type;
}

// The series argument of run and backtest, [T, I] or [S, T, I], and the array their outputs go to,
// [T, O] or [S, T, O] of `type`; `method` names the caller in the message for any other shape.
struct SeriesCall {
  size_t S = 1, T = 0;
  bool many = false;
  nb::object out;
  void* data = nullptr;
};
SeriesCall series_call(const Input& series, size_t I, size_t O, int type, const char* method) {
  if ((series.ndim() != 2 && series.ndim() != 3) || series.shape(series.ndim() - 1) != I)
    throw hotpath::Error(std::string(method) + " takes a series of shape (T, " + std::to_string(I) +
                         ") or series of shape (S, T, " + std::to_string(I) + "), got an array of shape " +
                         series.shape_text());
  SeriesCall c;
  c.many = series.ndim() == 3;
  c.S = c.many ? series.shape(0) : 1;
  c.T = series.shape(c.many ? 1 : 0);
  npy_intp dims[3] = {npy_intp(c.S), npy_intp(c.T), npy_intp(O)};
  PyObject* array = PyArray_SimpleNew(c.many ? 3 : 2, c.many ? dims : dims + 1, type);
  if (!array) throw nb::python_error();
  c.out = nb::steal(array);
  c.data = PyArray_DATA(reinterpret_cast<PyArrayObject*>(array));
  return c;
}

// --- long calls: Ctrl-C and a progress display ---------------------------------------------------------
// A long call hands control back to Python about every 50 ms: with the GIL taken it runs the pending
// signal handlers (PyErr_CheckSignals, so Ctrl-C raises KeyboardInterrupt there; the engine is stopped
// and reset before it propagates) and updates the progress display, a hotpath._progress.Reporter.
constexpr auto kPollEvery = std::chrono::milliseconds(50);

class Watch {
 public:
  // progress: None (a bar once the call has run a while, on a terminal), True (from the start), False.
  Watch(nb::handle progress, size_t total, const char* unit, const char* desc)
      : total_(total), unit_(unit), desc_(desc), start_(std::chrono::steady_clock::now()) {
    if (!progress.is_none() && !nb::isinstance<nb::bool_>(progress))
      throw hotpath::Error(std::string(desc) + ": progress must be True, False or None, got " +
                           std::string(nb::str(nb::repr(progress)).c_str()));
    off_ = !progress.is_none() && !nb::cast<bool>(progress);
    if (!progress.is_none() && !off_) open(true);
  }
  // A call that ends in an error (Ctrl-C) still closes its bar, so that the traceback starts on a line
  // of its own. Destroyed with the GIL held, as everything here.
  ~Watch() {
    if (!reporter_.is_valid()) return;
    try {
      reporter_.attr("close")(done_);
    } catch (...) {  // the call's own error is the one to see
    }
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  // With the GIL held. Throws nb::python_error when a signal handler raised (KeyboardInterrupt).
  void poll(size_t done) {
    done_ = done;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    // progress=None: no Python object at all for a call shorter than a poll (most of them).
    if (!reporter_.is_valid() && !off_ && std::chrono::steady_clock::now() - start_ >= kPollEvery) open(false);
    if (reporter_.is_valid()) reporter_.attr("update")(done);
  }
  void finish(size_t done) {
    if (!reporter_.is_valid()) return;
    nb::object reporter = std::move(reporter_);
    reporter.attr("close")(done);
  }

 private:
  void open(bool force) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    reporter_ = nb::module_::import_("hotpath._progress").attr("Reporter")(total_, unit_, desc_, force, elapsed);
  }
  size_t total_;
  const char* unit_;
  const char* desc_;
  std::chrono::steady_clock::time_point start_;
  bool off_ = false;
  size_t done_ = 0;
  nb::object reporter_;  // none: no display (yet), or closed
};

// Runs work() on a thread of its own while this thread (GIL held on entry) polls `watch` every 50 ms;
// work() must return soon after `stop` is set. However this ends (an error in work, KeyboardInterrupt
// here), the thread has been joined before this returns or throws.
template <class Work>
void run_watched(Work&& work, std::atomic<bool>& stop, const std::atomic<size_t>& done, Watch& watch) {
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mutex);
    finished = true;
    cv.notify_one();
  });
  struct Joiner {
    std::thread& thread;
    std::atomic<bool>& stop;
    ~Joiner() {
      if (!thread.joinable()) return;
      stop.store(true, std::memory_order_relaxed);
      nb::gil_scoped_release unlocked;
      thread.join();
    }
  } joiner{worker, stop};
  for (;;) {
    bool over;
    {
      nb::gil_scoped_release unlocked;
      std::unique_lock lock(mutex);
      over = cv.wait_for(lock, kPollEvery, [&] { return finished; });
    }
    if (over) break;
    watch.poll(done.load(std::memory_order_relaxed));
  }
  {
    nb::gil_scoped_release unlocked;
    worker.join();
  }
  if (error) std::rethrow_exception(error);
  watch.finish(done.load(std::memory_order_relaxed));
}

nb::object run(PyEngine& self, nb::handle series_in, nb::handle dtype, nb::handle progress, const nb::kwargs& extra) {
  refuse_unknown_keywords("run", extra, {"series", "dtype", "progress"});
  const Input series = as_input(series_in, "run: series");
  const int type = output_type(dtype, "run");
  Use use(self);
  hotpath::Engine& e = use.engine();
  const size_t I = self.I, O = self.O;
  const SeriesCall c = series_call(series, I, O, type, "run");
  const size_t S = c.S, T = c.T;
  Watch watch(progress, S * T, "ticks", "run");
  // Ticks go in chunks sized to take 20-80 ms each, between which Python gets control (Engine::run
  // continues from the state, so the outputs are those of one call).
  size_t chunk = 256, done = 0;
  try {
    for (size_t s = 0; s < S; ++s) {
      {
        nb::gil_scoped_release unlocked;
        e.reset();  // each series from a fresh state; the engine keeps the state after the last tick run
      }
      for (size_t t = 0; t < T;) {
        const size_t n = std::min(chunk, T - t);
        const auto t0 = std::chrono::steady_clock::now();
        {
          nb::gil_scoped_release unlocked;
          const std::span<const float> in(series.data() + (s * T + t) * I, n * I);
          try {
            if (type == NPY_FLOAT64) e.run(in, n, std::span<double>(static_cast<double*>(c.data) + (s * T + t) * O, n * O));
            else e.run(in, n, std::span<float>(static_cast<float*>(c.data) + (s * T + t) * O, n * O));
          } catch (const hotpath::TickError& err) {
            if (!c.many) throw;
            throw hotpath::TickError("series " + std::to_string(s) + ": " + err.what());
          }
        }
        t += n;
        done += n;
        const auto took = std::chrono::steady_clock::now() - t0;
        if (took < std::chrono::milliseconds(20)) chunk *= 2;
        else if (took > std::chrono::milliseconds(80) && chunk > 1) chunk /= 2;
        watch.poll(done);
      }
    }
  } catch (const nb::python_error&) {
    nb::gil_scoped_release unlocked;  // interrupted: the engine starts over
    e.reset();
    throw;
  }
  watch.finish(done);
  return c.out;
}

// --- arrays in GPU memory (docs/python.md, "Arrays on the GPU") ----------------------------------------
// An array that describes itself by __cuda_array_interface__ (versions 2 and 3: torch, CuPy, JAX, Numba):
// its shape and data pointer, taken as they are. Only float32 C-contiguous arrays are: converting another
// would be a copy on the device that the array's own library does better (x.float().contiguous()). The
// stream its producer works on (version 3) is waited for before the engine reads or writes it.
struct DeviceArray {
  nb::object obj;
  std::vector<size_t> shape;
  std::uintptr_t data = 0;
  std::string shape_text() const {
    std::string s = "(";
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + (shape.size() == 1 ? ",)" : ")");
  }
};

bool is_device_array(nb::handle x) { return !x.is_none() && nb::hasattr(x, "__cuda_array_interface__"); }

DeviceArray as_device_array(nb::handle x, const std::string& what, bool writable) {
  const nb::object cai_obj = x.attr("__cuda_array_interface__");
  if (!nb::isinstance<nb::dict>(cai_obj)) throw hotpath::Error(what + ": its __cuda_array_interface__ is not a dict");
  const nb::dict cai = nb::borrow<nb::dict>(cai_obj);
  auto get = [&](const char* key) { return cai.contains(key) ? nb::object(cai[key]) : nb::none(); };
  DeviceArray a;
  a.obj = nb::borrow(x);
  const std::string type = get("typestr").is_none() ? "" : std::string(nb::str(get("typestr")).c_str());
  for (nb::handle d : nb::cast<nb::tuple>(get("shape"))) a.shape.push_back(nb::cast<size_t>(d));
  if (type != "<f4" && type != "=f4")
    throw hotpath::Error(what + ": a CUDA array must be float32 (typestr '<f4'), got '" + type +
                         "'; convert it on the device first (torch: x.float(), CuPy: x.astype('float32'))");
  const nb::tuple data = nb::cast<nb::tuple>(get("data"));
  a.data = nb::cast<std::uintptr_t>(data[0]);
  if (writable && nb::cast<bool>(data[1])) throw hotpath::Error(what + ": the CUDA array is read-only");
  if (!get("mask").is_none()) throw hotpath::Error(what + ": a masked CUDA array is not taken");
  if (const nb::object strides = get("strides"); !strides.is_none()) {
    const nb::tuple st = nb::cast<nb::tuple>(strides);
    size_t expect = sizeof(float);
    for (size_t d = a.shape.size(); d-- > 0;) {
      if (a.shape[d] > 1 && nb::cast<long long>(st[d]) != (long long)expect)
        throw hotpath::Error(what + ": the CUDA array of shape " + a.shape_text() +
                             " is not C-contiguous; pass a contiguous one (torch: x.contiguous(), CuPy: "
                             "cupy.ascontiguousarray(x))");
      expect *= a.shape[d];
    }
  }
  // version 3: the producer's stream (None: nothing to wait for; 0 is not allowed)
  if (const nb::object stream = get("stream"); !stream.is_none()) {
    const auto handle = nb::cast<std::uintptr_t>(stream);
    if (handle != 0) {
      nb::gil_scoped_release unlocked;
      hotpath::gpu::synchronize_stream(handle);
    }
  }
  return a;
}

// The output of a call on device arrays: the caller's `out` (a writable float32 C-contiguous CUDA array
// of `shape`), else a new one from the input's own library (torch, CuPy) on the input's device.
DeviceArray device_output(const DeviceArray& like, const std::vector<size_t>& shape, nb::handle out, const char* method) {
  nb::object made;
  if (out.is_none()) {
    const std::string module = nb::cast<std::string>(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(like.obj.ptr()))).attr("__module__"));
    nb::list dims;
    for (size_t d : shape) dims.append(d);
    const nb::tuple shp = nb::tuple(dims);
    if (module.rfind("torch", 0) == 0) {
      const nb::object torch = nb::module_::import_("torch");
      made = torch.attr("empty")(shp, "dtype"_a = torch.attr("float32"), "device"_a = like.obj.attr("device"));
    } else if (module.rfind("cupy", 0) == 0) {
      const nb::object cupy = nb::module_::import_("cupy"), device = like.obj.attr("device");
      device.attr("__enter__")();
      try {
        made = cupy.attr("empty")(shp, "dtype"_a = cupy.attr("float32"));
      } catch (...) {
        device.attr("__exit__")(nb::none(), nb::none(), nb::none());
        throw;
      }
      device.attr("__exit__")(nb::none(), nb::none(), nb::none());
    } else {
      std::string shape_text = "(";
      for (size_t d = 0; d < shape.size(); ++d) shape_text += (d ? ", " : "") + std::to_string(shape[d]);
      throw hotpath::Error(std::string(method) + ": the outputs for a CUDA array of " + module +
                           " need out= (a writable float32 CUDA array of shape " + shape_text +
                           ")); hotpath makes torch and CuPy outputs itself");
    }
    out = made;
  }
  DeviceArray o = as_device_array(out, std::string(method) + ": out", true);
  if (o.shape != shape) {
    DeviceArray want;
    want.shape = shape;
    throw hotpath::Error(std::string(method) + ": out has shape " + o.shape_text() + ", the outputs need " +
                         want.shape_text());
  }
  return o;
}

nb::object backtest_on_device(PyEngine& self, nb::handle series_in, nb::handle dtype, nb::handle progress, nb::handle out) {
  if (!dtype.is_none() && output_type(dtype, "backtest") != NPY_FLOAT32)
    throw hotpath::Error("backtest: outputs in GPU memory are float32 (dtype=float64 is for host arrays)");
  const DeviceArray x = as_device_array(series_in, "backtest: series", false);
  const size_t I = self.I, O = self.O, nd = x.shape.size();
  if ((nd != 2 && nd != 3) || x.shape[nd - 1] != I)
    throw hotpath::Error("backtest takes a series of shape (T, " + std::to_string(I) + ") or series of shape (S, T, " +
                         std::to_string(I) + "), got a CUDA array of shape " + x.shape_text());
  const size_t S = nd == 3 ? x.shape[0] : 1, T = x.shape[nd - 2];
  const std::vector<size_t> shape = nd == 3 ? std::vector<size_t>{S, T, O} : std::vector<size_t>{T, O};
  const DeviceArray z = device_output(x, shape, out, "backtest");
  Use use(self);
  hotpath::Engine& e = use.engine();
  Watch watch(progress, S * T, "rows", "backtest");
  std::atomic<size_t> done{0};
  {
    nb::gil_scoped_release unlocked;
    e.backtest_on_device(reinterpret_cast<const float*>(x.data), S, T, reinterpret_cast<float*>(z.data), &done);
  }
  watch.finish(done.load());
  return z.obj;
}

nb::object run_batch_on_device(PyEngine& self, nb::handle x_in, nb::handle out) {
  const DeviceArray x = as_device_array(x_in, "run_batch: x", false);
  const size_t I = self.I, O = self.O;
  if (x.shape.size() != 3 || x.shape[2] != I)
    throw hotpath::Error("run_batch takes windows of shape (B, W, " + std::to_string(I) + "), got a CUDA array of shape " +
                         x.shape_text());
  const size_t B = x.shape[0], W = x.shape[1];
  if (W == 0) throw hotpath::Error("run_batch: windows of length 0 have no output");
  const DeviceArray z = device_output(x, {B, O}, out, "run_batch");
  Use use(self);
  hotpath::Engine& e = use.engine();
  {
    nb::gil_scoped_release unlocked;
    e.run_batch_on_device(reinterpret_cast<const float*>(x.data), B, W, reinterpret_cast<float*>(z.data));
  }
  return z.obj;
}

// Backtest: [T, I] -> [T, O] or [S, T, I] -> [S, T, O] on the engine's throughput path, each series from
// zero state, every input checked before anything runs; the engine is left reset. On the ref and cpu
// backends it runs on a thread of its own while this one watches for signals (the backend stops within
// a step when asked); cuda keeps to the calling thread (its device is current there) and runs to the end.
nb::object backtest(PyEngine& self, nb::handle series_in, nb::handle dtype, nb::handle progress, nb::handle out,
                    const nb::kwargs& extra) {
  refuse_unknown_keywords("backtest", extra, {"series", "dtype", "progress", "out"});
  if (is_device_array(series_in)) return backtest_on_device(self, series_in, dtype, progress, out);
  if (!out.is_none()) throw hotpath::Error("backtest: out= is for series in GPU memory (a CUDA array)");
  const Input series = as_input(series_in, "backtest: series");
  const int type = output_type(dtype, "backtest");
  Use use(self);
  hotpath::Engine& e = use.engine();
  const size_t I = self.I, O = self.O;
  const SeriesCall c = series_call(series, I, O, type, "backtest");
  const size_t n = c.S * c.T;
  const std::span<const float> in(series.data(), n * I);
  Watch watch(progress, n, "rows", "backtest");
  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};
  auto work = [&] {
    if (type == NPY_FLOAT64) e.backtest(in, c.S, c.T, std::span<double>(static_cast<double*>(c.data), n * O), &done, &stop);
    else e.backtest(in, c.S, c.T, std::span<float>(static_cast<float*>(c.data), n * O), &done, &stop);
  };
  if (e.backend_name() == "cuda") {
    {
      nb::gil_scoped_release unlocked;
      work();
    }
    watch.finish(done.load());
  } else {
    run_watched(work, stop, done, watch);
  }
  return c.out;
}

// Fresh windows in chunks of 20-80 ms, between which Python gets control (Ctrl-C, the progress bar);
// each window is computed alone, so the chunks give what one call gives. The state of step/run is
// untouched either way.
nb::object run_batch(PyEngine& self, nb::handle x_in, nb::handle progress, nb::handle out_in, const nb::kwargs& extra) {
  refuse_unknown_keywords("run_batch", extra, {"x", "progress", "out"});
  if (is_device_array(x_in)) return run_batch_on_device(self, x_in, out_in);
  if (!out_in.is_none()) throw hotpath::Error("run_batch: out= is for windows in GPU memory (a CUDA array)");
  const Input x = as_input(x_in, "run_batch: x");
  Use use(self);
  hotpath::Engine& e = use.engine();
  const size_t I = self.I, O = self.O;
  if (x.ndim() != 3 || x.shape(2) != I)
    throw hotpath::Error("run_batch takes windows of shape (B, W, " + std::to_string(I) + "), got an array of shape " +
                         x.shape_text());
  const size_t B = x.shape(0), W = x.shape(1);
  if (W == 0) throw hotpath::Error("run_batch: windows of length 0 have no output");
  auto [out, data] = new_array({npy_intp(B), npy_intp(O)});
  Watch watch(progress, B, "windows", "run_batch");
  bool finite = true;
  {
    nb::gil_scoped_release unlocked;
    for (size_t k = 0; k < B * W * I && finite; ++k) finite = std::isfinite(x.data()[k]);
    // A NaN/Inf: one call, which the backend refuses before computing, naming the window in the whole batch.
    if (!finite) e.run_batch({x.data(), B * W * I}, B, W, {data, B * O});
  }
  size_t chunk = 256;
  for (size_t b = 0; finite && b < B;) {
    const size_t n = std::min(chunk, B - b);
    const auto t0 = std::chrono::steady_clock::now();
    {
      nb::gil_scoped_release unlocked;
      e.run_batch({x.data() + b * W * I, n * W * I}, n, W, {data + b * O, n * O});
    }
    b += n;
    const auto took = std::chrono::steady_clock::now() - t0;
    if (took < std::chrono::milliseconds(20)) chunk *= 2;
    else if (took > std::chrono::milliseconds(80) && chunk > 1) chunk /= 2;
    watch.poll(b);
  }
  watch.finish(B);
  return std::move(out);
}

// The C++ side of bench/python_overhead.py: Engine::step timed per call with a steady clock, on the
// same engine and input that Python times, into a caller-owned output. Nanoseconds, one per call.
nb::object time_step_cpp(PyEngine& self, nb::handle x_in, size_t n) {
  const Input x = as_input(x_in, "x");
  Use use(self);
  if (x.ndim() != 1) throw hotpath::TickError("x must have shape (" + std::to_string(self.I) + ",)");
  npy_intp count = npy_intp(n);
  PyObject* samples = PyArray_SimpleNew(1, &count, NPY_INT64);
  if (!samples) throw nb::python_error();
  nb::object result = nb::steal(samples);
  auto* ns = static_cast<int64_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(samples)));
  {
    nb::gil_scoped_release unlocked;
    std::vector<float> z(self.O);
    const std::span<const float> in(x.data(), x.shape(0));
    for (size_t k = 0; k < n; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      use.engine().step(in, z);
      const auto t1 = std::chrono::steady_clock::now();
      ns[k] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    }
  }
  return result;
}

hotpath::EngineOptions engine_options(const std::string& backend, const std::optional<std::string>& precision,
                                      const std::string& mode, std::optional<int> window, int device,
                                      nb::handle cpuset, double timeout_us, const std::optional<std::string>& fallback,
                                      const std::optional<std::string>& variant, const std::optional<std::string>& scaler,
                                      bool warm, const std::optional<std::string>& kernel,
                                      const std::optional<std::string>& cpu_options, long long batch_rows = 0,
                                      bool metrics = false, bool swap_room = false) {
  // Every choice parsed by its enum's name table (backend/options.hpp), as the CLI's flags and the C
  // ABI's strings are; None keeps the option's default.
  using hotpath::util::parse_name;
  hotpath::EngineOptions o;
  o.backend = parse_name<hotpath::BackendKind>(backend);
  if (precision) o.precision = parse_name<hotpath::Precision>(*precision);
  o.mode = parse_name<hotpath::Mode>(mode);
  check_window(window);
  o.window = window.value_or(0);
  o.gpu.device = device;
  o.cpuset = cpuset_from(cpuset);
  o.gpu.timeout_us = timeout_us;
  if (fallback) o.fallback = parse_name<hotpath::Fallback>(*fallback);
  if (variant) o.gpu.variant = parse_name<hotpath::CudaVariant>(*variant);
  if (kernel) o.gpu.kernel = parse_name<hotpath::CudaKernel>(*kernel);
  if (scaler) o.scaler = hotpath::parse_scaler(*scaler);  // None: the model's scaler when it has one
  o.warm = warm;
  // None: the environment's HOTPATH_CPU_*; text: its keys over them (backend/cpu_options.hpp)
  if (cpu_options) o.cpu = hotpath::cpu_options_over_env(*cpu_options);
  o.gpu.batch_rows = batch_rows;  // 0: sized to the device; the engine refuses a bad value, or one for ref and cpu
  o.metrics = metrics;
  o.swap_room = swap_room;
  return o;
}

// Engine.metrics(): the engine's TickMetrics read once, seconds where the C++ side has ns. Not a Use: a
// scrape may run on another thread while one ticks (TickMetrics::snapshot is made for that).
nb::dict metrics_dict(const PyEngine& self) {
  namespace telemetry = hotpath::telemetry;
  const std::shared_ptr<const telemetry::TickMetrics> metrics = open_engine(self).metrics();
  if (!metrics)
    throw hotpath::Error("this engine records no telemetry: make it with hotpath.Engine(..., metrics=True)");
  const telemetry::Snapshot s = metrics->snapshot();
  nb::dict d;
  d["count"] = s.count;
  d["sum_seconds"] = double(s.sum_ns) / 1e9;
  d["p50_seconds"] = telemetry::quantile(s, 0.5) / 1e9;
  d["p99_seconds"] = telemetry::quantile(s, 0.99) / 1e9;
  d["p999_seconds"] = telemetry::quantile(s, 0.999) / 1e9;
  d["answered"] = s.answered;
  d["late"] = s.late;
  d["lost"] = s.lost;
  d["fallback"] = s.fallback;
  d["gpu_timeouts"] = s.gpu_timeouts;
  d["lease_renewals"] = s.lease_renewals;
  d["swaps"] = s.swaps;
  d["precompute_backlog"] = s.precompute_backlog;
  d["model_id"] = s.model_id;
  d["backend"] = s.backend;
  d["variant"] = s.variant;
  nb::list buckets;
  for (int i = 0; i < telemetry::kBuckets; ++i)
    buckets.append(nb::make_tuple(telemetry::kBucketUpperNs[size_t(i)] / 1e9, s.cumulative[size_t(i)]));
  d["buckets"] = buckets;
  return d;
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const hotpath::TickError& e) {
    PyErr_SetString(g_tick_error, e.what());
  } catch (const hotpath::UnsupportedError& e) {
    PyErr_SetString(g_unsupported_error, e.what());
  } catch (const hotpath::BackendError& e) {
    PyErr_SetString(g_backend_error, e.what());
  } catch (const hotpath::Error& e) {
    PyErr_SetString(g_error, e.what());
  }
}

PyObject* new_exception(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("hotpath.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::borrow(type);
  return type;  // the module keeps a reference; this one is never released (the classes live forever)
}

}  // namespace

NB_MODULE(_hotpath, m) {
  m.doc() = "hotpath's engine layer (C++), wrapped by the hotpath package: use `import hotpath`.";
  m.attr("__version__") = HOTPATH_VERSION;
  m.attr("git_commit") = HOTPATH_GIT_COMMIT;
  if (_import_array() < 0) throw nb::python_error();  // numpy's C API
  hotpath::util::set_stderr_warnings(false);  // warned through Python's warnings module instead

  g_error = new_exception(m, "Error", PyExc_ValueError,
                          "Bad input of any kind (a file, an option, a model, a tick); the message names the problem.");
  g_tick_error = new_exception(m, "TickError", g_error,
                               "A tick input the engine refused (NaN/Inf, wrong shape); the state is left as before.");
  g_unsupported_error = new_exception(m, "UnsupportedError", g_error,
                                      "The platform or build cannot do what was asked (no CUDA device, model too "
                                      "large for a kernel, ...).");
  {
    // Also a RuntimeError: the backend failed, not the input.
    PyObject* bases = PyTuple_Pack(2, g_error, PyExc_RuntimeError);
    if (!bases) throw nb::python_error();
    g_backend_error = new_exception(m, "BackendError", bases,
                                    "The backend failed at run time, not the input (a GPU answer past its deadline, a "
                                    "kernel that stopped, a failed fallback); reset or reopen the engine.");
    Py_DECREF(bases);
  }
  nb::register_exception_translator(translate);

  nb::class_<hotpath::Model>(m, "Model", "A validated model: an nn.LSTM stack and its nn.Linear head (hotpath.load).")
      .def_prop_ro("input_size", [](const hotpath::Model& x) { return x.config.input_size; })
      .def_prop_ro("hidden_size", [](const hotpath::Model& x) { return x.config.hidden_size; })
      .def_prop_ro("num_layers", [](const hotpath::Model& x) { return x.config.num_layers; })
      .def_prop_ro("output_size", [](const hotpath::Model& x) { return x.config.output_size; })
      .def_prop_ro("window", [](const hotpath::Model& x) { return x.config.window; })
      .def_prop_ro("bias", [](const hotpath::Model& x) { return x.config.lstm_bias; })
      .def_prop_ro("parameter_count", [](const hotpath::Model& x) { return x.config.parameter_count(); })
      .def_prop_ro("dtype", [](const hotpath::Model& x) { return std::string(hotpath::dtype_name(x.dtype)); })
      .def_prop_ro("id", [](const hotpath::Model& x) { return hotpath::model_id(x); },
                   "16 hex digits of a hash of the model's content (config, weights, scaler): names the model\n"
                   "that answered a tick after a live swap (Engine.model_id).")
      .def_ro("name", &hotpath::Model::name)
      .def_ro("lstm_prefix", &hotpath::Model::lstm_prefix)
      .def_ro("head_prefix", &hotpath::Model::head_prefix)
      .def(
          "to_safetensors",
          [](const hotpath::Model& x) {
            // float64 weights: hotpath.load() of these bytes gives back exactly this model
            const auto bytes = hotpath::safetensors::serialize(
                hotpath::model_tensors(x, hotpath::DType::F64, x.lstm_prefix, x.head_prefix),
                hotpath::model_metadata(x, x.lstm_prefix, x.head_prefix));
            return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "The model as the bytes of a safetensors file (float64 weights, exact; window and prefixes in its "
          "metadata): hotpath.load(bytes) reads it back, e.g. on another machine.")
      .def("__repr__", [](const hotpath::Model& x) {
        const auto& c = x.config;
        return "<hotpath.Model '" + x.name + "' I=" + std::to_string(c.input_size) + " H=" +
               std::to_string(c.hidden_size) + " L=" + std::to_string(c.num_layers) + " O=" +
               std::to_string(c.output_size) + " window=" + (c.window ? std::to_string(*c.window) : "None") + ">";
      });

  m.def(
      "_open_model",
      [](const std::string& path, std::optional<std::string> lstm_prefix, std::optional<std::string> head_prefix,
         std::optional<int> window, std::optional<std::vector<std::string>> ignore) {
        check_window(window);
        const auto options = load_options(lstm_prefix, head_prefix, std::move(ignore));
        nb::gil_scoped_release unlocked;
        return with_window(hotpath::open_model(path, options), window);
      },
      "path_or_zoo_name"_a, "lstm_prefix"_a = nb::none(), "head_prefix"_a = nb::none(), "window"_a = nb::none(),
      "ignore"_a = nb::none());
  m.def(
      "_open_model_bytes",
      [](nb::bytes data, const std::string& name, std::optional<std::string> lstm_prefix,
         std::optional<std::string> head_prefix, std::optional<int> window,
         std::optional<std::vector<std::string>> ignore) {
        check_window(window);
        const auto options = load_options(lstm_prefix, head_prefix, std::move(ignore));
        const std::span<const std::byte> bytes(static_cast<const std::byte*>(data.data()), data.size());
        nb::gil_scoped_release unlocked;  // `data` stays referenced by the caller's frame
        return with_window(hotpath::open_model_bytes(bytes, name, options), window);
      },
      "data"_a, "name"_a = "<bytes>", "lstm_prefix"_a = nb::none(), "head_prefix"_a = nb::none(),
      "window"_a = nb::none(), "ignore"_a = nb::none());

  m.def(
      "backends",
      [] {
        std::vector<std::string> names;
        for (const auto k : hotpath::built_backends()) names.emplace_back(hotpath::util::name_of(k));
        return names;
      },
        "The backends built into this hotpath ('ref', 'cpu', and 'cuda' and 'hybrid' when built with CUDA); Engine also "
        "takes 'auto'.");
  m.def(
      "zoo",
      [] {
        std::vector<nb::dict> out;
        for (const auto& e : hotpath::zoo()) {
          nb::dict d;
          d["name"] = e.name;
          d["input_size"] = e.config.input_size;
          d["hidden_size"] = e.config.hidden_size;
          d["num_layers"] = e.config.num_layers;
          d["output_size"] = e.config.output_size;
          d["window"] = e.config.window;
          d["parameter_count"] = e.config.parameter_count();
          out.push_back(std::move(d));
        }
        return out;
      },
      "The built-in model zoo (`hotpath models`): one dict per model with its name and shapes.");

  with_context(nb::class_<PyEngine>(m, "Engine", "A model served by one backend; see docs/python.md."))
      .def(
          "__init__",
          [](PyEngine* self, nb::object model, const std::string& backend, std::optional<std::string> precision,
             const std::string& mode, std::optional<int> window, int device, nb::handle cpuset, double timeout_us,
             std::optional<std::string> fallback, std::optional<std::string> variant,
             std::optional<std::string> scaler, bool warm, std::optional<std::string> kernel,
             std::optional<std::string> cpu_options, long long batch_rows, bool metrics, bool swap_room,
             nb::kwargs extra) {
            refuse_unknown_keywords("Engine", extra,
                                    {"model", "backend", "precision", "mode", "window", "device", "cpuset",
                                     "timeout_us", "fallback", "variant", "scaler", "warm", "kernel", "cpu_options",
                                     "batch_rows", "metrics", "swap_room"});
            // Anything hotpath.load takes (a path, bytes, a zoo name, a torch module) stands for its model.
            if (!nb::isinstance<hotpath::Model>(model)) model = nb::module_::import_("hotpath").attr("load")(model);
            const hotpath::Model& source = nb::cast<const hotpath::Model&>(model);
            const auto options = engine_options(backend, precision, mode, window, device, cpuset, timeout_us, fallback,
                                                variant, scaler, warm, kernel, cpu_options, batch_rows, metrics,
                                                swap_room);
            std::shared_ptr<hotpath::Engine> engine;
            {
              nb::gil_scoped_release unlocked;  // a cuda engine launches its kernel here
              engine = std::make_shared<hotpath::Engine>(source, options);
            }
            // int8 on the portable kernels (no AVX512_VNNI here): a Python warning, not the library's stderr line.
            const auto facts = engine->facts();
            if (const auto it = facts.find("cpu_int8"); it != facts.end() && it->second.rfind("slow: ", 0) == 0)
              if (PyErr_WarnEx(PyExc_RuntimeWarning, it->second.substr(6).c_str(), 1) != 0) throw nb::python_error();
            auto* e = new (self) PyEngine();
            e->I = size_t(engine->input_size());
            e->O = size_t(engine->output_size());
            e->engine = std::move(engine);
            e->model = std::move(model);
          },
          "model"_a, "backend"_a = "auto", "precision"_a = nb::none(), "mode"_a = "window", "window"_a = nb::none(),
          "device"_a = 0, "cpuset"_a = nb::none(), "timeout_us"_a = 1'000'000.0, "fallback"_a = nb::none(),
          "variant"_a = nb::none(), "scaler"_a = nb::none(), "warm"_a = true, "kernel"_a = nb::none(),
          "cpu_options"_a = nb::none(), "batch_rows"_a = 0, "metrics"_a = false, "swap_room"_a = false, "kwargs"_a)
      .def("step", &step, "x"_a.none(), "out"_a = nb::none(),
           nb::sig("def step(self, x: numpy.typing.ArrayLike, out: numpy.typing.NDArray[numpy.float32] | None = None) "
                   "-> numpy.typing.NDArray[numpy.float32]"),
           "One tick: x [I] -> z [O] (float32), continuing from the current state. With out=, writes z\n"
           "into that float32 array and returns it. A NaN/Inf or misshapen x raises TickError, state unchanged.")
      .def("run", &run, "series"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "progress"_a = nb::none(),
           "kwargs"_a,
           nb::sig("def run(self, series: numpy.typing.ArrayLike, *, dtype: numpy.typing.DTypeLike = None, "
                   "progress: bool | None = None) -> numpy.typing.NDArray[numpy.floating]"),
           "A series [T, I] -> [T, O], or many [S, T, I] -> [S, T, O]: each series from a fresh state (reset\n"
           "first); the engine then holds the state after the last tick. dtype: float32 (default) or float64.\n"
           "Ctrl-C raises KeyboardInterrupt within ~0.1 s and leaves the engine reset. progress: None (a bar on\n"
           "stderr once the call has run 1 s, when stderr is a terminal), True (from the start), False (never).")
      .def("backtest", &backtest, "series"_a.none(), nb::kw_only(), "dtype"_a = nb::none(), "progress"_a = nb::none(),
           "out"_a = nb::none(), "kwargs"_a,
           nb::sig("def backtest(self, series: numpy.typing.ArrayLike, *, dtype: numpy.typing.DTypeLike = None, "
                   "progress: bool | None = None, out: typing.Any = None) -> typing.Any"),
           "Backtest: a series [T, I] -> every output [T, O], or S series [S, T, I] -> [S, T, O], each from\n"
           "zero state by the engine's mode, on the backend's throughput path. Every input is checked first (a\n"
           "NaN/Inf raises TickError naming series, tick and input; nothing is computed); the engine is left\n"
           "reset. dtype: float32 (default) or float64. Ctrl-C raises KeyboardInterrupt within ~0.1 s (ref, cpu;\n"
           "cuda at the end). progress: as for run. A CUDA array (torch, CuPy, JAX: __cuda_array_interface__,\n"
           "float32, C-contiguous; cuda backend) stays on the GPU: the outputs are a CUDA array of the same\n"
           "library on the same device, or out= (a writable float32 CUDA array of the outputs' shape).")
      .def("run_batch", &run_batch, "x"_a.none(), nb::kw_only(), "progress"_a = nb::none(), "out"_a = nb::none(),
           "kwargs"_a,
           nb::sig("def run_batch(self, x: numpy.typing.ArrayLike, *, progress: bool | None = None, "
                   "out: typing.Any = None) -> typing.Any"),
           "Fresh windows [B, W, I] -> [B, O], each from zero state; the state of step/run is untouched.\n"
           "Ctrl-C raises KeyboardInterrupt within ~0.1 s. progress: as for run. A CUDA array stays on the GPU\n"
           "as for backtest (out= likewise).")
      .def(
          "swap",
          [](PyEngine& self, nb::object model, std::optional<std::string> precision, long long warm_ticks) {
            if (!self.engine) throw hotpath::Error("this engine is closed (close() or the end of its with block); make a new Engine");
            if (!nb::isinstance<hotpath::Model>(model)) model = nb::module_::import_("hotpath").attr("load")(model);
            hotpath::SwapOptions so;
            if (precision) so.precision = hotpath::util::parse_name<hotpath::Precision>(*precision);
            so.warm_ticks = warm_ticks;
            // Not a Use: the one call that may run beside a ticking thread. The copy keeps the engine alive.
            std::shared_ptr<hotpath::Engine> engine = self.engine;
            hotpath::Model copy = nb::cast<const hotpath::Model&>(model);
            std::string id;
            {
              nb::gil_scoped_release unlocked;
              id = engine->swap(std::move(copy), so);
            }
            self.swapped_in[id] = model;
            return id;
          },
          "model"_a, "precision"_a = nb::none(), "warm_ticks"_a = 0,
          "Live swap: makes model (anything hotpath.load takes) ready to answer in place of the serving one\n"
          "and returns its id once it is, the old model answering meanwhile; the next tick is still the old\n"
          "model's, every later one the new model's (window mode: bit-identical to an engine that served it\n"
          "from the start). May be called from another thread while one thread ticks. precision: the new\n"
          "model's (default: the engine's). warm_ticks: streaming only, the new state from zero over the last\n"
          "K inputs (0: zero state). Raises Error (the old model still serving) for another input or output\n"
          "size, bad weights, or a model the backend cannot serve.")
      .def_prop_ro("model_id", [](PyEngine& self) { return open_engine(self).answering_model_id(); },
                   "The id (Model.id) of the model that answered the last tick.")
      .def_prop_ro("swaps", [](PyEngine& self) { return open_engine(self).swaps(); })
      .def_prop_ro("swap_pending", [](PyEngine& self) { return open_engine(self).swap_pending(); })
      .def(
          "reset",
          [](PyEngine& self) {
            Use use(self);
            nb::gil_scoped_release unlocked;
            use.engine().reset();
          },
          "Forget all state: the next tick is t = 0.")
      .def("counters", [](PyEngine& self) { return Use(self).engine().counters(); },
           "What the backend counts (e.g. the cuda backend's fallback answers), name -> value.")
      .def("facts", [](PyEngine& self) { return Use(self).engine().facts(); },
           "What the backend reports about itself (e.g. the CPU's instruction set, the GPU), name -> text.")
      .def("metrics", &metrics_dict,
           "The tick telemetry of an engine made with metrics=True: count, sum_seconds, p50/p99/p999_seconds,\n"
           "the counters, model_id, backend, variant and buckets [(upper_bound_seconds, cumulative_count)].\n"
           "Any thread, also while another one ticks. Raises Error for an engine made without metrics.")
      .def(
          "close",
          [](PyEngine& self) {
            if (!self.engine) return;
            if (self.guard->busy.exchange(true, std::memory_order_acquire))
              throw hotpath::Error("close(): this engine is in use by another thread");
            std::shared_ptr<hotpath::Engine> engine = std::move(self.engine);  // an instance's: its set's
            self.guard->busy.store(false, std::memory_order_release);
            nb::gil_scoped_release unlocked;  // a cuda engine stops its kernel here
            engine.reset();
          },
          "Stop the engine and free it; later calls raise hotpath.Error. Idempotent.")
      .def_prop_ro("closed", [](const PyEngine& self) { return !self.engine; })
      .def_prop_ro("backend", [](PyEngine& self) { return open_engine(self).backend_name(); })
      .def_prop_ro("variant", [](PyEngine& self) { return open_engine(self).variant(); })
      .def_prop_ro("precision",
                   [](PyEngine& self) { return std::string(hotpath::precision_name(open_engine(self).precision())); })
      .def_prop_ro("mode", [](PyEngine& self) { return std::string(hotpath::mode_name(open_engine(self).mode())); })
      .def_prop_ro("window", [](PyEngine& self) { return open_engine(self).window(); })
      .def_prop_ro("ticks", [](PyEngine& self) { return Use(self).engine().ticks(); })
      .def_prop_ro("input_size", [](PyEngine& self) { return open_engine(self).input_size(); })
      .def_prop_ro("output_size", [](PyEngine& self) { return open_engine(self).output_size(); })
      .def_prop_ro("choice_note", [](PyEngine& self) { return open_engine(self).choice_note(); })
      .def_prop_ro("scaler",
                   [](PyEngine& self) { return hotpath::scaler_name(open_engine(self).scaler()); })
      .def_prop_ro("warm_up",
                   [](PyEngine& self) {
                     const auto& w = open_engine(self).warm_up();
                     nb::dict d;
                     d["ticks"] = w.ticks;
                     d["seconds"] = w.seconds;
                     return d;
                   })
      .def_prop_ro("model",
                   [](PyEngine& self) {
                     if (!self.engine || self.swapped_in.empty()) return self.model;
                     const auto it = self.swapped_in.find(self.engine->model_id());
                     return it == self.swapped_in.end() ? self.model : it->second;
                   })
      .def("__repr__", [](PyEngine& self) -> std::string {
        if (!self.engine) return "<hotpath.Engine (closed)>";
        if (!self.guard->live.load(std::memory_order_acquire)) return "<hotpath.Engine (instance restarted or closed)>";
        const auto& e = *self.engine;
        return "<hotpath.Engine '" + e.model().name + "' backend=" + e.backend_name() + " precision=" +
               hotpath::precision_name(e.precision()) + " mode=" + hotpath::mode_name(e.mode()) +
               " window=" + std::to_string(e.window()) + ">";
      });

  with_context(nb::class_<PyInstances>(m, "Instances",
                                       "N independent instances of one model on one GPU (cuda backend), each an "
                                       "Engine on SMs of its own; see docs/python.md."))
      .def(
          "__init__",
          [](PyInstances* self, nb::object model, int count, const std::string& isolation, int sms_each,
             const std::string& placement, const std::string& backend, std::optional<std::string> precision,
             const std::string& mode, std::optional<int> window, int device, double timeout_us,
             std::optional<std::string> variant, std::optional<std::string> scaler, bool warm, bool metrics,
             nb::kwargs extra) {
            refuse_unknown_keywords("Instances", extra,
                                    {"model", "count", "isolation", "sms_each", "placement", "backend", "precision",
                                     "mode", "window", "device", "timeout_us", "variant", "scaler", "warm", "metrics"});
            if (!nb::isinstance<hotpath::Model>(model)) model = nb::module_::import_("hotpath").attr("load")(model);
            const hotpath::Model& source = nb::cast<const hotpath::Model&>(model);
            const auto options = engine_options(backend, precision, mode, window, device, nb::none(), timeout_us,
                                                std::nullopt, variant, scaler, warm, std::nullopt, std::nullopt, 0,
                                                metrics);
            hotpath::engine::InstanceOptions io;
            io.count = count;
            io.isolation = hotpath::util::parse_name<hotpath::engine::Isolation>(isolation);
            io.sms_each = sms_each;
            io.placement = hotpath::util::parse_name<hotpath::engine::Placement>(placement);
            auto holder = std::make_shared<InstanceSetHolder>();
            {
              nb::gil_scoped_release unlocked;  // the kernels start here
              holder->set = std::make_unique<hotpath::engine::InstanceSet>(source, options, io);
            }
            for (size_t k = 0; k < holder->set->size(); ++k) holder->guards.push_back(std::make_shared<CallGuard>());
            new (self) PyInstances{std::move(holder), std::move(model)};
          },
          "model"_a, "count"_a, nb::kw_only(), "isolation"_a = "green", "sms_each"_a = 0, "placement"_a = "sm",
          "backend"_a = "cuda", "precision"_a = nb::none(), "mode"_a = "window", "window"_a = nb::none(),
          "device"_a = 0, "timeout_us"_a = 1'000'000.0, "variant"_a = nb::none(), "scaler"_a = nb::none(),
          "warm"_a = true, "metrics"_a = false, "kwargs"_a)
      .def("__len__", [](const PyInstances& self) { return self.holder ? self.holder->set->size() : size_t(0); })
      .def(
          "__getitem__",
          [](PyInstances& self, long long k) {
            const size_t i = instance_index(self, k, true);
            const std::shared_ptr<InstanceSetHolder> holder = self.holder;
            std::unique_lock<std::mutex> lock;
            {
              nb::gil_scoped_release unlocked;  // a restart on another thread holds it without the GIL
              lock = std::unique_lock(holder->mutex);
            }
            hotpath::Engine& engine = (*holder->set)[i];  // Error after a failed restart
            auto* e = new PyEngine();
            e->engine = std::shared_ptr<hotpath::Engine>(holder, &engine);  // keeps the set alive
            e->guard = holder->guards[i];
            e->I = size_t(engine.input_size());
            e->O = size_t(engine.output_size());
            e->model = self.model;
            return nb::cast(e, nb::rv_policy::take_ownership);
          },
          "k"_a, "Instance k's Engine (drive each instance from one thread; valid until restart(k) or close()).")
      .def(
          "restart",
          [](PyInstances& self, long long k) {
            const size_t i = instance_index(self, k, false);
            const std::shared_ptr<InstanceSetHolder> holder = self.holder;  // a close() may drop self's
            // The old handles' guard stays taken: they refuse every call from here on.
            if (holder->guards[i]->busy.exchange(true, std::memory_order_acquire))
              throw hotpath::Error("restart(" + std::to_string(k) + "): instance " + std::to_string(k) +
                                   " is in a call on another thread");
            holder->guards[i]->live.store(false, std::memory_order_release);
            holder->guards[i] = std::make_shared<CallGuard>();
            nb::gil_scoped_release unlocked;
            std::lock_guard lock(holder->mutex);
            holder->set->restart(i);
          },
          "k"_a,
          "Close instance k and open it again on its SMs, warmed, while the others serve; its old Engine\n"
          "handles refuse every call after this (take instances[k] again). No call on instance k meanwhile.")
      .def(
          "close",
          [](PyInstances& self) {
            if (!self.holder) return;
            for (auto& g : self.holder->guards) g->live.store(false, std::memory_order_release);
            std::shared_ptr<InstanceSetHolder> holder = std::move(self.holder);
            nb::gil_scoped_release unlocked;
            holder.reset();  // the set goes when the last instance handle does
          },
          "Stop every instance (once no Engine handle of it is left); later calls raise hotpath.Error.")
      .def_prop_ro("closed", [](const PyInstances& self) { return !self.holder; })
      .def_prop_ro("layout",
                   [](const PyInstances& self) {
                     if (!self.holder) throw hotpath::Error("this set of instances is closed");
                     const auto& l = self.holder->set->layout();
                     nb::dict d;
                     d["isolation"] = hotpath::util::name_of(l.isolation);
                     d["count"] = l.count;
                     d["sms_each"] = l.sms_each;
                     d["fine_split"] = l.fine;
                     d["device_sms"] = l.device_sms;
                     d["launch_sms"] = l.launch_sms;
                     d["placement"] = l.placement ? hotpath::util::name_of(*l.placement) : "";
                     return d;
                   })
      .def("__repr__", [](const PyInstances& self) -> std::string {
        if (!self.holder) return "<hotpath.Instances (closed)>";
        const auto& l = self.holder->set->layout();
        return "<hotpath.Instances " + std::to_string(l.count) + " x '" + nb::cast<const hotpath::Model&>(self.model).name +
               "' isolation=" + hotpath::util::name_of(l.isolation) + " sms_each=" + std::to_string(l.sms_each) + ">";
      });

  m.def("_time_step_cpp", &time_step_cpp, "engine"_a, "x"_a, "n"_a,
        "Engine::step timed n times in C++ (steady clock, ns per call): the baseline of bench/python_overhead.py.");
}
