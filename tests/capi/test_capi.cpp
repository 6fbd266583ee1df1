// The C ABI (include/hotpath/hotpath.h): every call's error paths (NULL handles and buffers, wrong
// sizes, bad option strings, corrupt model bytes, NaN ticks), the status each exception maps to, the
// messages against the CLI's, outputs against the engine and the golden PyTorch cases, the per-thread
// last error, and many engines on many threads. Host backends only (ref, cpu): no GPU needed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "capi/handles.hpp"
#include "common/golden.hpp"
#include "common/warm_budget.hpp"
#include "engine/engine.hpp"
#include "model/quantize.hpp"
#include "model/safetensors.hpp"
#include "hotpath/hotpath.h"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;
using hotpath::test_support::Golden;
using hotpath::test_support::load_golden;

namespace {

const std::string kGolden = HOTPATH_GOLDEN_DIR;
std::string golden_model(const std::string& name) { return kGolden + "/" + name + ".model.safetensors"; }

struct ModelCloser {
  void operator()(hotpath_model* m) const { hotpath_model_close(m); }
};
struct EngineCloser {
  void operator()(hotpath_engine* e) const { hotpath_engine_close(e); }
};
using ModelPtr = std::unique_ptr<hotpath_model, ModelCloser>;
using EnginePtr = std::unique_ptr<hotpath_engine, EngineCloser>;

std::string last_error() { return hotpath_last_error(); }
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

ModelPtr open_model(const std::string& path_or_name) {
  hotpath_model* m = nullptr;
  EXPECT_EQ(hotpath_model_open(path_or_name.c_str(), nullptr, nullptr, &m), HOTPATH_OK) << last_error();
  return ModelPtr(m);
}

struct Opts {
  const char* backend = "cpu";
  const char* precision = nullptr;
  const char* mode = "window";
  int window = 0;
};

EnginePtr open_engine(const hotpath_model* m, const Opts& opts) {
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = opts.backend;
  o.precision = opts.precision;
  o.mode = opts.mode;
  o.window = opts.window;
  hotpath_engine* e = nullptr;
  EXPECT_EQ(hotpath_engine_open(m, &o, &e), HOTPATH_OK) << last_error();
  return EnginePtr(e);
}

// Opening with these options fails with `status`, a message holding `needle`, and *out set to NULL.
void expect_open_fails(const hotpath_model* m, const hotpath_engine_options* o, hotpath_status status,
                       const std::string& needle) {
  hotpath_engine* e = reinterpret_cast<hotpath_engine*>(0x1);  // must come back NULL
  EXPECT_EQ(hotpath_engine_open(m, o, &e), status) << last_error();
  EXPECT_EQ(e, nullptr);
  EXPECT_TRUE(contains(last_error(), needle)) << "message: " << last_error() << "\nexpected to hold: " << needle;
  hotpath_engine_close(e);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A temporary folder for the files a test writes (corrupt models, the CLI's output).
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hotpath_capi_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// The CLI's stderr for `args` (one line "hotpath: error: ..." for bad input).
std::string cli_stderr(const TempDir& dir, const std::string& args) {
  const std::string err = dir.file("stderr.txt");
  const std::string cmd = std::string(HOTPATH_BINARY) + " " + args + " >/dev/null 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << args;
  return slurp(err);
}

std::vector<float> series(size_t ticks, size_t inputs, unsigned seed) {
  std::vector<float> x(ticks * inputs);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(std::sin(0.37 * double(k) + seed) * 1.5);
  return x;
}

std::vector<double> to_f64(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// ---- version, status names -----------------------------------------------------------------------

TEST(Capi, VersionAndStatusNames) {
  EXPECT_STREQ(hotpath_version(), HOTPATH_VERSION);
  EXPECT_STREQ(hotpath_status_name(HOTPATH_OK), "ok");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_TICK), "tick error");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_UNSUPPORTED), "unsupported");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_OUT_OF_MEMORY), "out of memory");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_INTERNAL), "internal error");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_ERROR_BACKEND), "backend error");
  EXPECT_STREQ(hotpath_status_name(hotpath_status(42)), "unknown status");
  EXPECT_STREQ(hotpath_status_name(HOTPATH_STATUS_MAX_ENUM), "unknown status");
}

TEST(Capi, CloseAcceptsNull) {
  hotpath_model_close(nullptr);
  hotpath_engine_close(nullptr);
}

// ---- models --------------------------------------------------------------------------------------

TEST(CapiModel, OpenFromPathAndZoo) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  ASSERT_TRUE(m);
  hotpath_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_model_get_info(m.get(), &info), HOTPATH_OK) << last_error();
  EXPECT_EQ(info.input_size, 16);
  EXPECT_EQ(info.hidden_size, 64);
  EXPECT_EQ(info.num_layers, 3);
  EXPECT_EQ(info.output_size, 4);
  EXPECT_EQ(info.window, 0);  // the golden models carry no metadata window
  EXPECT_EQ(std::string(info.name), golden_model("multi_out"));

  const ModelPtr zoo = open_model("lstm_s");
  ASSERT_TRUE(zoo);
  ASSERT_EQ(hotpath_model_get_info(zoo.get(), &info), HOTPATH_OK);
  EXPECT_EQ(info.input_size, 32);
  EXPECT_EQ(info.hidden_size, 128);
  EXPECT_EQ(info.num_layers, 2);
  EXPECT_EQ(info.output_size, 1);
  EXPECT_EQ(info.window, 50);
  EXPECT_STREQ(info.name, "lstm_s");
}

TEST(CapiModel, OpenErrors) {
  hotpath_model* m = nullptr;
  EXPECT_EQ(hotpath_model_open("lstm_s", nullptr, nullptr, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_open: out is NULL");
  m = reinterpret_cast<hotpath_model*>(0x1);
  EXPECT_EQ(hotpath_model_open(nullptr, nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_open: path_or_zoo_name is NULL");
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(hotpath_model_open("/nonexistent/model.safetensors", nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_TRUE(contains(last_error(), "/nonexistent/model.safetensors")) << last_error();
  // Prefixes that match nothing in the file.
  EXPECT_EQ(hotpath_model_open(golden_model("tiny").c_str(), "nope.", nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "nope.")) << last_error();
  EXPECT_EQ(m, nullptr);
  // The right ones, given explicitly.
  ASSERT_EQ(hotpath_model_open(golden_model("tiny").c_str(), "lstm.", "fc.", &m), HOTPATH_OK) << last_error();
  hotpath_model_close(m);
}

// A zoo model has no keys: a prefix given with its name was once dropped without a word.
TEST(CapiModel, ZooNameWithAPrefixIsRefusedNamingBoth) {
  hotpath_model* m = reinterpret_cast<hotpath_model*>(0x1);
  EXPECT_EQ(hotpath_model_open("lstm_s", "lstm.", nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(last_error(), "'lstm_s' is a zoo model, but an LSTM prefix 'lstm.' was given: key prefixes and tensors to "
                          "ignore apply to a model file only");
  EXPECT_EQ(hotpath_model_open("lstm_s", nullptr, "fc.", &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "'lstm_s' is a zoo model, but a head prefix 'fc.' was given")) << last_error();
  EXPECT_EQ(hotpath_model_open_ex("lstm_s", "", "", "aux.", &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "but a tensor to ignore 'aux.' was given")) << last_error();
  ASSERT_EQ(hotpath_model_open("lstm_s", "", nullptr, &m), HOTPATH_OK) << last_error();  // "" is "detect"
  hotpath_model_close(m);
}

// Every tensor of the file is used or named in ignore_tensors: an extra Linear is never dropped silently.
TEST(CapiModel, UnusedTensorsRefusedUnlessIgnored) {
  namespace st = hotpath::safetensors;
  const std::vector<st::OutTensor> tensors = hotpath::test_support::golden_with_mlp_head("tiny");
  const std::vector<uint8_t> bytes = st::serialize(tensors, {});
  TempDir dir;
  const std::string path = dir.file("mlp.safetensors");
  st::write_file(path, tensors, {});

  hotpath_model* m = reinterpret_cast<hotpath_model*>(0x1);
  EXPECT_EQ(hotpath_model_open(path.c_str(), nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_TRUE(contains(last_error(), path + ": tensors 'fc2.bias', 'fc2.weight' are not used by the model")) << last_error();
  EXPECT_EQ(hotpath_model_open_bytes(bytes.data(), bytes.size(), "mlp", nullptr, nullptr, &m),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "mlp: tensors 'fc2.bias', 'fc2.weight' are not used")) << last_error();

  ASSERT_EQ(hotpath_model_open_ex(path.c_str(), nullptr, nullptr, "fc2.", &m), HOTPATH_OK) << last_error();
  hotpath_model_close(m);
  ASSERT_EQ(hotpath_model_open_bytes_ex(bytes.data(), bytes.size(), "mlp", nullptr, nullptr, "fc2.weight,fc2.bias", &m),
            HOTPATH_OK)
      << last_error();
  hotpath_model_close(m);
  EXPECT_EQ(hotpath_model_open_ex(path.c_str(), nullptr, nullptr, "fc2.,", &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "ignore_tensors 'fc2.,' holds an empty name");
  EXPECT_EQ(hotpath_model_open_ex(path.c_str(), nullptr, nullptr, "fc3.", &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "the tensors to ignore name 'fc3.', which matches no tensor")) << last_error();
  EXPECT_EQ(hotpath_model_open_ex(nullptr, nullptr, nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_open: path_or_zoo_name is NULL");
}

TEST(CapiModel, OpenBytesEqualsOpenFile) {
  const std::string bytes = slurp(golden_model("small2x128"));
  ASSERT_FALSE(bytes.empty());
  hotpath_model* m = nullptr;
  ASSERT_EQ(hotpath_model_open_bytes(bytes.data(), bytes.size(), "in-memory", "lstm.", "fc.", &m), HOTPATH_OK)
      << last_error();
  const ModelPtr from_bytes(m);
  const ModelPtr from_file = open_model(golden_model("small2x128"));
  EXPECT_EQ(from_bytes->model.config, from_file->model.config);
  EXPECT_EQ(from_bytes->model.layers[1].w_hh, from_file->model.layers[1].w_hh);
  EXPECT_EQ(from_bytes->model.head_w, from_file->model.head_w);
  hotpath_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_model_get_info(from_bytes.get(), &info), HOTPATH_OK);
  EXPECT_STREQ(info.name, "in-memory");
  // NULL name: "<bytes>".
  ASSERT_EQ(hotpath_model_open_bytes(bytes.data(), bytes.size(), nullptr, nullptr, nullptr, &m), HOTPATH_OK);
  ASSERT_EQ(hotpath_model_get_info(m, &info), HOTPATH_OK);
  EXPECT_STREQ(info.name, "<bytes>");
  hotpath_model_close(m);
}

TEST(CapiModel, CorruptBytesAreRefusedByName) {
  const std::string good = slurp(golden_model("tiny"));
  hotpath_model* m = reinterpret_cast<hotpath_model*>(0x1);
  EXPECT_EQ(hotpath_model_open_bytes(nullptr, 10, "x", nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_open_bytes: data is NULL");
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(hotpath_model_open_bytes(good.data(), good.size(), "x", nullptr, nullptr, nullptr),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_open_bytes: out is NULL");
  // Empty, truncated at every kind of place, garbage, a header length past the end.
  std::vector<std::string> corrupt = {"", good.substr(0, 4), good.substr(0, 12), good.substr(0, good.size() / 2),
                                      good.substr(0, good.size() - 1), std::string(200, '\xff')};
  std::string huge_header = good;
  huge_header[6] = '\x7f';  // the 8-byte little-endian header length: now far beyond the data
  corrupt.push_back(huge_header);
  std::string bad_json = good;
  bad_json[8] = '[';
  corrupt.push_back(bad_json);
  for (size_t k = 0; k < corrupt.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    const std::string& c = corrupt[k];
    m = reinterpret_cast<hotpath_model*>(0x1);
    const char empty = 0;
    EXPECT_EQ(hotpath_model_open_bytes(c.empty() ? &empty : c.data(), c.size(), "corrupt-case", nullptr, nullptr, &m),
              HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(m, nullptr);
    EXPECT_FALSE(last_error().empty());
    EXPECT_EQ(last_error().find('\n'), std::string::npos);
    EXPECT_TRUE(contains(last_error(), "corrupt-case")) << last_error();
  }
}

TEST(CapiModel, GetInfoErrors) {
  const ModelPtr m = open_model("lstm_s");
  hotpath_model_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(hotpath_model_get_info(nullptr, &info), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_get_info: model is NULL");
  EXPECT_EQ(hotpath_model_get_info(m.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_get_info: info is NULL");
  info.struct_size = 0;
  EXPECT_EQ(hotpath_model_get_info(m.get(), &info), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_model_get_info: info->struct_size is 0, expected at least " +
                              std::to_string(sizeof info) + " (sizeof(hotpath_model_info))");
  EXPECT_EQ(info.input_size, 0);  // nothing written
}

// The message is the CLI's own line (after "hotpath: error: ").
TEST(CapiModel, MessagesAreTheClis) {
  TempDir dir;
  const std::string corrupt = dir.file("corrupt.safetensors");
  std::ofstream(corrupt, std::ios::binary) << std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13);
  for (const std::string& path : {std::string("/nonexistent/model.safetensors"), corrupt, std::string("no_such_zoo")}) {
    SCOPED_TRACE(path);
    hotpath_model* m = nullptr;
    EXPECT_EQ(hotpath_model_open(path.c_str(), nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ("hotpath: error: " + last_error() + "\n", cli_stderr(dir, "info --model " + path));
  }
}

// ---- engines: options ----------------------------------------------------------------------------

TEST(CapiEngine, OpenErrors) {
  const ModelPtr m = open_model(golden_model("tiny"));
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.window = 5;
  hotpath_engine* e = nullptr;
  EXPECT_EQ(hotpath_engine_open(m.get(), &o, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_open: out is NULL");
  expect_open_fails(nullptr, &o, HOTPATH_ERROR_INVALID_ARGUMENT, "hotpath_engine_open: model is NULL");

  auto with = [&](auto change) {
    hotpath_engine_options c = o;
    change(c);
    return c;
  };
  auto bad = [&](auto change, hotpath_status status, const std::string& needle) {
    const hotpath_engine_options c = with(change);
    expect_open_fails(m.get(), &c, status, needle);
  };
  const std::string first_layout = std::to_string(offsetof(hotpath_engine_options, variant) + sizeof(const char*));
  bad([](auto& c) { c.struct_size = 0; }, HOTPATH_ERROR_INVALID_ARGUMENT,
      "options->struct_size is 0, expected " + std::to_string(sizeof(hotpath_engine_options)) +
          " (sizeof(hotpath_engine_options), or at least " + first_layout + " from an older header");
  bad([](auto& c) { c.struct_size = 8; }, HOTPATH_ERROR_INVALID_ARGUMENT, "options->struct_size is 8");
  // One byte short of the first layout: no header ever had that size.
  bad([](auto& c) { c.struct_size = offsetof(hotpath_engine_options, variant) + sizeof(const char*) - 1; },
      HOTPATH_ERROR_INVALID_ARGUMENT, "or at least " + first_layout);
  // Garbage (an uninitialised struct) is refused before anything beyond the struct is read.
  bad([](auto& c) { c.struct_size = size_t(1) << 40; }, HOTPATH_ERROR_INVALID_ARGUMENT,
      "options->struct_size is " + std::to_string(size_t(1) << 40));
  bad([](auto& c) { c.backend = "gpu"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "gpu");
  bad([](auto& c) { c.precision = "fp8"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "fp8");
  bad([](auto& c) { c.precision = "fp16"; }, HOTPATH_ERROR_UNSUPPORTED, "fp16");  // not a cpu precision
  bad([](auto& c) { c.mode = "sliding"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "sliding");
  bad([](auto& c) { c.cpuset = "a-b"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "a-b");
  bad([](auto& c) { c.window = -1; }, HOTPATH_ERROR_INVALID_ARGUMENT, "-1");
  bad([](auto& c) { c.window = hotpath::kMaxWindow + 1; }, HOTPATH_ERROR_INVALID_ARGUMENT,
      std::to_string(hotpath::kMaxWindow + 1));
  bad([](auto& c) { c.fallback = "gpu"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "gpu");
  bad([](auto& c) { c.timeout_us = -5; }, HOTPATH_ERROR_INVALID_ARGUMENT, "timeout");
  bad([](auto& c) { c.timeout_us = std::numeric_limits<double>::quiet_NaN(); }, HOTPATH_ERROR_INVALID_ARGUMENT,
      "timeout");
  // No window: the golden model has none in its metadata.
  bad([](auto& c) { c.window = 0; }, HOTPATH_ERROR_INVALID_ARGUMENT, "window");
  // An unknown kernel family is bad input named with the choices, for cuda too: refused before any
  // device is looked for (without one, cuda would otherwise be HOTPATH_ERROR_UNSUPPORTED).
  for (const char* backend : {"cpu", "cuda", "auto"})
    bad([&](auto& c) { c.backend = backend; c.kernel = "bogus"; }, HOTPATH_ERROR_INVALID_ARGUMENT,
        "unknown cuda kernel 'bogus' (valid: auto");
  bad([](auto& c) { c.kernel = "grid"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "kernel");  // cpu has none
  // hybrid: the cpu's critical step, so the cpu's precisions and no cuda kernel family, refused before any GPU
  bad([](auto& c) { c.backend = "hybrid"; c.kernel = "grid"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "backend hybrid has no kernel");
  bad([](auto& c) { c.backend = "hybrid"; c.precision = "fp16"; }, HOTPATH_ERROR_UNSUPPORTED, "fp16");
  // Every choice is read by its option's one name table: the same names, and the same refusal, as the
  // CLI's flags and Python's keywords.
  bad([](auto& c) { c.fallback = "gpu"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "unknown fallback 'gpu' (valid: none or cpu)");
  bad([](auto& c) { c.variant = "warp"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "unknown cuda variant 'warp' (valid: auto, smem or regs)");
  bad([](auto& c) { c.backend = "gpu"; }, HOTPATH_ERROR_INVALID_ARGUMENT, "unknown backend 'gpu' (valid: auto, ref, cpu, cuda or hybrid)");
}

// `kernel` reaches the backend's options as given ("auto", the default, is the one a cpu takes), and
// `cpu_options` the cpu backend (its facts say what it was made with); ref refuses cpu_options.
TEST(CapiEngine, KernelAndCpuOptionsReachTheBackend) {
  const ModelPtr m = open_model(golden_model("tiny"));
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.window = 5;
  o.kernel = "auto";
  o.cpu_options = "isa=generic,prefetch=0,rewarm=0";
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
  const EnginePtr engine(e);
  EXPECT_EQ(e->engine.backend().options().gpu.kernel, hotpath::CudaKernel::automatic);
  EXPECT_EQ(e->engine.backend().facts().at("cpu_options"), "isa=generic,bf16=auto,amx=auto,int8_act=16,prefetch=0,rewarm=0,hugepages=1,crit_cores=auto,pre_split=auto,pre_cores=auto,pre_row_cores=auto");
  EXPECT_EQ(e->engine.backend().variant(), "generic-fp32");
  o.cpu_options = "isa=generic";
  o.backend = "ref";
  o.kernel = nullptr;
  expect_open_fails(m.get(), &o, HOTPATH_ERROR_INVALID_ARGUMENT, "--cpu-options is for the cpu backend");
  // batch_rows: cuda's; range-checked, refused for cpu
  o.cpu_options = nullptr;
  o.backend = "cpu";
  o.batch_rows = 4096;
  expect_open_fails(m.get(), &o, HOTPATH_ERROR_INVALID_ARGUMENT, "backend cpu has no batch chunks");
  o.batch_rows = -5;
  expect_open_fails(m.get(), &o, HOTPATH_ERROR_INVALID_ARGUMENT, "batch rows -5 is outside 1..65536");
}

TEST(CapiEngine, OptionsOfALaterVersion) {
  const ModelPtr m = open_model(golden_model("tiny"));
  struct Later {
    hotpath_engine_options known;
    double unknown_field;
  } later;
  std::memset(&later, 0, sizeof later);
  later.known.struct_size = sizeof later;
  later.known.backend = "cpu";
  later.known.window = 5;
  // An unknown field left at zero (its default) is fine...
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &later.known, &e), HOTPATH_OK) << last_error();
  hotpath_engine_close(e);
  // ...one that is set asks for something this library cannot do.
  later.unknown_field = 1.0;
  expect_open_fails(m.get(), &later.known, HOTPATH_ERROR_UNSUPPORTED, "does not know");
}

// A caller built against the first header (before `scaler` and `no_warm`) passes its
// smaller struct: it opens, and the fields its size does not cover are never read (they take their
// defaults, whatever lies in memory after the struct).
TEST(CapiEngine, OptionsOfAnOlderVersion) {
  const ModelPtr m = open_model(golden_model("tiny"));
  // The first layout, as that header declared it.
  struct FirstLayout {
    size_t struct_size;
    const char* backend;
    const char* precision;
    const char* mode;
    int window;
    int device;
    const char* cpuset;
    double timeout_us;
    const char* fallback;
    const char* variant;
  };
  static_assert(sizeof(FirstLayout) <= offsetof(hotpath_engine_options, scaler));
  // Laid over a full struct whose later fields hold values that would fail or change the open if read.
  hotpath_engine_options storage = HOTPATH_ENGINE_OPTIONS_INIT;
  storage.scaler = "bogus";
  storage.no_warm = 1;
  FirstLayout old{};
  old.struct_size = sizeof old;
  old.backend = "cpu";
  old.mode = "streaming";
  std::memcpy(&storage, &old, sizeof old);
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &storage, &e), HOTPATH_OK) << last_error();
  const EnginePtr engine(e);
  hotpath_engine_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_engine_get_info(e, &info), HOTPATH_OK) << last_error();
  EXPECT_STREQ(info.backend, "cpu");
  EXPECT_STREQ(info.mode, "streaming");
  EXPECT_STREQ(info.scaler, "none");   // the default, not "bogus"
  EXPECT_GT(info.warm_ticks, 0);       // warmed: no_warm was past the caller's size
  EXPECT_EQ(info.warm_ticks, e->engine.warm_up().ticks);

  // A size that ends inside a field (no layout's) defaults that field too.
  hotpath_engine_options split = HOTPATH_ENGINE_OPTIONS_INIT;
  split.backend = "cpu";
  split.mode = "streaming";
  split.scaler = "bogus";
  split.no_warm = 1;
  split.struct_size = offsetof(hotpath_engine_options, scaler) + sizeof(const char*) / 2;
  ASSERT_EQ(hotpath_engine_open(m.get(), &split, &e), HOTPATH_OK) << last_error();
  hotpath_engine_close(e);
  // The size up to and including `scaler` reads it (and refuses it), but not no_warm.
  split.struct_size = offsetof(hotpath_engine_options, scaler) + sizeof(const char*);
  expect_open_fails(m.get(), &split, HOTPATH_ERROR_INVALID_ARGUMENT, "unknown scaler 'bogus'");
  split.scaler = "none";
  ASSERT_EQ(hotpath_engine_open(m.get(), &split, &e), HOTPATH_OK) << last_error();
  const EnginePtr warmed(e);
  EXPECT_GT(warmed->engine.warm_up().ticks, 0);

  // The second layout ended with no_warm: `kernel`, past it, is never read.
  hotpath_engine_options second = HOTPATH_ENGINE_OPTIONS_INIT;
  second.backend = "cpu";
  second.mode = "streaming";
  second.kernel = "bogus";
  second.struct_size = offsetof(hotpath_engine_options, kernel);  // that header's sizeof, padding included
  ASSERT_EQ(hotpath_engine_open(m.get(), &second, &e), HOTPATH_OK) << last_error();
  EXPECT_EQ(e->engine.backend().options().gpu.kernel, hotpath::CudaKernel::automatic);
  hotpath_engine_close(e);
  second.struct_size = sizeof second;
  expect_open_fails(m.get(), &second, HOTPATH_ERROR_INVALID_ARGUMENT, "unknown cuda kernel 'bogus'");

  // The third layout ended with `kernel`: `cpu_options`, past it, is never read.
  hotpath_engine_options third = HOTPATH_ENGINE_OPTIONS_INIT;
  third.backend = "cpu";
  third.mode = "streaming";
  third.cpu_options = "isa=bogus";
  third.struct_size = offsetof(hotpath_engine_options, cpu_options);
  ASSERT_EQ(hotpath_engine_open(m.get(), &third, &e), HOTPATH_OK) << last_error();
  EXPECT_FALSE(e->engine.backend().options().cpu.has_value());
  hotpath_engine_close(e);
  third.struct_size = sizeof third;
  expect_open_fails(m.get(), &third, HOTPATH_ERROR_INVALID_ARGUMENT, "isa=bogus (isa takes auto, avx512, avx2, neon, sve or generic)");

  // The fourth layout ended with `cpu_options`: `batch_rows`, past it, is never read.
  hotpath_engine_options fourth = HOTPATH_ENGINE_OPTIONS_INIT;
  fourth.backend = "cpu";
  fourth.mode = "streaming";
  fourth.batch_rows = 128;
  fourth.struct_size = offsetof(hotpath_engine_options, batch_rows);
  ASSERT_EQ(hotpath_engine_open(m.get(), &fourth, &e), HOTPATH_OK) << last_error();
  EXPECT_EQ(e->engine.backend().options().gpu.batch_rows, 0);
  hotpath_engine_close(e);
  fourth.struct_size = sizeof fourth;
  expect_open_fails(m.get(), &fourth, HOTPATH_ERROR_INVALID_ARGUMENT, "backend cpu has no batch chunks");

  // An info struct of the first layout: its fields written, nothing after them.
  hotpath_engine_info old_info;
  std::memset(&old_info, 0xab, sizeof old_info);
  old_info.struct_size = offsetof(hotpath_engine_info, scaler);
  ASSERT_EQ(hotpath_engine_get_info(engine.get(), &old_info), HOTPATH_OK) << last_error();
  EXPECT_STREQ(old_info.backend, "cpu");
  EXPECT_EQ(old_info.input_size, 4);
  const auto* tail = reinterpret_cast<const unsigned char*>(&old_info) + offsetof(hotpath_engine_info, scaler);
  for (size_t i = 0; i < sizeof(hotpath_engine_info) - offsetof(hotpath_engine_info, scaler); ++i)
    ASSERT_EQ(tail[i], 0xab) << "byte " << i << " past the caller's struct was written";
}

// `scaler` (the CLI's --scaler) and the resolved choice in the info.
TEST(CapiEngine, Scaler) {
  // tiny with a fixed input scaler, as `hotpath scaler fit` would store it.
  hotpath::Model scaled = hotpath::open_model(golden_model("tiny"));
  scaled.input_scaler = hotpath::InputNormalization{{0.5, -1.0, 0.25, 2.0}, {2.0, 0.5, 1.5, 3.0}, ""};
  const hotpath_model with_scaler{scaled};
  const ModelPtr without = open_model(golden_model("tiny"));
  const std::vector<float> x = series(40, 4, 3);
  const size_t T = 40;

  // The C ABI's outputs and resolved choice against the C++ engine with the same scaler.
  auto check = [&](const hotpath_model* m, const char* scaler, const char* resolved) {
    SCOPED_TRACE(scaler ? scaler : "NULL");
    hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
    o.backend = "cpu";
    o.mode = "streaming";
    o.scaler = scaler;
    hotpath_engine* e = nullptr;
    EXPECT_EQ(hotpath_engine_open(m, &o, &e), HOTPATH_OK) << last_error();
    const EnginePtr engine(e);
    if (!e) return std::vector<float>{};
    hotpath_engine_info info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(hotpath_engine_get_info(e, &info), HOTPATH_OK);
    EXPECT_STREQ(info.scaler, resolved);
    std::vector<float> out(T);
    EXPECT_EQ(hotpath_engine_run(e, x.data(), T, x.size(), out.data(), out.size()), HOTPATH_OK) << last_error();
    hotpath::EngineOptions cpp_options;
    cpp_options.backend = hotpath::BackendKind::cpu;
    cpp_options.mode = hotpath::Mode::streaming;
    cpp_options.scaler = hotpath::parse_scaler(resolved);
    hotpath::Engine cpp(m->model, cpp_options);
    std::vector<float> expected(T);
    cpp.run(x, T, expected);
    EXPECT_EQ(out, expected);
    return out;
  };
  const auto by_default = check(&with_scaler, nullptr, "model");
  EXPECT_EQ(check(&with_scaler, "", "model"), by_default);
  EXPECT_EQ(check(&with_scaler, "model", "model"), by_default);
  EXPECT_NE(check(&with_scaler, "none", "none"), by_default);
  const auto rolling = check(&with_scaler, "rolling:5", "rolling:5");
  EXPECT_NE(rolling, by_default);
  EXPECT_EQ(check(without.get(), "rolling:5", "rolling:5"), rolling);  // the file's scaler plays no part
  EXPECT_EQ(check(without.get(), nullptr, "none"), check(without.get(), "none", "none"));

  // Refusals: the CLI's one line, INVALID_ARGUMENT.
  TempDir dir;
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.mode = "streaming";
  const std::string tiny = golden_model("tiny");
  for (const char* bad : {"bogus", "rolling:1", "rolling:", "rolling:x", "Model", "rolling:1000001"}) {
    SCOPED_TRACE(bad);
    o.scaler = bad;
    const bool bad_n = std::string(bad) == "rolling:1" || std::string(bad) == "rolling:1000001";
    expect_open_fails(without.get(), &o, HOTPATH_ERROR_INVALID_ARGUMENT,
                      (bad_n ? "scaler '" : "unknown scaler '") + std::string(bad) + (bad_n ? "': N must be" : "'"));
    EXPECT_EQ("hotpath: error: " + last_error() + "\n",
              cli_stderr(dir, "bench --model " + tiny + " --backend cpu --mode streaming --ticks 10 --scaler " + bad));
  }
  o.scaler = "model";
  expect_open_fails(without.get(), &o, HOTPATH_ERROR_INVALID_ARGUMENT, "carries no input scaler");
  EXPECT_EQ("hotpath: error: " + last_error() + "\n",
            cli_stderr(dir, "bench --model " + tiny + " --backend cpu --mode streaming --ticks 10 --scaler model"));
}

// no_warm: the engine opens cold (no synthetic ticks) and answers exactly as a warmed one.
TEST(CapiEngine, NoWarm) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  const std::vector<float> x = series(30, 16, 1);
  std::vector<std::vector<float>> outputs;
  for (int no_warm : {0, 1}) {
    SCOPED_TRACE(no_warm);
    hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
    o.backend = "cpu";
    o.window = 7;
    o.no_warm = no_warm;
    hotpath_engine* e = nullptr;
    ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
    const EnginePtr engine(e);
    hotpath_engine_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(hotpath_engine_get_info(e, &info), HOTPATH_OK);
    if (no_warm) {
      EXPECT_EQ(info.warm_ticks, 0);
      EXPECT_EQ(info.warm_seconds, 0.0);
    } else {
      EXPECT_GE(info.warm_ticks, hotpath::test_support::warm_cut_by_budget(info.warm_seconds) ? hotpath::engine::kMinWarmTicks
                                                                                                : hotpath::engine::kWarmTicks);
      EXPECT_GT(info.warm_seconds, 0.0);
    }
    int64_t ticks = -1;
    ASSERT_EQ(hotpath_engine_ticks(e, &ticks), HOTPATH_OK);
    EXPECT_EQ(ticks, 0);  // the warm-up's ticks are not the caller's
    outputs.emplace_back(30 * 4);
    ASSERT_EQ(hotpath_engine_run(e, x.data(), 30, x.size(), outputs.back().data(), outputs.back().size()), HOTPATH_OK);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

TEST(CapiEngine, NullOptionsAreTheDefaults) {
  const ModelPtr m = open_model("lstm_s");  // metadata window 50
  hotpath_engine* e = nullptr;
  // auto: cpu here or cuda on a GPU machine; only the defaults that hold everywhere are checked.
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
  const EnginePtr engine(e);
  hotpath_engine_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_engine_get_info(e, &info), HOTPATH_OK);
  EXPECT_STREQ(info.backend, "cpu");
  EXPECT_STREQ(info.mode, "window");
  EXPECT_EQ(info.window, 50);
  EXPECT_STREQ(info.precision, "fp32");
  EXPECT_STREQ(info.choice_note, "");
  EXPECT_EQ(info.input_size, 32);
  EXPECT_EQ(info.output_size, 1);
  EXPECT_FALSE(std::string(info.variant).empty());
}

TEST(CapiEngine, InfoMatchesTheEngine) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  for (const char* backend : {"ref", "cpu"}) {
    for (const char* mode : {"window", "streaming"}) {
      SCOPED_TRACE(std::string(backend) + " " + mode);
      const EnginePtr e = open_engine(m.get(), {backend, nullptr, mode, 7});
      ASSERT_TRUE(e);
      hotpath_engine_info info{};
      info.struct_size = sizeof info;
      ASSERT_EQ(hotpath_engine_get_info(e.get(), &info), HOTPATH_OK);
      const hotpath::Engine& cpp = e->engine;
      EXPECT_EQ(info.backend, cpp.backend_name());
      EXPECT_EQ(info.variant, cpp.variant());
      EXPECT_STREQ(info.precision, hotpath::precision_name(cpp.precision()));
      EXPECT_STREQ(info.mode, mode);
      EXPECT_EQ(info.window, std::string(mode) == "window" ? 7 : 1);
      EXPECT_EQ(info.input_size, 16);
      EXPECT_EQ(info.output_size, 4);
    }
  }
  const EnginePtr bf16 = open_engine(m.get(), {"cpu", "bf16", "streaming", 0});
  hotpath_engine_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(hotpath_engine_get_info(bf16.get(), &info), HOTPATH_OK);
  EXPECT_STREQ(info.precision, "bf16");
  EXPECT_EQ(hotpath_engine_get_info(nullptr, &info), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_get_info: engine is NULL");
  EXPECT_EQ(hotpath_engine_get_info(bf16.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_get_info: info is NULL");
  // Shorter than the first layout (which ended with choice_note): refused, nothing written.
  const size_t too_short = offsetof(hotpath_engine_info, choice_note) + sizeof(const char*) - 1;
  info.struct_size = too_short;
  EXPECT_EQ(hotpath_engine_get_info(bf16.get(), &info), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "info->struct_size is " + std::to_string(too_short))) << last_error();
}

TEST(CapiEngine, ModelMayBeClosedFirst) {
  hotpath_model* m = nullptr;
  ASSERT_EQ(hotpath_model_open(golden_model("tiny").c_str(), nullptr, nullptr, &m), HOTPATH_OK);
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.mode = "streaming";
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m, &o, &e), HOTPATH_OK) << last_error();
  hotpath_model_close(m);
  const std::vector<float> x = series(1, 4, 0);
  float out = 0;
  EXPECT_EQ(hotpath_engine_step(e, x.data(), x.size(), &out, 1), HOTPATH_OK) << last_error();
  hotpath_engine_close(e);
}

// ---- engines: ticks ------------------------------------------------------------------------------

TEST(CapiEngine, StepErrors) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "streaming", 0});
  std::vector<float> x(16, 0.5f), out(4);
  EXPECT_EQ(hotpath_engine_step(nullptr, x.data(), 16, out.data(), 4), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_step: engine is NULL");
  EXPECT_EQ(hotpath_engine_step(e.get(), nullptr, 16, out.data(), 4), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_step: x is NULL");
  EXPECT_EQ(hotpath_engine_step(e.get(), x.data(), 16, nullptr, 4), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_step: out is NULL");
  EXPECT_EQ(hotpath_engine_step(e.get(), x.data(), 15, out.data(), 4), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_step: input_len is 15, expected 16 (the model's input size I)");
  EXPECT_EQ(hotpath_engine_step(e.get(), x.data(), 16, out.data(), 1), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_step: output_len is 1, expected 4 (the model's output size O)");
  int64_t ticks = -1;
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &ticks), HOTPATH_OK);
  EXPECT_EQ(ticks, 0);  // none of the refused calls consumed a tick
  EXPECT_EQ(hotpath_engine_ticks(nullptr, &ticks), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_ticks(e.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_ticks: ticks is NULL");
  EXPECT_EQ(hotpath_engine_reset(nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_reset: engine is NULL");
}

// Live swap through the C ABI: lstm_s's engine takes lstm_m (same I and O, another H and L) between
// ticks; the tick after the next is lstm_m's, bit-identical to an engine that served lstm_m from the
// start; the state names the answering model; a model of another input size is refused by name.
TEST(CapiEngine, SwapBetweenTicks) {
  const ModelPtr s = open_model("lstm_s"), m = open_model("lstm_m"), v = open_model("vollo_tiny");
  char id_s[17] = {}, id_m[17] = {};
  ASSERT_EQ(hotpath_model_id(s.get(), id_s), HOTPATH_OK);
  ASSERT_EQ(hotpath_model_id(m.get(), id_m), HOTPATH_OK);
  EXPECT_EQ(std::strlen(id_s), 16u);
  EXPECT_STRNE(id_s, id_m);
  const Opts opts{"cpu", "fp32", "window", 10};
  const EnginePtr e = open_engine(s.get(), opts), fresh = open_engine(m.get(), opts);
  const int T = 25, N = 15;
  std::vector<float> x(32), z(1), zf(1);
  for (int t = 0; t < T + N; ++t) {
    for (int i = 0; i < 32; ++i) x[size_t(i)] = float(std::sin(0.37 * t + 0.11 * i));
    if (t == T) {
      hotpath_swap_options o = HOTPATH_SWAP_OPTIONS_INIT;
      ASSERT_EQ(hotpath_engine_swap(e.get(), m.get(), &o), HOTPATH_OK) << last_error();
      hotpath_swap_state st{};
      ASSERT_EQ(hotpath_engine_swap_state(e.get(), &st), HOTPATH_OK);
      EXPECT_EQ(st.pending, 1);  // ready, waiting for its tick
    }
    ASSERT_EQ(hotpath_engine_step(e.get(), x.data(), 32, z.data(), 1), HOTPATH_OK) << last_error();
    ASSERT_EQ(hotpath_engine_step(fresh.get(), x.data(), 32, zf.data(), 1), HOTPATH_OK) << last_error();
    hotpath_swap_state st{};
    ASSERT_EQ(hotpath_engine_swap_state(e.get(), &st), HOTPATH_OK);
    EXPECT_STREQ(st.answering_model_id, t > T ? id_m : id_s) << t;
    if (t > T) EXPECT_EQ(std::memcmp(z.data(), zf.data(), sizeof(float)), 0) << t;
    EXPECT_EQ(st.swaps, t >= T ? 1 : 0) << t;  // switched at the end of tick T
    EXPECT_EQ(st.pending, 0) << t;
  }
  EXPECT_EQ(hotpath_engine_swap(e.get(), v.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "takes 128 inputs a tick, the serving one 32")) << last_error();
  EXPECT_EQ(hotpath_engine_swap(nullptr, m.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_swap: engine is NULL");
  EXPECT_EQ(hotpath_engine_swap(e.get(), nullptr, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  hotpath_swap_options bad = HOTPATH_SWAP_OPTIONS_INIT;
  bad.struct_size = 4;
  EXPECT_EQ(hotpath_engine_swap(e.get(), m.get(), &bad), HOTPATH_ERROR_INVALID_ARGUMENT);
  bad = HOTPATH_SWAP_OPTIONS_INIT;
  bad.precision = "fp99";
  EXPECT_EQ(hotpath_engine_swap(e.get(), m.get(), &bad), HOTPATH_ERROR_INVALID_ARGUMENT);
  bad = HOTPATH_SWAP_OPTIONS_INIT;
  bad.warm_ticks = 3;  // window mode has nothing to warm
  EXPECT_EQ(hotpath_engine_swap(e.get(), m.get(), &bad), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "warm ticks are for streaming mode")) << last_error();
  // a swap to another precision: get_info says so, and what it said before stays readable
  hotpath_engine_info before{};
  before.struct_size = sizeof before;
  ASSERT_EQ(hotpath_engine_get_info(e.get(), &before), HOTPATH_OK);
  hotpath_swap_options bf = HOTPATH_SWAP_OPTIONS_INIT;
  bf.precision = "bf16";
  ASSERT_EQ(hotpath_engine_swap(e.get(), s.get(), &bf), HOTPATH_OK) << last_error();
  for (int k = 0; k < 2; ++k) ASSERT_EQ(hotpath_engine_step(e.get(), x.data(), 32, z.data(), 1), HOTPATH_OK);
  hotpath_engine_info after{};
  after.struct_size = sizeof after;
  ASSERT_EQ(hotpath_engine_get_info(e.get(), &after), HOTPATH_OK);
  EXPECT_STREQ(before.precision, "fp32");
  EXPECT_STREQ(after.precision, "bf16");
}

// A NaN or Inf tick is a tick error, and the state is exactly as before it: the outputs that follow
// equal those of an engine that never saw it.
TEST(CapiEngine, BadTickLeavesTheStateUnchanged) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  for (const char* mode : {"window", "streaming"}) {
    for (const char* backend : {"ref", "cpu"}) {
      SCOPED_TRACE(std::string(backend) + " " + mode);
      const EnginePtr hit = open_engine(m.get(), {backend, nullptr, mode, 6});
      const EnginePtr clean = open_engine(m.get(), {backend, nullptr, mode, 6});
      const std::vector<float> x = series(20, 16, 3);
      std::vector<float> out_hit(4), out_clean(4);
      for (size_t t = 0; t < 20; ++t) {
        if (t == 9 || t == 10) {
          std::vector<float> bad(x.begin() + long(t) * 16, x.begin() + long(t + 1) * 16);
          bad[5] = t == 9 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
          std::vector<float> untouched(4, 123.0f);
          EXPECT_EQ(hotpath_engine_step(hit.get(), bad.data(), 16, untouched.data(), 4), HOTPATH_ERROR_TICK);
          EXPECT_TRUE(contains(last_error(), t == 9 ? "NaN" : "Inf")) << last_error();
          EXPECT_TRUE(contains(last_error(), "tick " + std::to_string(t))) << last_error();
          int64_t ticks = 0;
          ASSERT_EQ(hotpath_engine_ticks(hit.get(), &ticks), HOTPATH_OK);
          EXPECT_EQ(ticks, int64_t(t));
        }
        ASSERT_EQ(hotpath_engine_step(hit.get(), x.data() + t * 16, 16, out_hit.data(), 4), HOTPATH_OK) << last_error();
        ASSERT_EQ(hotpath_engine_step(clean.get(), x.data() + t * 16, 16, out_clean.data(), 4), HOTPATH_OK);
        ASSERT_EQ(out_hit, out_clean) << "tick " << t;
      }
    }
  }
}

TEST(CapiEngine, RunErrors) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "window", 4});
  std::vector<float> x = series(10, 16, 1), out(10 * 4);
  EXPECT_EQ(hotpath_engine_run(nullptr, x.data(), 10, x.size(), out.data(), out.size()), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run: engine is NULL");
  EXPECT_EQ(hotpath_engine_run(e.get(), nullptr, 10, x.size(), out.data(), out.size()), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run: series is NULL");
  EXPECT_EQ(hotpath_engine_run(e.get(), x.data(), 10, x.size(), nullptr, out.size()), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run: out is NULL");
  EXPECT_EQ(hotpath_engine_run(e.get(), x.data(), 11, x.size(), out.data(), out.size()), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run: series_len is 160, expected 176 (ticks 11 x input size 16)");
  EXPECT_EQ(hotpath_engine_run(e.get(), x.data(), 10, x.size(), out.data(), 39), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run: output_len is 39, expected 40 (ticks 10 x output size 4)");
  const size_t huge = std::numeric_limits<size_t>::max() / 8;
  EXPECT_EQ(hotpath_engine_run(e.get(), x.data(), huge, x.size(), out.data(), out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "overflows")) << last_error();
  // Zero ticks: NULL buffers are fine (an empty std::vector's data() may be NULL), nothing is consumed.
  int64_t before = -1, after = -1;
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &before), HOTPATH_OK);
  EXPECT_EQ(hotpath_engine_run(e.get(), nullptr, 0, 0, nullptr, 0), HOTPATH_OK) << last_error();
  EXPECT_EQ(hotpath_engine_run_f64(e.get(), nullptr, 0, 0, nullptr, 0), HOTPATH_OK) << last_error();
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &after), HOTPATH_OK);
  EXPECT_EQ(after, before);
  std::vector<double> out64(40);
  EXPECT_EQ(hotpath_engine_run_f64(nullptr, x.data(), 10, x.size(), out64.data(), 40), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_f64: engine is NULL");
  EXPECT_EQ(hotpath_engine_run_f64(e.get(), nullptr, 10, x.size(), out64.data(), 40), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_f64: series is NULL");
  EXPECT_EQ(hotpath_engine_run_f64(e.get(), x.data(), 10, x.size(), nullptr, 40), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_f64: out is NULL");
  EXPECT_EQ(hotpath_engine_run_f64(e.get(), x.data(), 10, x.size() - 1, out64.data(), 40),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_f64: series_len is 159, expected 160 (ticks 10 x input size 16)");
  EXPECT_EQ(hotpath_engine_run_f64(e.get(), x.data(), 10, x.size(), out64.data(), 41), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_f64: output_len is 41, expected 40 (ticks 10 x output size 4)");
  int64_t ticks = -1;
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &ticks), HOTPATH_OK);
  EXPECT_EQ(ticks, 0);

  // A bad tick in the middle: the ticks before it are consumed and answered, then the run stops.
  x[6 * 16 + 2] = std::numeric_limits<float>::quiet_NaN();
  std::fill(out.begin(), out.end(), 0.0f);
  EXPECT_EQ(hotpath_engine_run(e.get(), x.data(), 10, x.size(), out.data(), out.size()), HOTPATH_ERROR_TICK);
  EXPECT_TRUE(contains(last_error(), "tick 6")) << last_error();
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &ticks), HOTPATH_OK);
  EXPECT_EQ(ticks, 6);
  const EnginePtr clean = open_engine(m.get(), {"cpu", nullptr, "window", 4});
  std::vector<float> expected(6 * 4);
  ASSERT_EQ(hotpath_engine_run(clean.get(), x.data(), 6, 6 * 16, expected.data(), expected.size()), HOTPATH_OK);
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 24), expected);
}

TEST(CapiEngine, RunBatchErrorsAndResults) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "batch", 5});
  const size_t B = 3, W = 5;
  const std::vector<float> x = series(B * W, 16, 2);
  std::vector<float> out(B * 4);
  EXPECT_EQ(hotpath_engine_run_batch(nullptr, x.data(), B, W, x.size(), out.data(), out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_batch: engine is NULL");
  EXPECT_EQ(hotpath_engine_run_batch(e.get(), nullptr, B, W, x.size(), out.data(), out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_batch: x is NULL");
  EXPECT_EQ(hotpath_engine_run_batch(e.get(), x.data(), B, W, x.size(), nullptr, out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_batch: out is NULL");
  EXPECT_EQ(hotpath_engine_run_batch(e.get(), x.data(), B, W + 1, x.size(), out.data(), out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(),
            "hotpath_engine_run_batch: input_len is 240, expected 288 (batch 3 x window 6 x input size 16)");
  EXPECT_EQ(hotpath_engine_run_batch(e.get(), x.data(), B, W, x.size(), out.data(), 4), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_run_batch: output_len is 4, expected 12 (batch 3 x output size 4)");
  EXPECT_EQ(hotpath_engine_run_batch(e.get(), x.data(), std::numeric_limits<size_t>::max(), 2, x.size(), out.data(),
                                     out.size()),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "overflows")) << last_error();

  ASSERT_EQ(hotpath_engine_run_batch(e.get(), x.data(), B, W, x.size(), out.data(), out.size()), HOTPATH_OK)
      << last_error();
  const auto ref = hotpath::reference::batch(m->model, x, B, W);
  EXPECT_LE(hotpath::reference::normalized_error(to_f64(out), ref), hotpath::error_bound(hotpath::Precision::fp32));
  std::vector<float> cpp(B * 4);
  e->engine.run_batch(x, B, W, cpp);
  EXPECT_EQ(out, cpp);
}

// hotpath_engine_backtest (host arrays): each series from zero state, as the engine's backtest; its length
// checks; the flags (an unknown bit refused; device arrays refused by name for host pointers: the check
// holds with or without a GPU, host memory is never GPU memory); run_batch_ex as run_batch.
TEST(CapiEngine, BacktestAndTheDeviceFlag) {
  const ModelPtr m = open_model(golden_model("multi_out"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "window", 5});
  const size_t S = 3, T = 11, I = 16, O = 4;
  const std::vector<float> x = series(S * T, I, 4);
  std::vector<float> out(S * T * O);
  EXPECT_EQ(hotpath_engine_backtest(e.get(), x.data(), S, T, x.size(), out.data(), out.size() - 1, HOTPATH_ARRAYS_IN_HOST),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_backtest: output_len is 131, expected 132 (3 series x 11 ticks x output size 4)");
  EXPECT_EQ(hotpath_engine_backtest(e.get(), x.data(), S, T + 1, x.size(), out.data(), out.size(), 0),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_backtest: input_len is 528, expected 576 (3 series x 12 ticks x input size 16)");
  EXPECT_EQ(hotpath_engine_backtest(e.get(), x.data(), S, T, x.size(), out.data(), out.size(), 6u),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_backtest: flags 6 holds bits that are not HOTPATH_ARRAYS_ON_DEVICE");
  EXPECT_EQ(hotpath_engine_backtest(e.get(), nullptr, S, T, x.size(), out.data(), out.size(), 0),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_backtest: series is NULL");
  EXPECT_EQ(hotpath_engine_backtest(e.get(), x.data(), S, T, x.size(), out.data(), out.size(), HOTPATH_ARRAYS_ON_DEVICE),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "backtest input: the pointer is not GPU memory")) << last_error();

  ASSERT_EQ(hotpath_engine_backtest(e.get(), x.data(), S, T, x.size(), out.data(), out.size(), HOTPATH_ARRAYS_IN_HOST),
            HOTPATH_OK)
      << last_error();
  std::vector<float> cpp(S * T * O);
  e->engine.backtest(x, S, T, std::span<float>(cpp));
  EXPECT_EQ(out, cpp);
  for (size_t s = 0; s < S; ++s) {  // each series alone, from zero state (the tick path: its own kernels)
    std::vector<float> one(T * O);
    e->engine.reset();
    e->engine.run(std::span<const float>(x).subspan(s * T * I, T * I), T, std::span<float>(one));
    const std::vector<float> part(out.begin() + long(s * T * O), out.begin() + long((s + 1) * T * O));
    EXPECT_LE(hotpath::reference::normalized_error(to_f64(part), to_f64(one)), hotpath::error_bound(hotpath::Precision::fp32))
        << "series " << s;
  }

  const EnginePtr b = open_engine(m.get(), {"cpu", nullptr, "batch", 5});
  const std::vector<float> w = series(2 * 5, I, 6);
  std::vector<float> z(2 * O), zx(2 * O);
  ASSERT_EQ(hotpath_engine_run_batch(b.get(), w.data(), 2, 5, w.size(), z.data(), z.size()), HOTPATH_OK);
  ASSERT_EQ(hotpath_engine_run_batch_ex(b.get(), w.data(), 2, 5, w.size(), zx.data(), zx.size(), 0), HOTPATH_OK);
  EXPECT_EQ(z, zx);
  EXPECT_EQ(hotpath_engine_run_batch_ex(b.get(), w.data(), 2, 5, w.size(), zx.data(), zx.size(), HOTPATH_ARRAYS_ON_DEVICE),
            HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "batch input: the pointer is not GPU memory")) << last_error();
}

TEST(CapiEngine, ResetStartsOver) {
  const ModelPtr m = open_model(golden_model("tiny"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "window", 5});
  const std::vector<float> x = series(12, 4, 5);
  std::vector<float> first(12), second(12);
  ASSERT_EQ(hotpath_engine_run(e.get(), x.data(), 12, x.size(), first.data(), first.size()), HOTPATH_OK);
  int64_t ticks = 0;
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &ticks), HOTPATH_OK);
  EXPECT_EQ(ticks, 12);
  ASSERT_EQ(hotpath_engine_reset(e.get()), HOTPATH_OK);
  ASSERT_EQ(hotpath_engine_ticks(e.get(), &ticks), HOTPATH_OK);
  EXPECT_EQ(ticks, 0);
  ASSERT_EQ(hotpath_engine_run(e.get(), x.data(), 12, x.size(), second.data(), second.size()), HOTPATH_OK);
  EXPECT_EQ(first, second);
}

TEST(CapiEngine, CountersAndFacts) {
  const ModelPtr m = open_model(golden_model("tiny"));
  const EnginePtr e = open_engine(m.get(), {"cpu", nullptr, "streaming", 0});
  const std::vector<float> x = series(3, 4, 0);
  std::vector<float> out(3);
  ASSERT_EQ(hotpath_engine_run(e.get(), x.data(), 3, x.size(), out.data(), out.size()), HOTPATH_OK);

  size_t count = 99;
  ASSERT_EQ(hotpath_engine_counters(e.get(), &count), HOTPATH_OK) << last_error();
  const auto expected = e->engine.counters();
  ASSERT_EQ(count, expected.size());
  size_t k = 0;
  for (const auto& [name, value] : expected) {
    const char* n = nullptr;
    double v = -1;
    ASSERT_EQ(hotpath_engine_counter(e.get(), k++, &n, &v), HOTPATH_OK);
    EXPECT_EQ(n, name);
    EXPECT_EQ(v, value);
  }
  const char* n = nullptr;
  double v = 0;
  EXPECT_EQ(hotpath_engine_counter(e.get(), count, &n, &v), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "hotpath_engine_counter: index " + std::to_string(count) +
                              " is out of range (the snapshot holds " + std::to_string(count) +
                              " counters; take one with hotpath_engine_counters)");
  EXPECT_EQ(hotpath_engine_counter(e.get(), 0, nullptr, &v), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_counter(e.get(), 0, &n, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_counter(nullptr, 0, &n, &v), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_counters(nullptr, &count), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_counters(e.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);

  ASSERT_EQ(hotpath_engine_facts(e.get(), &count), HOTPATH_OK) << last_error();
  const auto facts = e->engine.facts();
  ASSERT_EQ(count, facts.size());
  k = 0;
  for (const auto& [name, value] : facts) {
    const char* fn = nullptr;
    const char* fv = nullptr;
    ASSERT_EQ(hotpath_engine_fact(e.get(), k++, &fn, &fv), HOTPATH_OK);
    EXPECT_EQ(fn, name);
    EXPECT_EQ(fv, value);
  }
  const char* fv = nullptr;
  EXPECT_EQ(hotpath_engine_fact(e.get(), count, &n, &fv), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "out of range")) << last_error();
  EXPECT_EQ(hotpath_engine_fact(e.get(), 0, nullptr, &fv), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_fact(e.get(), 0, &n, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_facts(nullptr, &count), HOTPATH_ERROR_INVALID_ARGUMENT);
}

// ---- outputs against the engine and the golden cases ---------------------------------------------

struct GoldenCase {
  std::string name;
  const char* backend;
  const char* precision;
};

void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name << " " << c.backend << " " << (c.precision ? c.precision : "default");
}

class CapiGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CapiGolden, MatchesPyTorchAndTheEngine) {
  const GoldenCase& c = GetParam();
  const Golden g = load_golden(c.name);
  const ModelPtr m = open_model(golden_model(c.name));
  const size_t I = size_t(g.model.config.input_size), O = size_t(g.model.config.output_size), T = g.ticks;
  for (const char* mode : {"window", "streaming"}) {
    SCOPED_TRACE(mode);
    const bool window = std::string(mode) == "window";
    const EnginePtr by_run = open_engine(m.get(), {c.backend, c.precision, mode, g.window});
    const EnginePtr by_step = open_engine(m.get(), {c.backend, c.precision, mode, g.window});
    ASSERT_TRUE(by_run && by_step);
    std::vector<float> run_out(T * O), step_out(T * O);
    ASSERT_EQ(hotpath_engine_run(by_run.get(), g.inputs.data(), T, g.inputs.size(), run_out.data(), run_out.size()),
              HOTPATH_OK)
        << last_error();
    for (size_t t = 0; t < T; ++t)
      ASSERT_EQ(hotpath_engine_step(by_step.get(), g.inputs.data() + t * I, I, step_out.data() + t * O, O), HOTPATH_OK)
          << last_error();
    EXPECT_EQ(run_out, step_out);

    // The same engine options through the C++ engine: the same floats.
    hotpath::EngineOptions options;
    options.backend = hotpath::util::parse_name<hotpath::BackendKind>(c.backend);
    if (c.precision) options.precision = hotpath::parse_precision(c.precision);
    options.mode = hotpath::parse_mode(mode);
    options.window = g.window;
    hotpath::Engine cpp(g.model, options);
    std::vector<float> cpp_out(T * O);
    cpp.run(g.inputs, T, cpp_out);
    EXPECT_EQ(run_out, cpp_out);

    // float64 outputs: ref's exact answers (the others' widened), as the C++ engine gives them.
    const EnginePtr by_run_f64 = open_engine(m.get(), {c.backend, c.precision, mode, g.window});
    std::vector<double> f64_out(T * O), cpp_f64(T * O);
    ASSERT_EQ(hotpath_engine_run_f64(by_run_f64.get(), g.inputs.data(), T, g.inputs.size(), f64_out.data(),
                                     f64_out.size()),
              HOTPATH_OK)
        << last_error();
    hotpath::Engine cpp_for_f64(g.model, options);
    cpp_for_f64.run(g.inputs, T, std::span<double>(cpp_f64));
    EXPECT_EQ(f64_out, cpp_f64);

    // PyTorch's answers, within the precision's bound (docs/model.md): the float64 outputs exactly; the
    // float ones arrive rounded to float, which caps ref's precision at 2^-24 relative.
    const size_t first = window ? size_t(g.window - 1) : 0;
    const auto& expected = window ? g.window_expected : g.streaming_expected;
    auto error = [&](const std::vector<double>& got) {
      return hotpath::reference::normalized_error(std::span<const double>(got.data() + first * O, (T - first) * O),
                                                  expected);
    };
    EXPECT_LE(error(f64_out), hotpath::error_bound(cpp.precision())) << c.name << " " << c.backend;
    EXPECT_LE(error(to_f64(run_out)), std::max(hotpath::error_bound(cpp.precision()), 1.2e-7))
        << c.name << " " << c.backend;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CapiGolden,
                         // ref is slow on the larger cases (and has its own tests): tiny is enough here.
                         ::testing::Values(GoldenCase{"tiny", "ref", nullptr}, GoldenCase{"tiny", "cpu", "fp32"},
                                           GoldenCase{"multi_out", "cpu", "fp32"},
                                           GoldenCase{"multi_out", "cpu", "bf16"},
                                           GoldenCase{"small2x128", "cpu", "fp32"}),
                         [](const auto& info) {
                           return info.param.name + "_" + info.param.backend + "_" +
                                  (info.param.precision ? info.param.precision : "default");
                         });

// ---- int8 -----------------------------------------------------------------------------------------

// "int8" through the C ABI: within its per-model bound (backend.hpp: 1.5 x the error of float64
// arithmetic on the int8-rounded weights alone, never above 2e-3) against the float64 reference, and
// the same floats as the C++ engine.
TEST(CapiInt8, WithinItsBoundOnTheGoldenCases) {
  for (const std::string name : {"tiny", "multi_out", "small2x128"}) {
    const Golden g = load_golden(name);
    const ModelPtr m = open_model(golden_model(name));
    const size_t T = g.ticks, O = size_t(g.model.config.output_size);
    for (const char* mode : {"window", "streaming"}) {
      SCOPED_TRACE(name + " " + mode);
      const bool window = std::string(mode) == "window";
      const EnginePtr e = open_engine(m.get(), {"cpu", "int8", mode, g.window});
      ASSERT_TRUE(e);
      hotpath_engine_info info{};
      info.struct_size = sizeof info;
      ASSERT_EQ(hotpath_engine_get_info(e.get(), &info), HOTPATH_OK);
      EXPECT_STREQ(info.precision, "int8");
      EXPECT_TRUE(contains(info.variant, "int8")) << info.variant;
      std::vector<double> z(T * O);
      ASSERT_EQ(hotpath_engine_run_f64(e.get(), g.inputs.data(), T, g.inputs.size(), z.data(), z.size()), HOTPATH_OK)
          << last_error();
      auto reference = [&](const hotpath::Model& model) {
        return window ? hotpath::reference::sliding_window(model, g.inputs, T, g.window)
                      : hotpath::reference::streaming(model, g.inputs, T);
      };
      const auto exact = reference(g.model);
      const double rounding = hotpath::reference::normalized_error(reference(hotpath::int8_rounded(g.model)), exact);
      const double bound = hotpath::int8_error_bound(rounding);
      EXPECT_GT(rounding, 0.0);
      EXPECT_LE(hotpath::reference::normalized_error(z, exact), bound);

      hotpath::EngineOptions options;
      options.backend = hotpath::BackendKind::cpu;
      options.precision = hotpath::Precision::int8;
      options.mode = hotpath::parse_mode(mode);
      options.window = g.window;
      hotpath::Engine cpp(g.model, options);
      std::vector<double> expected(T * O);
      cpp.run(g.inputs, T, std::span<double>(expected));
      EXPECT_EQ(z, expected);
    }
  }
}

// ---- what each exception becomes ---------------------------------------------------------------

// A backend whose step throws what the test asks for.
class ThrowingBackend : public hotpath::Backend {
 public:
  ThrowingBackend(const hotpath::ModelConfig& config, std::function<void()> thrower)
      : Backend(config, options()), thrower_(std::move(thrower)) {}
  std::string name() const override { return "throwing"; }
  std::string variant() const override { return "test"; }
  hotpath::Precision precision() const override { return hotpath::Precision::fp32; }
  void step(std::span<const float>, std::span<float>) override { thrower_(); }
  void finish_precompute() override {}
  void reset() override { thrower_(); }
  long long ticks() const override { return 0; }
  std::map<std::string, double> counters() const override {
    thrower_();
    return {};
  }

 private:
  static hotpath::BackendOptions options() {
    hotpath::BackendOptions o;
    o.mode = hotpath::Mode::streaming;
    return o;
  }
  std::function<void()> thrower_;
};

// A set of instances: bad arguments and options refused by name, before any device is asked.
TEST(CapiInstances, BadArgumentsAreRefusedByName) {
  hotpath_model* m = nullptr;
  ASSERT_EQ(hotpath_model_open("lstm_s", nullptr, nullptr, &m), HOTPATH_OK) << hotpath_last_error();
  const std::unique_ptr<hotpath_model, void (*)(hotpath_model*)> model(m, hotpath_model_close);
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cuda";
  hotpath_instances_options io = HOTPATH_INSTANCES_OPTIONS_INIT;
  io.count = 2;
  hotpath_instances* set = reinterpret_cast<hotpath_instances*>(&io);  // must be overwritten with NULL
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, nullptr, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(set, nullptr);
  EXPECT_NE(std::string(hotpath_last_error()).find("instances is NULL"), std::string::npos) << hotpath_last_error();
  EXPECT_EQ(hotpath_instances_open(nullptr, &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  io.struct_size = 8;
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hotpath_last_error()).find("struct_size is 8"), std::string::npos) << hotpath_last_error();
  io = HOTPATH_INSTANCES_OPTIONS_INIT;
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hotpath_last_error()).find("count is 0"), std::string::npos) << hotpath_last_error();
  io.count = 2;
  io.sms_each = -1;
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  io.sms_each = 0;
  // Options the set cannot serve: named, as the CLI names them.
  o.backend = "cpu";
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hotpath_last_error()).find("need the cuda backend"), std::string::npos) << hotpath_last_error();
  o.backend = "cuda";
  io.isolation = "mps";
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hotpath_last_error()).find("unknown isolation 'mps'"), std::string::npos) << hotpath_last_error();
  EXPECT_EQ(set, nullptr);
  io.isolation = "shared";
  io.placement = "gpc";
  EXPECT_EQ(hotpath_instances_open(model.get(), &o, &io, &set), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hotpath_last_error()).find("unknown placement 'gpc' (valid: sm or block)"), std::string::npos) << hotpath_last_error();
  // The set's calls on NULL.
  size_t n = 7;
  EXPECT_EQ(hotpath_instances_count(nullptr, &n), HOTPATH_ERROR_INVALID_ARGUMENT);
  hotpath_engine* e = nullptr;
  EXPECT_EQ(hotpath_instances_engine(nullptr, 0, &e), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_instances_restart(nullptr, 0), HOTPATH_ERROR_INVALID_ARGUMENT);
  hotpath_instances_close(nullptr);
}

TEST(CapiErrors, EveryExceptionBecomesAStatus) {
  const hotpath::Model model = hotpath::open_model(golden_model("tiny"));
  struct Case {
    std::function<void()> thrower;
    hotpath_status status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[] { throw hotpath::TickError("tick 3: bad"); }, HOTPATH_ERROR_TICK, "tick 3: bad"},
      {[] { throw hotpath::UnsupportedError("no GPU"); }, HOTPATH_ERROR_UNSUPPORTED, "no GPU"},
      {[] { throw hotpath::BackendError("cuda backend: no answer to tick 5"); }, HOTPATH_ERROR_BACKEND,
       "cuda backend: no answer to tick 5"},
      {[] { throw hotpath::Error("bad input"); }, HOTPATH_ERROR_INVALID_ARGUMENT, "bad input"},
      {[] { throw std::bad_alloc(); }, HOTPATH_ERROR_OUT_OF_MEMORY, "out of memory"},
      {[] { throw std::logic_error("a bug"); }, HOTPATH_ERROR_INTERNAL, "internal error: a bug"},
      {[] { throw 42; }, HOTPATH_ERROR_INTERNAL, "internal error: an exception that is not a std::exception"},
      {[] { throw hotpath::Error("two\nlines"); }, HOTPATH_ERROR_INVALID_ARGUMENT, "two lines"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const EnginePtr e(new hotpath_engine(model, std::make_unique<ThrowingBackend>(model.config, c.thrower)));
    const std::vector<float> x(4, 0.0f);
    float out = 0;
    EXPECT_EQ(hotpath_engine_step(e.get(), x.data(), 4, &out, 1), c.status);
    EXPECT_EQ(last_error(), c.message);
    EXPECT_EQ(hotpath_engine_reset(e.get()), c.status);
    EXPECT_EQ(last_error(), c.message);
    size_t n = 0;
    EXPECT_EQ(hotpath_engine_counters(e.get(), &n), c.status);
    EXPECT_EQ(last_error(), c.message);
  }
}

// ---- tick telemetry ------------------------------------------------------------------------------

// Without options->metrics the snapshot is refused by name; with it, every answered tick of step and run
// is counted and timed, the quantiles ordered and the buckets cumulative, and a snapshot may be taken on
// another thread while one ticks.
TEST(CapiMetrics, OffIsRefusedOnCountsEveryTick) {
  const ModelPtr m = open_model(golden_model("tiny"));
  hotpath_metrics_snapshot s;
  std::memset(&s, 0xab, sizeof s);
  s.struct_size = sizeof s;
  {
    const EnginePtr off = open_engine(m.get(), {"cpu", nullptr, "streaming", 0});
    EXPECT_EQ(hotpath_engine_metrics(off.get(), &s), HOTPATH_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(last_error(),
              "hotpath_engine_metrics: this engine records no telemetry (open it with options->metrics = 1)");
    EXPECT_EQ(s.count, 0xababababababababull) << "a refused call writes nothing";
  }
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.mode = "streaming";
  o.no_warm = 1;
  o.metrics = 1;
  hotpath_engine* raw = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &raw), HOTPATH_OK) << last_error();
  const EnginePtr e(raw);
  EXPECT_EQ(hotpath_engine_metrics(nullptr, &s), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hotpath_engine_metrics(e.get(), nullptr), HOTPATH_ERROR_INVALID_ARGUMENT);
  s.struct_size = sizeof s - 1;
  EXPECT_EQ(hotpath_engine_metrics(e.get(), &s), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "snapshot->struct_size is " + std::to_string(sizeof s - 1))) << last_error();

  s.struct_size = sizeof s;
  ASSERT_EQ(hotpath_engine_metrics(e.get(), &s), HOTPATH_OK) << last_error();
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(std::isnan(s.p99_ns)) << "no tick, no quantile";
  char id[17] = {};
  ASSERT_EQ(hotpath_model_id(m.get(), id), HOTPATH_OK);
  EXPECT_STREQ(s.model_id, id);
  EXPECT_STREQ(s.backend, "cpu");

  // N ticks, step and run, while another thread takes snapshots.
  constexpr size_t kSteps = 200, kRun = 300, I = 4;
  const std::vector<float> x = series(kSteps + kRun, I, 3);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread scraper([&] {
    uint64_t last = 0;
    while (!done.load(std::memory_order_acquire)) {
      hotpath_metrics_snapshot r;
      r.struct_size = sizeof r;
      if (hotpath_engine_metrics(e.get(), &r) != HOTPATH_OK || r.count < last ||
          r.count != r.cumulative[HOTPATH_METRICS_BUCKETS - 1])
        ++bad;
      last = r.count;
    }
  });
  float out = 0;
  for (size_t t = 0; t < kSteps; ++t) ASSERT_EQ(hotpath_engine_step(e.get(), x.data() + t * I, I, &out, 1), HOTPATH_OK);
  std::vector<float> z(kRun);
  ASSERT_EQ(hotpath_engine_run(e.get(), x.data() + kSteps * I, kRun, kRun * I, z.data(), z.size()), HOTPATH_OK);
  done.store(true, std::memory_order_release);
  scraper.join();
  EXPECT_EQ(bad.load(), 0);

  ASSERT_EQ(hotpath_engine_metrics(e.get(), &s), HOTPATH_OK) << last_error();
  EXPECT_EQ(s.count, kSteps + kRun);
  EXPECT_EQ(s.answered, kSteps + kRun);
  EXPECT_EQ(s.lost + s.late + s.fallback + s.gpu_timeouts + s.swaps, 0u);
  EXPECT_GT(s.sum_ns, 0u);
  EXPECT_GT(s.p50_ns, 0);
  EXPECT_LE(s.p50_ns, s.p99_ns);
  EXPECT_LE(s.p99_ns, s.p999_ns);
  EXPECT_EQ(s.bucket_upper_ns[0], 128.0);
  EXPECT_TRUE(std::isinf(s.bucket_upper_ns[HOTPATH_METRICS_BUCKETS - 1]));
  for (int i = 1; i < HOTPATH_METRICS_BUCKETS; ++i) {
    EXPECT_LT(s.bucket_upper_ns[i - 1], s.bucket_upper_ns[i]);
    EXPECT_LE(s.cumulative[i - 1], s.cumulative[i]);
  }
  EXPECT_EQ(s.cumulative[HOTPATH_METRICS_BUCKETS - 1], s.count);
  // p99 lies inside the histogram: at most the bound of the first bucket holding 99% of the ticks.
  int b = 0;
  while (double(s.cumulative[b]) < 0.99 * double(s.count)) ++b;
  EXPECT_LE(s.p99_ns, s.bucket_upper_ns[b]);
  EXPECT_GE(s.p99_ns, b == 0 ? 0.0 : s.bucket_upper_ns[b - 1]);

  // Each distinct string is kept once, for as long as the engine is open.
  const std::string model_id = s.model_id;
  hotpath_metrics_snapshot again;
  again.struct_size = sizeof again;
  ASSERT_EQ(hotpath_engine_metrics(e.get(), &again), HOTPATH_OK);
  EXPECT_EQ(again.model_id, s.model_id) << "the same id, the same kept string";
  EXPECT_EQ(model_id, id);
}

// A caller built against the header before `swap_room` passes that layout's size (120 on 64-bit: its
// sizeof, the padding after metrics included): its padding bytes are never read as swap_room, so a cpu
// engine opens (swap_room is refused for cpu when it is set).
TEST(CapiSwap, OptionsOfTheLayoutBeforeSwapRoom) {
  const ModelPtr m = open_model(golden_model("tiny"));
  constexpr size_t kAlign = alignof(hotpath_engine_options);
  constexpr size_t kBefore = (offsetof(hotpath_engine_options, unused_padding2) + kAlign - 1) / kAlign * kAlign;
  static_assert(kBefore <= offsetof(hotpath_engine_options, swap_room));
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.mode = "streaming";
  o.no_warm = 1;
  o.unused_padding2 = 0x5a5a5a5a;  // an old caller's padding bytes: never read
  o.swap_room = 1;                 // past that caller's struct
  o.struct_size = kBefore;
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
  hotpath_engine_close(e);
  // This header's size reads swap_room: refused by name for the cpu backend.
  o.struct_size = sizeof o;
  EXPECT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(last_error()).find("swap_room is for cuda"), std::string::npos) << last_error();
}

// A caller built against the header before `metrics` passes that layout's size (its sizeof, padding
// included): the engine opens without telemetry, whatever its padding and the bytes after it hold.
TEST(CapiMetrics, OptionsOfTheLayoutBeforeMetrics) {
  const ModelPtr m = open_model(golden_model("tiny"));
  constexpr size_t kAlign = alignof(hotpath_engine_options);
  constexpr size_t kBeforeMetrics = (offsetof(hotpath_engine_options, unused_padding) + kAlign - 1) / kAlign * kAlign;
  static_assert(kBeforeMetrics <= offsetof(hotpath_engine_options, metrics));
  hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
  o.backend = "cpu";
  o.mode = "streaming";
  o.no_warm = 1;
  o.unused_padding = 0x5a5a5a5a;  // an old caller's padding bytes: never read
  o.metrics = 1;                  // past that caller's struct
  o.struct_size = kBeforeMetrics;
  hotpath_engine* e = nullptr;
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
  EXPECT_EQ(e->engine.metrics(), nullptr);
  hotpath_engine_close(e);
  // This header's size reads `metrics`; the padding field is still ignored.
  o.struct_size = sizeof o;
  ASSERT_EQ(hotpath_engine_open(m.get(), &o, &e), HOTPATH_OK) << last_error();
  const EnginePtr on(e);
  EXPECT_NE(on->engine.metrics(), nullptr);
  // A snapshot struct from a later header (larger): this library's fields are written, the rest left.
  struct Later {
    hotpath_metrics_snapshot known;
    uint64_t unknown_field;
  } later;
  std::memset(&later, 0xab, sizeof later);
  later.known.struct_size = sizeof later;
  ASSERT_EQ(hotpath_engine_metrics(on.get(), &later.known), HOTPATH_OK) << last_error();
  EXPECT_EQ(later.known.count, 0u);
  EXPECT_EQ(later.unknown_field, 0xababababababababull);
}

// ---- threads -------------------------------------------------------------------------------------

// Each thread sees its own last error; a success leaves it as it was.
TEST(CapiThreads, LastErrorIsPerThread) {
  const ModelPtr tiny = open_model(golden_model("tiny"));
  hotpath_model* m = nullptr;
  ASSERT_EQ(hotpath_model_open("/nonexistent/main-thread", nullptr, nullptr, &m), HOTPATH_ERROR_INVALID_ARGUMENT);
  const std::string main_error = last_error();
  ASSERT_TRUE(contains(main_error, "main-thread"));

  constexpr int kThreads = 8, kRounds = 200;
  std::atomic<int> mismatches{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, &mismatches, &go, &tiny] {
      if (std::string(hotpath_last_error()) != "") ++mismatches;  // nothing failed on this thread yet
      while (!go) std::this_thread::yield();
      for (int r = 0; r < kRounds; ++r) {
        const std::string path = "/nonexistent/thread-" + std::to_string(i) + "-round-" + std::to_string(r);
        hotpath_model* model = nullptr;
        if (hotpath_model_open(path.c_str(), nullptr, nullptr, &model) != HOTPATH_ERROR_INVALID_ARGUMENT) ++mismatches;
        std::this_thread::yield();
        if (!contains(hotpath_last_error(), path)) ++mismatches;
        // A success between: the error stays.
        hotpath_model_info info{};
        info.struct_size = sizeof info;
        if (hotpath_model_get_info(tiny.get(), &info) != HOTPATH_OK) ++mismatches;
        if (!contains(hotpath_last_error(), path)) ++mismatches;
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(last_error(), main_error);
}

// Many engines, one per thread, all opened from one model handle at once: each answers exactly as a
// lone engine does.
TEST(CapiThreads, ManyEnginesInParallel) {
  const Golden g = load_golden("multi_out");
  const ModelPtr m = open_model(golden_model("multi_out"));
  const size_t I = 16, O = 4, T = g.ticks;
  std::vector<float> expected(T * O);
  {
    const EnginePtr lone = open_engine(m.get(), {"cpu", nullptr, "window", g.window});
    ASSERT_EQ(hotpath_engine_run(lone.get(), g.inputs.data(), T, g.inputs.size(), expected.data(), expected.size()),
              HOTPATH_OK);
  }
  constexpr int kThreads = 8;
  std::vector<std::vector<float>> got(kThreads, std::vector<float>(T * O));
  std::vector<hotpath_status> status(kThreads, HOTPATH_ERROR_INTERNAL);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      hotpath_engine_options o = HOTPATH_ENGINE_OPTIONS_INIT;
      o.backend = "cpu";
      o.window = g.window;
      hotpath_engine* e = nullptr;
      status[i] = hotpath_engine_open(m.get(), &o, &e);
      if (status[i] != HOTPATH_OK) return;
      // Step by step for half the threads, whole runs for the others: both at once.
      for (int round = 0; round < 3 && status[i] == HOTPATH_OK; ++round) {
        hotpath_engine_reset(e);
        if (i % 2)
          status[i] = hotpath_engine_run(e, g.inputs.data(), T, g.inputs.size(), got[i].data(), got[i].size());
        else
          for (size_t t = 0; t < T && status[i] == HOTPATH_OK; ++t)
            status[i] = hotpath_engine_step(e, g.inputs.data() + t * I, I, got[i].data() + t * O, O);
      }
      hotpath_engine_close(e);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(status[i], HOTPATH_OK) << "thread " << i;
    EXPECT_EQ(got[i], expected) << "thread " << i;
  }
}

}  // namespace
