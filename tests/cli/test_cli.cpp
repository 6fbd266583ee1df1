// The `hotpath` executable end to end: golden reproduction, exit codes, one-line errors on bad input.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/golden.hpp"
#include "common/within_seconds.hpp"
#include "engine/warm.hpp"
#include "model/npy.hpp"
#include "model/safetensors.hpp"
#include "reference/reference.hpp"
#include "util/arch.hpp"
#include "util/progress_bar.hpp"
#include "util/threads.hpp"

namespace fs = std::filesystem;
namespace st = hotpath::safetensors;

namespace {

const std::string kGolden = HOTPATH_GOLDEN_DIR;

struct Result {
  int code;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hotpath_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  Result hotpath(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd = std::string(HOTPATH_BINARY) + " " + args + " >" + out + " 2>" + err + " </dev/null";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
  }

  // A bad-input run: exit 2 and exactly one line on stderr that contains `needle`.
  void expect_refused(const std::string& args, const std::string& needle) const {
    const Result r = hotpath(args);
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
  }

  void write_bytes(const std::string& p, const std::string& bytes) const {
    std::ofstream f(p, std::ios::binary);
    f << bytes;
  }

  fs::path dir_;
};

std::string golden_model(const std::string& n) { return kGolden + "/" + n + ".model.safetensors"; }
std::string golden_file(const std::string& n) { return kGolden + "/" + n + ".golden.safetensors"; }

}  // namespace

TEST_F(Cli, VersionAndHelp) {
  Result r = hotpath("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("hotpath"), std::string::npos);
  EXPECT_NE(r.out.find("GPU kernels: "), std::string::npos) << r.out;  // which GPUs this build serves
  // the usage line names the command, not the binary's path
  r = hotpath("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Usage: hotpath [OPTIONS] SUBCOMMAND"), std::string::npos) << r.out;
  for (const char* sub : {"models", "info", "run", "verify", "export", "bench"}) {
    r = hotpath(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("--"), std::string::npos) << sub;
  }
}

TEST_F(Cli, ImportPointsToThePythonPackage) {
  expect_refused("import --onnx m.onnx --out m.safetensors", "'hotpath import' is in the Python package");
}

TEST_F(Cli, ModelsListsTheZoo) {
  const Result r = hotpath("models");
  ASSERT_EQ(r.code, 0);
  for (const char* n : {"lstm_s", "lstm_m", "lstm_l", "vollo_tiny", "vollo_small", "vollo_med", "vollo_large",
                        "nv_small", "nv_medium", "nv_large"})
    EXPECT_NE(r.out.find(n), std::string::npos) << n;
  EXPECT_NE(r.out.find("215169"), std::string::npos);
  EXPECT_NE(r.out.find("16699105"), std::string::npos) << r.out;  // nv_large
}

TEST_F(Cli, InfoShowsDetectedShape) {
  const Result r = hotpath("info --model " + golden_model("multi_out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("input_size:   16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hidden_size:  64"), std::string::npos);
  EXPECT_NE(r.out.find("num_layers:   3"), std::string::npos);
  EXPECT_NE(r.out.find("output_size:  4"), std::string::npos);
  EXPECT_NE(r.out.find("lstm_prefix:  lstm."), std::string::npos);
  EXPECT_NE(r.out.find("head_prefix:  fc."), std::string::npos);
}

// A tensor the model does not use is named, on every command that takes --model; --ignore-tensors is
// the deliberate way round. Files that are not safetensors are named as what they are.
TEST_F(Cli, UnusedTensorsAndForeignFilesNamed) {
  const std::vector<st::OutTensor> tensors = hotpath::test_support::golden_with_mlp_head("tiny");
  const std::string mlp = path("mlp.safetensors");
  st::write_file(mlp, tensors, {});
  const std::string unused = mlp + ": tensors 'fc2.bias', 'fc2.weight' are not used by the model (nn.LSTM 'lstm.' -> "
                                   "nn.Linear 'fc.'); hotpath computes one nn.LSTM and one nn.Linear";
  expect_refused("info --model " + mlp, unused);
  expect_refused("verify --model " + mlp + " --golden " + golden_file("tiny"), unused);
  expect_refused("bench --model " + mlp + " --backend ref --ticks 10", unused);
  expect_refused("scaler fit --model " + mlp + " --inputs " + golden_file("tiny") + " --until 5 --out " +
                     path("scaled.safetensors"),
                 unused);
  const Result ok = hotpath("info --model " + mlp + " --ignore-tensors fc2.");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("head_prefix:  fc."), std::string::npos) << ok.out;
  EXPECT_EQ(hotpath("info --model " + mlp + " --ignore-tensors fc2.weight,fc2.bias").code, 0);
  expect_refused("info --model " + mlp + " --ignore-tensors fc2.,", "--ignore-tensors 'fc2.,' holds an empty name");
  expect_refused("info --model " + mlp + " --ignore-tensors fc2.,fc.bias",
                 "the tensors to ignore include 'fc.bias', which the model uses");
  expect_refused("info --model lstm_s --head-prefix fc.", "'lstm_s' is a zoo model, but a head prefix 'fc.' was given");
  expect_refused("info --model lstm_s --ignore-tensors fc2.", "'lstm_s' is a zoo model, but a tensor to ignore");

  write_bytes(path("model.pt"), std::string("PK\x03\x04\x14\x00\x08\x00", 8) + std::string(600, 'x'));
  expect_refused("info --model " + path("model.pt"),
                 path("model.pt") + ": is a PyTorch pickle (a torch.save zip archive), not safetensors: save the "
                                    "state_dict with safetensors.torch.save_file");
  write_bytes(path("model.onnx"), std::string("\x08\x07\x12\x07pytorch", 11) + std::string(600, 'x'));
  expect_refused("info --model " + path("model.onnx"),
                 path("model.onnx") + ": is an ONNX model, not safetensors: ONNX models are imported with "
                                      "hotpath.load(\"model.onnx\") in Python");
}

TEST_F(Cli, VerifyRefPassesEveryGoldenCase) {
  for (const char* n : {"tiny", "small2x128", "multi_out"}) {
    const Result r = hotpath("verify --model " + golden_model(n) + " --golden " + golden_file(n));
    EXPECT_EQ(r.code, 0) << n << r.out << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;  // one line per mode
    EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  }
}

// int8's bound is per model: verify measures what the int8-rounded weights alone do on the golden inputs,
// prints it beside the error, passes on the golden cases and exits 1 past the bound.
TEST_F(Cli, VerifyInt8MeasuresItsBound) {
  for (const char* n : {"tiny", "small2x128", "multi_out"}) {
    const Result r = hotpath("verify --model " + golden_model(n) + " --golden " + golden_file(n) +
                             " --backend cpu --precision int8");
    EXPECT_EQ(r.code, 0) << n << r.out << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
    EXPECT_NE(r.out.find("(int8)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1.5 x int8 weight rounding alone"), std::string::npos) << r.out;
  }
  // Expected outputs moved by 1e-3 (twice tiny's bound, far inside bf16's): FAIL, exit 1.
  const auto golden = st::File::open(golden_file("tiny"));
  std::vector<st::OutTensor> t;
  for (const auto& info : golden.tensors()) {
    std::vector<double> v = golden.read_f64(info);
    if (info.name == "streaming_expected") v[3] += 1e-3;
    t.push_back(st::make_f64(info.name, info.shape, v));
  }
  const std::string moved = path("moved.golden.safetensors");
  st::write_file(moved, t, golden.metadata());
  const Result r = hotpath("verify --model " + golden_model("tiny") + " --golden " + moved +
                           " --backend cpu --precision int8 --mode streaming");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  // The likeliest cause of an int8 failure is inputs that were never scaled: the one line says what to do.
  EXPECT_NE(r.err.find("int8 expects inputs scaled to about unit size"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--scaler rolling:N"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const Result fp32 = hotpath("verify --model " + golden_model("tiny") + " --golden " + moved +
                              " --backend cpu --precision fp32 --mode streaming");
  EXPECT_EQ(fp32.code, 1) << fp32.out << fp32.err;
  EXPECT_EQ(fp32.err.find("--scaler"), std::string::npos) << fp32.err;
}

// info says whether int8 would run on the slow portable kernels here; HOTPATH_CPU_ISA=generic forces
// them on any CPU (the detection itself is tested with injected features in test_cpu_int8).
TEST_F(Cli, InfoSaysWhetherInt8IsSlowHere) {
  const Result here = hotpath("info --model lstm_s");
  ASSERT_EQ(here.code, 0) << here.err;
  EXPECT_NE(here.out.find("cpu int8:     "), std::string::npos) << here.out;
  // and whether bf16's products run on AMX tiles (what this CPU has, as the backend detects it)
  EXPECT_NE(here.out.find(hotpath::arch::detect_isa().amx_bf16 && hotpath::arch::detect_isa().avx512_bf16
                              ? "cpu amx:      AMX-BF16 tiles"
                              : "cpu amx:      none here"),
            std::string::npos)
      << here.out;
  ::setenv("HOTPATH_CPU_AMX", "off", 1);  // the backend's own choice, the environment's options included
  const Result no_amx = hotpath("info --model lstm_s");
  ::unsetenv("HOTPATH_CPU_AMX");
  EXPECT_NE(no_amx.out.find("cpu amx:      none here"), std::string::npos) << no_amx.out;
  ::setenv("HOTPATH_CPU_ISA", "generic", 1);
  const Result slow = hotpath("info --model lstm_s");
  ::unsetenv("HOTPATH_CPU_ISA");
  ASSERT_EQ(slow.code, 0) << slow.err;
  EXPECT_NE(slow.out.find("cpu int8:     slow here: int8 runs on the portable kernels here (cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA)"),
            std::string::npos)
      << slow.out;
}

// bench --precision int8: the checker also runs the int8-rounded float64 model and the bound follows
// from its error on the same ticks.
TEST_F(Cli, BenchInt8MeasuresItsBound) {
  const std::string json = path("int8.json");
  for (const char* mode : {"window", "streaming"}) {
    const Result r = hotpath(std::string("bench --model lstm_s --backend cpu --precision int8 --ticks 300 --warmup 10 "
                                         "--check-every 3 --mode ") + mode + " --json " + json);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("= 1.5 x int8 weight rounding alone"), std::string::npos) << r.out;
    const auto e = nlohmann::json::parse(slurp(json))["error"];
    const double rounding = e["weight_rounding_error"].get<double>();
    EXPECT_GT(rounding, 1e-5) << mode;  // lstm_s's int8 weights move its outputs by ~3e-4
    EXPECT_DOUBLE_EQ(e["bound"].get<double>(), std::min(std::max(1.5 * rounding, 1e-5), 2e-3)) << mode;
    EXPECT_LE(e["normalized"].get<double>(), e["bound"].get<double>()) << mode;
    EXPECT_EQ(e["ticks_over_bound"], 0) << mode;
    EXPECT_TRUE(e.contains("bound_rule"));
  }
}

// Window mode's sustainable tick rate: bench measures it (1 / (mean answer + mean precompute)) and puts
// the estimate beside it; info prints the same estimate for the same cores. The plumbing only: how close
// an estimate comes to a measurement depends on the machine.
TEST_F(Cli, BenchAndInfoSayTheSustainableTickRate) {
  const std::vector<int> cores = hotpath::util::allowed_cores();
  const std::string cpuset = std::to_string(cores.front()) + (cores.size() > 1 ? "," + std::to_string(cores[1]) : "");
  const std::string json = path("rate.json");
  const Result r = hotpath("bench --model lstm_s --backend cpu --mode window --ticks 200 --warmup 10 --check-every 20 "
                           "--cpuset " + cpuset + " --json " + json);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto report = nlohmann::json::parse(slurp(json));
  const auto s = report["sustainable_tick_rate"];
  const double answer = report["latency_us"]["mean"].get<double>(), pre = report["precompute_us"]["mean"].get<double>();
  EXPECT_DOUBLE_EQ(s["hz"].get<double>(), 1e6 / (answer + pre));
  EXPECT_EQ(s["precompute_cores"], 1);
  EXPECT_EQ(s["precompute_inline"], cores.size() == 1);
  const double estimate = s["estimate"]["hz"].get<double>();
  EXPECT_GT(estimate, 0);
  EXPECT_EQ(s["estimate"]["precompute_cores"], 1);
  EXPECT_NE(r.out.find("sustainable tick rate: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the precompute advances the 49 open windows on "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("estimated from the model's size: " + hotpath::util::si(estimate) + " ticks/s"), std::string::npos)
      << r.out;
  const Result info = hotpath("info --model lstm_s --cpuset " + cpuset);
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("tick rate:    window W=50 on cpu, estimated: ~" + hotpath::util::si(estimate) +
                          " ticks/s with --cpuset " + cpuset),
            std::string::npos)
      << info.out;
  EXPECT_NE(info.out.find("GFLOP/s a core"), std::string::npos) << info.out;
  expect_refused("info --model lstm_s --cpuset 3-1", "3-1");
}

// The checks left after bench's timed loop: a bar on stderr with --progress (from the start, not a
// terminal here), nothing without it; the summary says how long checking took.
TEST_F(Cli, BenchShowsTheChecksLeftWhenAsked) {
  const std::string b = "bench --model lstm_s --backend ref --mode streaming --ticks 200 --warmup 0 --check-every 1 ";
  const Result shown = hotpath(b + "--progress");
  ASSERT_EQ(shown.code, 0) << shown.out << shown.err;
  EXPECT_NE(shown.err.find("210/210 checks"), std::string::npos) << shown.err;
  EXPECT_NE(shown.out.find("float64 checker: "), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("run after the timed loop, "), std::string::npos) << shown.out;
  const Result beside = hotpath(b + "--check-during");
  ASSERT_EQ(beside.code, 0) << beside.out << beside.err;
  EXPECT_NE(beside.out.find("beside the timed loop, done "), std::string::npos) << beside.out;
  const Result quiet = hotpath(b);
  ASSERT_EQ(quiet.code, 0) << quiet.out << quiet.err;
  EXPECT_EQ(quiet.err.find("checks"), std::string::npos) << quiet.err;
  expect_refused(b + "--progress --no-progress", "excludes");
  expect_refused("bench --model lstm_s --backend ref --mode backtest --progress", "--progress is for the latency modes");
}

TEST_F(Cli, VerifyFailsWithExitOneOnAWrongModel) {
  // The golden outputs of one model checked against another model of the same shape must fail.
  const std::string other = path("other.safetensors");
  ASSERT_EQ(hotpath("export --model vollo_tiny --out " + other).code, 0);
  // tiny has I=4; use a golden file whose shape matches the exported model: none does, so build one.
  const auto golden = st::File::open(golden_file("tiny"));
  std::vector<st::OutTensor> t;
  for (const auto& info : golden.tensors()) {
    const auto v = golden.read_f64(info);
    t.push_back(st::make_tensor(info.name, info.dtype, info.shape, v));
  }
  // Perturb the expected outputs slightly: ref must now report FAIL and exit 1.
  for (auto& x : t)
    if (x.name == "streaming_expected") {
      std::vector<double> v(size_t(x.shape[0] * x.shape[1]));
      std::memcpy(v.data(), x.bytes.data(), x.bytes.size());
      v[3] += 1e-3;
      x = st::make_f64(x.name, x.shape, v);
    }
  const std::string bad = path("bad.golden.safetensors");
  st::write_file(bad, t, golden.metadata());
  const Result r = hotpath("verify --model " + golden_model("tiny") + " --golden " + bad);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
  EXPECT_NE(r.out.find("PASS"), std::string::npos);  // window mode still passes
}

namespace {

// A copy of a golden file with its metadata overridden and its tensors edited (values as float64).
std::string edited_golden(const std::string& out, const std::map<std::string, std::string>& meta_overrides,
                          const std::function<void(std::vector<st::OutTensor>&)>& edit = {}) {
  const auto golden = st::File::open(golden_file("tiny"));
  std::vector<st::OutTensor> t;
  for (const auto& info : golden.tensors()) t.push_back(st::make_tensor(info.name, info.dtype, info.shape, golden.read_f64(info)));
  if (edit) edit(t);
  auto meta = golden.metadata();
  for (const auto& [k, v] : meta_overrides) meta[k] = v;
  st::write_file(out, t, meta);
  return out;
}

// Sets element `i` of tensor `name` (a float64 or float32 tensor) to `v`.
void poke(std::vector<st::OutTensor>& t, const std::string& name, size_t i, double v) {
  for (auto& x : t)
    if (x.name == name) {
      if (x.dtype == st::DType::F64) std::memcpy(x.bytes.data() + 8 * i, &v, 8);
      else {
        const float f = float(v);
        std::memcpy(x.bytes.data() + 4 * i, &f, 4);
      }
    }
}

}  // namespace

TEST_F(Cli, VerifyRefusesBadGoldenFiles) {
  const std::string model = " --model " + golden_model("tiny") + " --golden ";
  // The golden window is parsed as the loader parses the model's: one parser, the range named.
  for (const char* w : {"+5", " 5", "5abc", "5.0", "-5", "1000000", "2147483647", "2147483648"})
    expect_refused("verify" + model + edited_golden(path("w.golden"), {{"window", w}}),
                   std::string("__metadata__ window '") + w + "' is not an integer in 1..10000");
  // A window longer than the ticks (40) compares nothing: refused before a backend is made.
  expect_refused("verify --mode window" + model + edited_golden(path("w41.golden"), {{"window", "41"}}),
                 "window 41 is longer than the 40 ticks of tensor 'inputs': nothing to compare");
  // NaN / Inf in expected outputs or inputs: bad input, named (was exit 1 with an empty stderr).
  expect_refused("verify" + model + edited_golden(path("nan.golden"), {}, [](auto& t) {
                   poke(t, "tacana_expected", 3, std::nan(""));
                 }),
                 "tensor 'tacana_expected' holds NaN at index 3");
  expect_refused("verify --mode streaming" + model + edited_golden(path("inf.golden"), {}, [](auto& t) {
                   poke(t, "streaming_expected", 0, -INFINITY);
                 }),
                 "tensor 'streaming_expected' holds -Inf at index 0");
  expect_refused("verify" + model + edited_golden(path("infin.golden"), {}, [](auto& t) {
                   poke(t, "inputs", 9, INFINITY);
                 }),
                 "tensor 'inputs' holds +Inf at index 9");
  // No ticks at all: nothing to compare, in either mode (was "error 0.000e+00 PASS").
  const std::string empty = edited_golden(path("empty.golden"), {}, [](auto& t) {
    for (auto& x : t) {
      x.shape[0] = 0;
      x.bytes.clear();
    }
  });
  for (const char* mode : {"window", "streaming", "both"}) {
    const Result r = hotpath(std::string("verify --mode ") + mode + model + empty);
    EXPECT_EQ(r.code, 2) << mode << r.out << r.err;
    EXPECT_EQ(r.out.find("PASS"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("holds 0 ticks: nothing to compare"), std::string::npos) << r.err;
  }
}

TEST_F(Cli, VerifyFailurePrintsItsReason) {
  // Every non-zero exit says why on stderr, a comparison that fails included.
  const std::string bad = edited_golden(path("bad.golden"), {}, [](auto& t) { poke(t, "streaming_expected", 3, 5.0); });
  const Result r = hotpath("verify --model " + golden_model("tiny") + " --golden " + bad);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("exceeds the bound (streaming mode)"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(Cli, HostileHeadersRefusedQuickly) {
  auto file = [&](const std::string& name, const std::string& header) {
    std::string b(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    write_bytes(path(name), b + header);
    return path(name);
  };
  std::string empties = "{";
  for (int i = 0; i < 80000; ++i) empties += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{}";
  const std::string deep = "{\"__x\":" + std::string(3000000, '[') + std::string(3000000, ']') + "}";
  // Each was slow (42 s for the 80,000 entries on a busy machine) or accepted; now refused at once.
  hotpath::test_support::within_seconds(60, [&] {
    expect_refused("info --model " + file("empties.st", empties + "}"), "tensor 't0' has no dtype");
    expect_refused("info --model " + file("deep.st", deep), "nests JSON deeper than the 3 levels");
    expect_refused("info --model " + file("nul.st", std::string("{}\0GARBAGE", 10)), "NUL byte at offset 2");
    expect_refused("info --model " + file("bom.st", "\xef\xbb\xbf{}"), "byte order mark");
  });
}

TEST_F(Cli, RunReproducesGoldenOutputs) {
  for (const char* n : {"tiny", "small2x128", "multi_out"}) {
    const auto golden = st::File::open(golden_file(n));
    const int W = std::stoi(golden.metadata().at("window"));
    for (const std::string mode : {"window", "streaming"}) {
      const std::string out = path(std::string(n) + "." + mode + ".safetensors");
      // The golden model files carry no window; the golden file's metadata says which one PyTorch used.
      const Result r = hotpath("run --model " + golden_model(n) + " --inputs " + golden_file(n) + " --mode " + mode +
                               " --window " + std::to_string(W) + " --out " + out);
      ASSERT_EQ(r.code, 0) << r.err;
      const auto got_file = st::File::open(out);
      const auto got = got_file.read_f64(got_file.at("outputs"));
      const auto expected = golden.read_f64(golden.at(mode == "window" ? "tacana_expected" : "streaming_expected"));
      const size_t skip = got.size() - expected.size();  // window mode: ticks before W-1 are partial windows
      if (mode == "window") EXPECT_EQ(skip, size_t(W - 1) * size_t(got_file.at("outputs").shape[1]));
      EXPECT_LE(hotpath::reference::normalized_error(std::span(got).subspan(skip), expected), 1e-9) << n << " " << mode;
    }
  }
}

TEST_F(Cli, ExportRoundTripsThroughInfoAndRun) {
  const std::string m = path("lstm_s.safetensors");
  ASSERT_EQ(hotpath("export --model lstm_s --out " + m).code, 0);
  const Result r = hotpath("info --model " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("window:       50"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters:   215169"), std::string::npos) << r.out;
  const auto f = st::File::open(m);
  EXPECT_EQ(f.metadata().at("hidden_size"), "128");
  EXPECT_EQ(f.metadata().at("lstm_prefix"), "lstm.");
  EXPECT_EQ(f.metadata().at("head_prefix"), "fc.");
}

TEST_F(Cli, BadInputExitsTwoWithOneLine) {
  expect_refused("info --model " + path("missing.safetensors"), "missing.safetensors");
  expect_refused("info --model no_such_zoo_model", "no_such_zoo_model");
  expect_refused("info --model lstm_s --bogus-flag", "bogus");
  expect_refused("no-such-command", "no-such-command");
  expect_refused("run --model lstm_s --inputs " + golden_file("tiny") + " --out " + path("o.safetensors"), "[T, 32]");
  expect_refused("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --mode sideways --out " +
                     path("o.safetensors"),
                 "sideways");
  expect_refused("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") +
                     " --window 5 --inputs-key nope --out " + path("o.safetensors"),
                 "nope");
  expect_refused("verify --model " + golden_model("tiny") + " --golden " + golden_file("tiny") + " --backend warp",
                 "warp");
  expect_refused("export --model nope --out " + path("x"), "nope");
  expect_refused("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --out " + path("o.safetensors"),
                 "--window");
  expect_refused("bench --model lstm_s --backend ref --ticks 0", "--ticks");
  expect_refused("bench --model lstm_s --backend ref --cpuset 3-1", "cpuset");
  expect_refused("bench --model lstm_s --backend ref --check-every 0", "check-every");
  expect_refused("bench --model lstm_s --backend ref --ticks 5 --cpuset 999", "cpu 999");
  expect_refused("bench --model lstm_s --mode batch", "window or streaming");
}

TEST_F(Cli, FifoInputsAreNotARegularFile) {
  // A FIFO held open for writing here, so that opening it does not block: it read as an empty file,
  // "not a .npy file (no magic)" (and a safetensors FIFO as "cannot determine the file size").
  for (const char* name : {"in.npy", "in.safetensors"}) {
    const std::string fifo = path(name);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    const int writer = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(writer, 0) << std::strerror(errno);
    expect_refused("run --model " + golden_model("tiny") + " --inputs " + fifo + " --window 5 --out " + path("o.npy"),
                   fifo + ": is a FIFO (named pipe), not a regular file");
    ::close(writer);
  }
}

TEST_F(Cli, CorruptModelFilesAreRefused) {
  const std::string good = slurp(golden_model("tiny"));
  // Truncated at a few offsets: inside the length, inside the header, inside the data.
  for (size_t cut : {size_t(0), size_t(5), size_t(40), good.size() / 2, good.size() - 1}) {
    const std::string p = path("cut" + std::to_string(cut) + ".safetensors");
    write_bytes(p, good.substr(0, cut));
    expect_refused("info --model " + p, p);
  }
  // Header length far past the end of the file.
  std::string huge = good;
  const uint64_t n = 1ull << 40;
  std::memcpy(huge.data(), &n, 8);
  write_bytes(path("huge.safetensors"), huge);
  expect_refused("info --model " + path("huge.safetensors"), "huge.safetensors");
  // A directory is not a model.
  expect_refused("info --model " + dir_.string(), dir_.string());
}

TEST_F(Cli, UnsupportedVariantsAreNamed) {
  const auto f = st::File::open(golden_model("tiny"));
  std::vector<st::OutTensor> t;
  for (const auto& info : f.tensors()) t.push_back(st::make_tensor(info.name, info.dtype, info.shape, f.read_f64(info)));
  auto with = [&](const std::string& key) {
    auto copy = t;
    copy.push_back(st::make_tensor(key, st::DType::F32, {32, 8}, std::vector<double>(32 * 8, 0.1)));
    const std::string p = path(key + ".safetensors");
    st::write_file(p, copy, {});
    return p;
  };
  expect_refused("info --model " + with("lstm.weight_hh_l0_reverse"), "bidirectional");
  expect_refused("info --model " + with("lstm.weight_hr_l0"), "proj_size");
}

TEST_F(Cli, NanTickIsRefusedNamingTheTick) {
  const auto golden = st::File::open(golden_file("tiny"));
  auto x = golden.read_f64(golden.at("inputs"));
  x[7 * 4 + 2] = std::nan("");
  const std::string p = path("nan.safetensors");
  st::write_file(p, {st::make_tensor("inputs", st::DType::F32, {40, 4}, x)}, {});
  for (const char* backend : {"ref", "cpu"}) {
    const Result r = hotpath(std::string("run --backend ") + backend + " --model " + golden_model("tiny") +
                             " --inputs " + p + " --mode streaming --out " + path("o.safetensors"));
    EXPECT_EQ(r.code, 2) << backend << r.err;
    EXPECT_NE(r.err.find("tick 7"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("NaN"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("o.safetensors")));
  }
}

TEST_F(Cli, BenchReportsLatencyAndError) {
  const std::string json = path("bench.json"), samples = path("samples.csv");
  const Result r = hotpath("bench --model " + golden_model("multi_out") + " --backend ref --mode window --window 7 --ticks 300 --warmup 20 --check-every 3 --json " +
                           json + " --samples " + samples + " --kernel auto");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("p99.9"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(json));
  for (const char* k : {"schema_version", "hotpath_version", "model", "backend", "precision", "mode", "count",
                        "latency_us", "error", "tick_rate_hz", "precompute_us", "machine", "kernel_asked"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["kernel_asked"], "auto");
  EXPECT_EQ(j["count"], 300);
  for (const char* k : {"p50", "p90", "p99", "p999", "max", "mean"}) EXPECT_TRUE(j["latency_us"].contains(k)) << k;
  EXPECT_GT(j["latency_us"]["p50"].get<double>(), 0.0);
  EXPECT_LE(j["latency_us"]["p50"].get<double>(), j["latency_us"]["p99"].get<double>());
  // Ticks 0, 3, ..., 327 of the 330 run (the 10 first ticks and the warm-up included) are checked: 110
  // of them, and ref agrees with itself exactly.
  EXPECT_EQ(j["error"]["checked_ticks"], 110);
  EXPECT_LE(j["error"]["max_abs"].get<double>(), 1e-12);  // float64 against float64
  const std::string s = slurp(samples);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 301);
}

// The throughput modes: windows/s on the console and in JSON, the error checked, and the flags of the
// other family refused by name.
TEST_F(Cli, BenchThroughputModes) {
  for (const char* mode : {"backtest", "backtest-streaming", "fresh"}) {
    const std::string json = path(std::string(mode) + ".json");
    const Result r = hotpath("bench --model " + golden_model("multi_out") + " --backend cpu --mode " + mode +
                             " --window 6 --ticks 120 --batch 4 --json " + json);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("windows/s"), std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(j["workload"], mode);
    EXPECT_TRUE(j["pass"].get<bool>());
    EXPECT_EQ(j["outputs_per_run"], 120);
    EXPECT_GT(j["windows_per_s"].get<double>(), 0);
  }
  const std::string m = " --model " + golden_model("multi_out") + " --backend cpu --window 6 ";
  expect_refused("bench" + m + "--mode backtest --rate 100", "--rate is for the latency modes");
  expect_refused("bench" + m + "--mode fresh --warmup 5", "--warmup is for the latency modes");
  expect_refused("bench" + m + "--mode backtest --tick-trace", "--tick-trace is for the latency modes");
  expect_refused("bench" + m + "--mode backtest --check-during", "--check-during is for the latency modes");
  expect_refused("bench" + m + "--mode fresh --repeat 2", "--repeat is for the backtest modes");
  expect_refused("bench" + m + "--mode window --batch 8", "--batch, --batch-rows, --batch-copy-threads, --device-arrays and --repeat are for the throughput modes");
  expect_refused("bench" + m + "--mode backtest --batch 0", "--batch");
}

// The first 10 ticks after the engine is made are reported apart (console and JSON), and --no-warm
// leaves the engine cold.
TEST_F(Cli, BenchReportsTheFirstTicksAndNoWarmSkipsTheWarmUp) {
  const std::string json = path("first.json");
  const std::string args = "bench --model " + golden_model("tiny") + " --backend cpu --mode streaming --ticks 40 "
                           "--warmup 5 --json " + json;
  for (const bool warm : {true, false}) {
    const Result r = hotpath(args + (warm ? "" : " --no-warm"));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("first 10 ticks: max "), std::string::npos) << r.out;
    const long long warm_ticks = warm ? hotpath::engine::kWarmTicks : 0;  // streaming: kWarmTicks
    EXPECT_NE(r.out.find(warm ? "engine warm-up: " + std::to_string(warm_ticks) + " ticks" : "engine warm-up: none"),
              std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(j["warm"]["ticks"], warm_ticks);
    EXPECT_EQ(j["first_ticks"]["latency_us"].size(), 10u);
    EXPECT_EQ(j["count"], 40);
    EXPECT_EQ(j["ticks_run"], 10 + 5 + 40);
    EXPECT_TRUE(j["first_tick_within_p99"].is_boolean());
  }
  EXPECT_NE(hotpath("bench --help").out.find("--no-warm"), std::string::npos);
}

TEST_F(Cli, CudaWithoutADeviceSaysSo) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present; this test covers machines without one";
  expect_refused("bench --model lstm_s --backend cuda --ticks 10", "no usable CUDA device");
  expect_refused("bench --pingpong --ticks 10", "no usable CUDA device");
}

// info --backend cuda names the kernel family that would serve the model and why, or says in one line
// that there is no usable device: exit 0 either way (it informs; it does not fail).
TEST_F(Cli, InfoNamesTheCudaKernelOrWhyNone) {
  for (const char* m : {"nv_small", "lstm_s"}) {
    const Result r = hotpath(std::string("info --model ") + m + " --backend cuda");
    ASSERT_EQ(r.code, 0) << m << r.err;
    const size_t at = r.out.find("cuda kernel:  ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    const bool no_device = line.find("no usable CUDA device") != std::string::npos;
    const bool family = line.find("cta \u2014 ") != std::string::npos || line.find("cluster \u2014 ") != std::string::npos ||
                        line.find("grid \u2014 ") != std::string::npos || line.find("none: ") != std::string::npos;
    EXPECT_TRUE(no_device || family) << line;
    EXPECT_NE(r.out.find("parameters:"), std::string::npos);  // the model's facts still come first
  }
  expect_refused("info --model lstm_s --backend cpu", "info --backend takes cuda");
  expect_refused("info --model lstm_s --backend cuda --precision fp32", "fp16 or bf16");
}

// --kernel names one of the choices; anything else exits 2 naming them, before a model is read or a
// device opened (so the same message with or without a GPU, with or without CUDA built in). ref and cpu
// refuse a family.
TEST_F(Cli, KernelFlagIsCheckedBeforeAnyDevice) {
  const std::string needle = "--kernel: unknown cuda kernel 'bogus' (valid: auto, cta, cluster or grid)";
  const std::string run = "run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --out " + path("o.safetensors");
  for (const std::string& args : {std::string("info --model lstm_s --backend cuda --kernel bogus"),
                                  std::string("info --model no_such_model --kernel bogus"),
                                  std::string("bench --model lstm_s --backend cuda --kernel bogus --ticks 10"),
                                  std::string("bench --pingpong --kernel bogus --ticks 10"),
                                  run + " --backend cuda --kernel bogus"})
    expect_refused(args, needle);
  expect_refused("bench --model lstm_s --backend cpu --kernel cta --ticks 10", "backend cpu has no kernel families");
  expect_refused(run + " --window 5 --backend ref --kernel grid", "backend ref has no kernel families");
  // Every choice is read by its option's name table alike, with the flag named.
  expect_refused("bench --model lstm_s --backend tpu --ticks 10", "--backend: unknown backend 'tpu' (valid: auto, ref, cpu, cuda or hybrid)");
  expect_refused("bench --model lstm_s --fallback gpu --ticks 10", "--fallback: unknown fallback 'gpu' (valid: none or cpu)");
  expect_refused("bench --model lstm_s --variant warp --ticks 10", "--variant: unknown cuda variant 'warp' (valid: auto, smem or regs)");
  expect_refused("bench --model lstm_s --precision fp8 --ticks 10", "--precision: unknown precision 'fp8'");
  expect_refused("bench --model lstm_s --check-on tpu --ticks 10", "--check-on: unknown checker device 'tpu' (valid: auto, cpu or gpu)");
  expect_refused("bench --model lstm_s --backend cpu --check-on gpu --check-during --ticks 10", "--check-on gpu: the GPU checks after the timed loop");
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --check-on cpu --seconds 0.1", "--check-on is for the latency modes");
  expect_refused(run + " --backend gpu", "--backend: unknown backend 'gpu'");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
  // --batch-rows: cuda's chunk size, for the throughput modes; range-checked as parsed; refused for cpu
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --batch-rows 0 --seconds 0.1", "--batch-rows");
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --batch-rows 70000 --seconds 0.1", "--batch-rows");
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --batch-rows 4096 --seconds 0.1",
                 "backend cpu has no batch chunks (--batch-rows 4096 is for cuda)");
  expect_refused("bench --model lstm_s --backend cpu --batch-rows 4096 --ticks 10",
                 "--batch, --batch-rows, --batch-copy-threads, --device-arrays and --repeat are for the throughput modes");
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --batch-copy-threads 0 --seconds 0.1",
                 "--batch-copy-threads");
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --batch-copy-threads 4 --seconds 0.1",
                 "backend cpu has no batch chunks to copy (--batch-copy-threads 4 is for cuda)");
  expect_refused("bench --model lstm_s --backend cpu --tick-trace --ticks 10",
                 "backend cpu has no tick kernel to trace (--tick-trace is for cuda's grid kernel)");
  EXPECT_NE(hotpath("bench --help").out.find("--tick-trace"), std::string::npos);
  expect_refused("bench --model lstm_s --backend cpu --mode backtest --device-arrays --seconds 0.1",
                 "--device-arrays needs the cuda backend (the engine runs on cpu)");
  expect_refused(run + " --window 5 --backend cpu --batch-rows 256", "backend cpu has no batch chunks");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
  EXPECT_NE(hotpath("bench --help").out.find("--batch-rows"), std::string::npos);
  EXPECT_NE(hotpath("bench --help").out.find("--kernel"), std::string::npos);
  EXPECT_NE(hotpath("run --help").out.find("--kernel"), std::string::npos);
}

// --cpu-options reaches the cpu backend (bench's JSON says what it was made with), over the environment's
// HOTPATH_CPU_*; a bad pair exits 2 naming it, and ref refuses the flag.
TEST_F(Cli, CpuOptionsReachTheCpuBackend) {
  const Result r = hotpath("bench --model lstm_s --backend cpu --mode streaming --ticks 200 --warmup 10 --check-every 50 "
                           "--no-warm --cpu-options isa=generic,prefetch=0,hugepages=0 --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(path("b.json"));
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["facts"]["cpu_options"], "isa=generic,bf16=auto,amx=auto,int8_act=16,prefetch=0,rewarm=1,hugepages=0,crit_cores=auto,pre_split=auto,pre_cores=auto,pre_row_cores=auto") << j.dump();
  EXPECT_EQ(j["variant"], "generic-fp32");
  const std::string run = "run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --out " + path("o.safetensors");
  expect_refused(run + " --window 5 --backend cpu --cpu-options isa=sse", "isa=sse (isa takes auto, avx512, avx2, neon, sve or generic)");
  expect_refused(run + " --window 5 --backend cpu --cpu-options speed=11", "unknown key 'speed'");
  expect_refused(run + " --window 5 --backend ref --cpu-options isa=generic", "--cpu-options is for the cpu backend");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
  EXPECT_NE(hotpath("run --help").out.find("hugepages: 0 or 1 (environment: HOTPATH_CPU_HUGEPAGES)"), std::string::npos);
}

// --floats is the mailbox's limit, refused as parsed: "no usable CUDA device" would mean it looked first.
TEST_F(Cli, PingPongFloatsBeyondTheMailboxAreRefusedFirst) {
  expect_refused("bench --pingpong --floats 1025 --ticks 10", "[1, 1024]");
  expect_refused("bench --pingpong --floats 0 --ticks 10", "--floats");
}

// Every numeric flag of bench and run is range-checked: exit 2 and one line naming the flag and its
// limit; never exit 3 (vector::reserve), never a wrap (warm-up + ticks), never NaN taken as a value,
// never "0 means unset".
TEST_F(Cli, BenchAndRunNumbersAreRangeChecked) {
  const std::string b = "bench --model lstm_s --backend ref ";
  const std::vector<std::pair<std::string, std::string>> bench_cases = {
      {"--warmup 9223372036854775807", "--warmup"},  // measured nothing and said PASS
      {"--warmup 100000001", "100000000"},
      {"--ticks 9223372036854775807", "--ticks"},    // exit 3: vector::reserve
      {"--ticks 100000001", "100000000"},
      {"--ticks 99999999999999999999", "--ticks"},
      {"--timeout-us nan", "--timeout-us"},
      {"--timeout-us 0", "--timeout-us"},
      {"--window 0", "--window"},                    // was treated as unset
      {"--window 10001", "10000"},
      {"--check-threads 100", "--check-threads"},
      {"--check-threads 0", "64"},
      {"--check-every -1", "--check-every"},
      {"--seconds nan", "--seconds"},
      {"--duration -1", "1000000"},
      {"--rate nan", "--rate"},
      {"--rate inf", "--rate"},
      {"--gap-us -1", "--gap-us"},
      {"--floats 1025", "1024"},
      {"--floats 0", "--floats"},
      {"--seed -1", "--seed"},
      {"--seed 99999999999999999999999", "--seed"},  // CLI11 alone saturated it to 2^63-1
      {"--window 0x20", "--window"},                 // CLI11 alone read hex (and "010" as octal 8)
      {"--ticks 1e3", "--ticks"},
      {"--report-every 0", "--report-every"},
      {"--report-every 1 --samples " + path("s.csv"), "--samples"},
      {"--idle-s 1", "--idle-every-s"},
      {"--idle-every-s 1 --idle-s nan", "--idle-s"}};
  for (const auto& [args, needle] : bench_cases) expect_refused(b + args, needle);
  const std::string run = "run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --out " + path("o.safetensors");
  expect_refused(run + " --window 10000000", "--window");  // allocated 1.9 GB, then "out of memory"
  expect_refused(run + " --window 0", "--window");
  expect_refused(run + " --window 41", "longer than the series (40 ticks");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
}

// The numeric flags of a command as its --help lists them: {flag, integer?}. Each must show its range
// ("INT in [1, 10000]"): a bare INT or FLOAT is a flag that CLI11 converts itself (octal, hex, clamped).
namespace {
std::vector<std::pair<std::string, bool>> numeric_flags(const std::string& help, const std::string& command) {
  static const std::regex line(R"(^\s+(?:-\w,)?(--[\w-]+)(?:,--[\w-]+)*\s+(U?INT|FLOAT)\b(.*)$)");
  std::vector<std::pair<std::string, bool>> out;
  std::istringstream in(help);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    const std::string rest = m[3];
    EXPECT_TRUE(rest.rfind(" in [", 0) == 0 || rest.rfind(" in (", 0) == 0)
        << command << " " << m[1] << ": a numeric flag without the number grammar: " << l;
    out.emplace_back(m[1], m[2] != "FLOAT");
  }
  return out;
}
}  // namespace

// One number grammar for every numeric flag of every command, found from --help so that a new flag is
// covered too: decimal integers, decimal finite floats; exit 2 with one line naming the flag and value.
TEST_F(Cli, EveryNumericFlagRefusesWhatIsNotADecimalNumber) {
  const std::vector<std::string> ints = {"0x10", "0X10", "0b1", "", "1e1", "1.0", "+-1", "-1", "18446744073709551616",
                                         "99999999999999999999999", " 1"};
  const std::vector<std::string> floats = {"0x10", "0x1p4", "inf", "-inf", "nan", "", "1,5", "1e999", "1e", " 1"};
  std::size_t seen = 0;
  for (const std::string command : {"info", "run", "verify", "export", "bench", "scaler fit"}) {
    const Result help = hotpath(command + " --help");
    ASSERT_EQ(help.code, 0) << command;
    for (const auto& [flag, integer] : numeric_flags(help.out, command)) {
      ++seen;
      for (const std::string& v : integer ? ints : floats)
        expect_refused(command + " " + flag + " '" + v + "'",
                       flag + ": must be a decimal " + (integer ? "integer" : "number") + " in ");
    }
  }
  EXPECT_GE(seen, 22u);  // info/run --window, export --seed, scaler fit --until and bench's 18
  const Result r = hotpath("export --model lstm_s --out " + path("x.safetensors") + " --seed ''");
  EXPECT_NE(r.err.find("(got '')"), std::string::npos) << r.err;  // the bad value named, even empty
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
}

// Integers are decimal everywhere: "010" is ten, never octal 8.
TEST_F(Cli, IntegersAreDecimalEverywhere) {
  for (const std::string seed : {"010", "10", "8"})
    ASSERT_EQ(hotpath("export --model lstm_s --seed " + seed + " --out " + path("s" + seed + ".safetensors")).code, 0);
  EXPECT_EQ(slurp(path("s010.safetensors")), slurp(path("s10.safetensors")));
  EXPECT_NE(slurp(path("s010.safetensors")), slurp(path("s8.safetensors")));
  // The largest seed is a seed, not an overflow clamped to it.
  EXPECT_EQ(hotpath("export --model lstm_s --seed 18446744073709551615 --out " + path("max.safetensors")).code, 0);

  const std::string json = path("b.json");
  const Result b = hotpath("bench --model " + golden_model("multi_out") +
                           " --backend ref --window 07 --ticks 010 --warmup 010 --check-every 01 --json " + json);
  ASSERT_EQ(b.code, 0) << b.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["count"], 10);
  EXPECT_EQ(j["model"]["window"], 7);

  const Result r = hotpath("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") +
                           " --window 010 --out " + path("o.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(st::File::open(path("o.safetensors")).metadata().at("window"), "10");

  std::vector<float> x(20 * 4);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(k % 7);
  const std::vector<int64_t> shape = {20, 4};
  hotpath::npy::write_file(path("x.npy"), shape, std::span<const float>(x));
  ASSERT_EQ(hotpath("scaler fit --model " + golden_model("tiny") + " --inputs " + path("x.npy") + " --until 010 --out " +
                    path("f.safetensors"))
                .code,
            0);
  EXPECT_NE(st::File::open(path("f.safetensors")).metadata().at("input_scaler_fit").find("ticks [0, 10) of 20"),
            std::string::npos);
}

// A spec flag given empty is refused, not read as absent; its numbers follow the same grammar.
TEST_F(Cli, EmptyAndMalformedSpecsAreRefused) {
  const std::string run = "run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --window 5 --out " +
                          path("o.safetensors");
  const std::string verify = "verify --model " + golden_model("tiny") + " --golden " + golden_file("tiny");
  const std::string bench = "bench --model lstm_s --backend ref --ticks 5";
  for (const std::string& cmd : {run, verify, bench, bench + " --mode backtest"}) {
    expect_refused(cmd + " --cpuset ''", "--cpuset ''");
    expect_refused(cmd + " --cpuset 0,,1", "--cpuset '0,,1'");
    expect_refused(cmd + " --cpuset 0x1", "--cpuset '0x1'");
    expect_refused(cmd + " --scaler ''", "scaler ''");
    expect_refused(cmd + " --scaler rolling:0x10", "rolling:0x10");
    expect_refused(cmd + " --scaler rolling:1e3", "rolling:1e3");
  }
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
}

// When the system refuses a thread (a thread limit), the process does not abort ("terminate called
// without an active exception", exit 134): the threads already started are joined and the error is one
// line, exit 2. The limit is set with prlimit --nproc (which root ignores, so as root the command runs
// as an unused uid).
TEST_F(Cli, AThreadLimitIsACleanError) {
  auto limited = [&](int nproc, const std::string& args) {
    std::string cmd = "prlimit --nproc=" + std::to_string(nproc) + " " + args;
    if (::geteuid() == 0) cmd = "setpriv --reuid 54321 --regid 54321 --clear-groups " + cmd;
    // Under ASan, LeakSanitizer needs a thread of its own at exit, which the limit refuses (it then
    // fails the process with exit 1): leak checking is off for the limited child only.
    const char* asan = std::getenv("ASAN_OPTIONS");
    cmd = "ASAN_OPTIONS='" + std::string(asan ? asan : "") + ":detect_leaks=0' " + cmd;
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const int status = std::system((cmd + " >" + out + " 2>" + err + " </dev/null").c_str());
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
  };
  const std::string bin = HOTPATH_BINARY;
  if (limited(100, bin + " --version").code != 0 || limited(1, "sh -c 'true & wait'").code == 0)
    GTEST_SKIP() << "cannot limit threads here (needs prlimit, and setpriv when root, and a binary others may run)";
  for (const auto& [nproc, args] : std::vector<std::pair<int, std::string>>{
           {3, "bench --model lstm_s --backend ref --ticks 10 --check-threads 10"},
           {2, "bench --model lstm_s --backend ref --mode window --window 50 --ticks 10 --check-threads 64"}}) {
    const Result r = limited(nproc, bin + " " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("cannot start bench checker thread"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ulimit -u"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // The cpu backend's precompute workers (one per core after the first of --cpuset), through `run`: the
  // bench starts its checker threads before the engine, and those would be refused first.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 2) {
    std::vector<int> cores;
    for (int c = 0; c < CPU_SETSIZE && cores.size() < 2; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    // the output in the system's temporary folder: the limited child may run as another user, and its
    // output's folder is checked (a file made and removed) before the engine starts
    const std::string out = (fs::temp_directory_path() / ("hotpath_limited_" + std::to_string(::getpid()) + ".safetensors")).string();
    const Result r = limited(1, bin + " run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") +
                                    " --mode streaming --backend cpu --out " + out + " --cpuset " +
                                    std::to_string(cores[0]) + "," + std::to_string(cores[1]));
    fs::remove(out);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("cannot start cpu backend precompute worker"), std::string::npos) << r.err;
  }
}

// The soak run's flags: --duration with a report per interval and idle gaps, every tick checked; the
// JSON carries the intervals (schema: bench/SCHEMA.md). Behaviour only: no rate or duration is asserted.
TEST_F(Cli, BenchSoakFlagsReportIntervals) {
  const std::string json = path("soak.json");
  const Result r = hotpath("bench --model " + golden_model("tiny") + " --backend ref --mode streaming --duration 0.5 "
                           "--report-every 0.1 --idle-every-s 0.15 --idle-s 0.02 --check-every 1 --warmup 3 --json " + json);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_EQ(j["failure"], "");
  EXPECT_EQ(j["lost_ticks"], 0);
  EXPECT_EQ(j["error"]["unchecked_ticks"], 0);
  EXPECT_EQ(j["error"]["checked_ticks"], j["ticks_run"]);
  ASSERT_GE(j["intervals"].size(), 1u);
  long long ticks = 0;
  for (const auto& iv : j["intervals"]) {
    for (const char* k : {"start_s", "end_s", "ticks", "latency_us", "precompute_us", "rss_bytes", "lost_ticks", "error"})
      EXPECT_TRUE(iv.contains(k)) << k;
    ticks += iv["ticks"].get<long long>();
  }
  EXPECT_EQ(ticks, j["count"].get<long long>());
  EXPECT_TRUE(j["pin_failures"].is_array());
  EXPECT_NE(r.out.find("interval 0:"), std::string::npos) << r.out;
}

// ---- input scaling: hotpath scaler fit, --scaler ---------------------------------------------------

namespace {
// A float32 C-order [rows, cols] .npy file, as numpy.save writes it.
std::string npy_f32(const std::vector<float>& v, size_t rows, size_t cols, bool fortran = false) {
  std::string header = "{'descr': '<f4', 'fortran_order': " + std::string(fortran ? "True" : "False") +
                       ", 'shape': (" + std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string b = "\x93NUMPY";
  b += char(1);
  b += char(0);
  b += char(header.size() & 0xff);
  b += char(header.size() >> 8);
  b += header;
  b.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return b;
}
}  // namespace

TEST_F(Cli, ScalerFitReadsOnlyTheTicksBeforeUntil) {
  const size_t T = 50, I = 4, until = 30;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g(5.0f, 2.0f);
  std::vector<float> x(T * I);
  for (auto& v : x) v = g(rng);
  for (size_t t = 0; t < T; ++t) x[t * I + 3] = 1.5f;  // a constant feature: scale 1, said on stderr
  std::vector<float> later = x;  // every row at or after `until` different, even NaN
  for (size_t k = until * I; k < later.size(); ++k) later[k] = k % 3 ? -1000.0f : std::nanf("");
  write_bytes(path("a.npy"), npy_f32(x, T, I));
  write_bytes(path("b.npy"), npy_f32(later, T, I));
  const std::string model = golden_model("tiny");
  const std::string fit = "scaler fit --model " + model + " --until " + std::to_string(until);
  const Result a = hotpath(fit + " --inputs " + path("a.npy") + " --out " + path("a.safetensors"));
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.err.find("constant"), std::string::npos) << a.err;
  ASSERT_EQ(hotpath(fit + " --inputs " + path("b.npy") + " --out " + path("b.safetensors")).code, 0);
  const auto fa = st::File::open(path("a.safetensors")), fb = st::File::open(path("b.safetensors"));
  for (const char* k : {"input_scaler.mean", "input_scaler.scale"}) {
    const auto ra = fa.raw(fa.at(k)), rb = fb.raw(fb.at(k));
    EXPECT_TRUE(std::equal(ra.begin(), ra.end(), rb.begin(), rb.end())) << k << " depends on rows >= --until";
    EXPECT_EQ(fa.at(k).dtype, st::DType::F32);
    EXPECT_EQ(fa.at(k).shape, (std::vector<int64_t>{int64_t(I)}));
  }
  // The statistics of rows [0, until): mean and population std (scale 1 for the constant feature).
  const auto mean = fa.read_f64(fa.at("input_scaler.mean")), scale = fa.read_f64(fa.at("input_scaler.scale"));
  for (size_t i = 0; i < I; ++i) {
    double m = 0, ss = 0;
    for (size_t t = 0; t < until; ++t) m += x[t * I + i];
    m /= double(until);
    for (size_t t = 0; t < until; ++t) ss += (x[t * I + i] - m) * (x[t * I + i] - m);
    EXPECT_EQ(mean[i], double(float(m))) << i;
    EXPECT_EQ(scale[i], i == 3 ? 1.0 : double(float(std::sqrt(ss / double(until))))) << i;
  }
  // Every tensor and metadata key of the model unchanged, and what it was fitted on.
  const auto orig = st::File::open(model);
  for (const auto& t : orig.tensors()) {
    const auto r0 = orig.raw(t), r1 = fa.raw(fa.at(t.name));
    EXPECT_TRUE(std::equal(r0.begin(), r0.end(), r1.begin(), r1.end())) << t.name;
  }
  for (const auto& [k, v] : orig.metadata()) EXPECT_EQ(fa.metadata().at(k), v) << k;
  EXPECT_NE(fa.metadata().at("input_scaler_fit").find("ticks [0, 30) of 50"), std::string::npos);
  const Result info = hotpath("info --model " + path("a.safetensors"));
  EXPECT_NE(info.out.find("input scaler: yes"), std::string::npos) << info.out;
  // The same from a safetensors series (any key), and a zoo model (its weights are written).
  st::write_file(path("s.safetensors"), {st::make_f32("train", {int64_t(T), int64_t(I)}, x)}, {});
  ASSERT_EQ(hotpath(fit + " --inputs " + path("s.safetensors") + " --key train --out " + path("c.safetensors")).code, 0);
  const auto fc = st::File::open(path("c.safetensors"));
  const auto rc = fc.raw(fc.at("input_scaler.mean")), ra = fa.raw(fa.at("input_scaler.mean"));
  EXPECT_TRUE(std::equal(ra.begin(), ra.end(), rc.begin(), rc.end()));
  std::vector<float> wide(T * 32, 1.0f);
  for (size_t k = 0; k < wide.size(); ++k) wide[k] = float(k % 97);
  write_bytes(path("w.npy"), npy_f32(wide, T, 32));
  const Result z = hotpath("scaler fit --model lstm_s --inputs " + path("w.npy") + " --until 40 --out " + path("z.safetensors"));
  ASSERT_EQ(z.code, 0) << z.err;
  EXPECT_NE(hotpath("info --model " + path("z.safetensors")).out.find("input scaler: yes"), std::string::npos);
}

TEST_F(Cli, ScalerFitErrorsAreOneLine) {
  const size_t T = 20, I = 4;
  std::vector<float> x(T * I);
  for (size_t k = 0; k < x.size(); ++k) x[k] = float(k % 13);
  write_bytes(path("ok.npy"), npy_f32(x, T, I));
  write_bytes(path("fortran.npy"), npy_f32(x, T, I, true));
  write_bytes(path("narrow.npy"), npy_f32(x, T * 2, I / 2));
  std::vector<float> nan = x;
  nan[5 * I + 1] = std::nanf("");
  write_bytes(path("nan.npy"), npy_f32(nan, T, I));
  write_bytes(path("short.npy"), npy_f32(x, T, I).substr(0, 200));
  const std::string m = " --model " + golden_model("tiny") + " --out " + path("o.safetensors");
  expect_refused("scaler fit" + m + " --inputs " + path("ok.npy") + " --until 1", "T >= 2");
  expect_refused("scaler fit" + m + " --inputs " + path("ok.npy") + " --until 21", "past the end of the series (20 ticks");
  expect_refused("scaler fit" + m + " --inputs " + path("narrow.npy") + " --until 5", "2 features per tick, the model takes 4");
  expect_refused("scaler fit" + m + " --inputs " + path("nan.npy") + " --until 10", "tick 5, feature 1 is NaN");
  expect_refused("scaler fit" + m + " --inputs " + path("fortran.npy") + " --until 10", "Fortran");
  expect_refused("scaler fit" + m + " --inputs " + path("short.npy") + " --until 10", "truncated .npy data");
  expect_refused("scaler fit" + m + " --inputs " + path("ok.csv") + " --until 10", "expected a .npy or .safetensors");
  expect_refused("scaler fit" + m + " --inputs " + path("missing.npy") + " --until 10", "no such file");
  EXPECT_FALSE(fs::exists(path("o.safetensors")));
  // The NaN is after --until: fitted.
  EXPECT_EQ(hotpath("scaler fit" + m + " --inputs " + path("nan.npy") + " --until 5").code, 0);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "a partial file left: " << e.path();
  // One series only: the statistics of [S, T, I] would mix series.
  const std::vector<int64_t> three = {2, int64_t(T), int64_t(I)};
  std::vector<float> xx(2 * T * I, 1.0f);
  hotpath::npy::write_file(path("3d.npy"), three, std::span<const float>(xx));
  expect_refused("scaler fit" + m + " --inputs " + path("3d.npy") + " --until 10", "3 dimensions; scaler fit takes one series [T, I]");
}

TEST_F(Cli, ScalerFlagOnRunBenchAndVerify) {
  expect_refused("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") + " --out " + path("o.safetensors") +
                     " --scaler rolling:1",
                 "scaler 'rolling:1': N must be >= 2");
  expect_refused("bench --model lstm_s --backend ref --ticks 10 --scaler zscore", "expected none, model or rolling:N");
  expect_refused("verify --model " + golden_model("tiny") + " --golden " + golden_file("tiny") + " --scaler model",
                 "carries no input scaler");
  // run: the scaler in force is recorded with the outputs.
  const Result r = hotpath("run --model " + golden_model("tiny") + " --inputs " + golden_file("tiny") +
                           " --mode streaming --scaler rolling:6 --out " + path("o.safetensors"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(st::File::open(path("o.safetensors")).metadata().at("scaler"), "rolling:6");
  // bench: the checker's reference is fed the same scaled inputs (cpu within fp32, both modes).
  for (const char* mode : {"window", "streaming"}) {
    const Result b = hotpath(std::string("bench --model lstm_s --backend cpu --window 6 --ticks 200 --warmup 10 "
                                         "--check-every 1 --scaler rolling:7 --mode ") + mode + " --json " + path("b.json"));
    ASSERT_EQ(b.code, 0) << b.out << b.err;
    const auto j = nlohmann::json::parse(slurp(path("b.json")));
    EXPECT_EQ(j["scaler"], "rolling:7");
    EXPECT_EQ(j["error"]["checked_ticks"], 220);  // 10 first ticks + 10 warm-up + 200 measured, every one checked
  }
  // verify with a scaler compares against the float64 reference fed the same scaled inputs.
  const auto golden = st::File::open(golden_file("tiny"));
  const auto x = golden.read_f32(golden.at("inputs"));
  st::write_file(path("train.safetensors"), {st::make_f32("inputs", golden.at("inputs").shape, x)}, {});
  ASSERT_EQ(hotpath("scaler fit --model " + golden_model("tiny") + " --inputs " + path("train.safetensors") +
                    " --until 20 --out " + path("fitted.safetensors"))
                .code,
            0);
  const Result v = hotpath("verify --backend cpu --model " + path("fitted.safetensors") + " --golden " + golden_file("tiny"));
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("scaler model: against the float64 reference"), std::string::npos) << v.out;
}

// ---- hotpath run: .npy and .safetensors, [S, T, I] series, atomic output, progress ----------------

namespace {

namespace npy = hotpath::npy;

// tiny's golden inputs [40, 4] as three series [3, 40, 4]: the golden series itself, its ticks
// reversed, and it halved (each series must come out as if run alone).
struct Series3 {
  size_t S = 3, T = 0, I = 0;
  int W = 0;
  std::vector<float> x;
  std::vector<int64_t> shape() const { return {int64_t(S), int64_t(T), int64_t(I)}; }
  std::vector<float> one(size_t s) const { return {x.begin() + std::ptrdiff_t(s * T * I), x.begin() + std::ptrdiff_t((s + 1) * T * I)}; }
};

Series3 tiny_series() {
  const auto golden = st::File::open(golden_file("tiny"));
  const auto& in = golden.at("inputs");
  const auto x = golden.read_f32(in);
  Series3 s;
  s.T = size_t(in.shape[0]);
  s.I = size_t(in.shape[1]);
  s.W = std::stoi(golden.metadata().at("window"));
  s.x = x;
  for (size_t t = s.T; t-- > 0;) s.x.insert(s.x.end(), x.begin() + std::ptrdiff_t(t * s.I), x.begin() + std::ptrdiff_t((t + 1) * s.I));
  for (float v : x) s.x.push_back(v * 0.5f);
  return s;
}

// The outputs of a run: .npy or tensor `outputs` of a .safetensors, as float64, with their shape.
std::vector<double> outputs(const std::string& p, std::vector<int64_t>* shape = nullptr) {
  if (p.ends_with(".npy")) {
    npy::Array a = npy::read_file(p);
    if (shape) *shape = a.shape;
    return a.values;
  }
  const auto f = st::File::open(p);
  if (shape) *shape = f.at("outputs").shape;
  return f.read_f64(f.at("outputs"));
}

}  // namespace

// Each series of [S, T, I] comes out exactly as the same series run alone as [T, I], in both modes;
// the golden series reproduces PyTorch's outputs; the cpu backend agrees with ref within fp32's bound.
TEST_F(Cli, RunThreeDimensionalEqualsPerSeriesRuns) {
  const Series3 s = tiny_series();
  npy::write_file(path("all.npy"), s.shape(), std::span<const float>(s.x));
  for (size_t k = 0; k < s.S; ++k) {
    const std::vector<int64_t> two = {int64_t(s.T), int64_t(s.I)};
    npy::write_file(path("s" + std::to_string(k) + ".npy"), two, std::span<const float>(s.one(k)));
  }
  const auto golden = st::File::open(golden_file("tiny"));
  for (const std::string mode : {"window", "streaming"}) {
    const std::string run = "run --model " + golden_model("tiny") + " --mode " + mode + " --window " + std::to_string(s.W);
    ASSERT_EQ(hotpath(run + " --inputs " + path("all.npy") + " --out " + path("all_out.npy")).code, 0) << mode;
    std::vector<int64_t> shape;
    const auto all = outputs(path("all_out.npy"), &shape);
    const size_t O = 1;
    ASSERT_EQ(shape, (std::vector<int64_t>{3, int64_t(s.T), int64_t(O)})) << mode;
    for (size_t k = 0; k < s.S; ++k) {
      const std::string out = path("s" + std::to_string(k) + "_out.npy");
      const Result r = hotpath(run + " --inputs " + path("s" + std::to_string(k) + ".npy") + " --out " + out);
      ASSERT_EQ(r.code, 0) << r.err;
      const auto one = outputs(out, &shape);
      EXPECT_EQ(shape, (std::vector<int64_t>{int64_t(s.T), int64_t(O)}));
      EXPECT_EQ(one, std::vector<double>(all.begin() + std::ptrdiff_t(k * s.T * O), all.begin() + std::ptrdiff_t((k + 1) * s.T * O)))
          << mode << " series " << k;
    }
    const auto expected = golden.read_f64(golden.at(mode == "window" ? "tacana_expected" : "streaming_expected"));
    const size_t skip = mode == "window" ? size_t(s.W - 1) : 0;  // partial windows before W-1
    ASSERT_EQ(expected.size(), s.T - skip);
    EXPECT_LE(hotpath::reference::normalized_error(std::span(all).subspan(skip, s.T - skip), expected), 1e-9) << mode;
    // Series 1 is series 0 reversed, so its outputs differ: a run that ignored the series index would fail.
    EXPECT_NE(std::vector<double>(all.begin(), all.begin() + std::ptrdiff_t(s.T)),
              std::vector<double>(all.begin() + std::ptrdiff_t(s.T), all.begin() + std::ptrdiff_t(2 * s.T)));
    const Result cpu = hotpath(run + " --backend cpu --inputs " + path("all.npy") + " --out " + path("cpu.npy"));
    ASSERT_EQ(cpu.code, 0) << cpu.err;
    EXPECT_LE(hotpath::reference::normalized_error(outputs(path("cpu.npy")), all), 1e-5) << mode;
  }
}

// .npy in -> .npy out and .safetensors in -> .safetensors out give the same numbers, in either output
// dtype, for [S, T, I] and [T, I], float32 or float64 inputs; extensions in any case.
TEST_F(Cli, RunNpyAndSafetensorsGiveTheSameNumbers) {
  const Series3 s = tiny_series();
  const std::vector<double> wide(s.x.begin(), s.x.end());  // float64 holding the same (float-exact) values
  npy::write_file(path("x32.npy"), s.shape(), std::span<const float>(s.x));
  npy::write_file(path("x64.NPY"), s.shape(), std::span<const double>(wide));
  st::write_file(path("x.safetensors"), {st::make_f32("series", s.shape(), s.x)}, {});
  st::write_file(path("x64.SafeTensors"), {st::make_f64("series", s.shape(), wide)}, {});
  const std::string run = "run --model " + golden_model("tiny") + " --mode window --window " + std::to_string(s.W);
  for (const std::string dtype : {"f64", "f32"}) {
    std::vector<std::vector<double>> got;
    for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
             {"x32.npy", "a.npy"}, {"x64.NPY", "b.npy"}, {"x.safetensors", "c.safetensors"}, {"x64.SafeTensors", "d.safetensors"}}) {
      const Result r = hotpath(run + " --inputs " + path(in) + " --inputs-key series --out-dtype " + dtype + " --out " + path(out));
      ASSERT_EQ(r.code, 0) << in << " " << r.err;
      std::vector<int64_t> shape;
      got.push_back(outputs(path(out), &shape));
      EXPECT_EQ(shape, (std::vector<int64_t>{3, int64_t(s.T), 1})) << out;
    }
    for (size_t k = 1; k < got.size(); ++k) EXPECT_EQ(got[k], got[0]) << dtype << " file " << k;
    // The dtype asked for, in both formats; the run's facts in the safetensors metadata.
    EXPECT_EQ(npy::read_file(path("a.npy")).descr, dtype == "f64" ? "<f8" : "<f4");
    const auto c = st::File::open(path("c.safetensors"));
    EXPECT_EQ(c.at("outputs").dtype, dtype == "f64" ? st::DType::F64 : st::DType::F32);
    EXPECT_EQ(c.metadata().at("mode"), "window");
    EXPECT_EQ(c.metadata().at("window"), std::to_string(s.W));
    EXPECT_EQ(c.metadata().at("backend"), "ref");
  }
  // f32 outputs are the f64 outputs rounded (ref).
  ASSERT_EQ(hotpath(run + " --inputs " + path("x32.npy") + " --out " + path("wide.npy")).code, 0);
  const auto w = outputs(path("wide.npy")), n = outputs(path("a.npy"));
  ASSERT_EQ(w.size(), n.size());
  for (size_t k = 0; k < w.size(); ++k) EXPECT_EQ(n[k], double(float(w[k]))) << k;
  // [T, I]: the golden file's safetensors inputs and the same series as .npy.
  const std::vector<int64_t> two = {int64_t(s.T), int64_t(s.I)};
  npy::write_file(path("g.npy"), two, std::span<const float>(s.one(0)));
  ASSERT_EQ(hotpath(run + " --inputs " + golden_file("tiny") + " --out " + path("g.safetensors")).code, 0);
  ASSERT_EQ(hotpath(run + " --inputs " + path("g.npy") + " --out " + path("g_out.npy")).code, 0);
  std::vector<int64_t> sa, sb;
  EXPECT_EQ(outputs(path("g.safetensors"), &sa), outputs(path("g_out.npy"), &sb));
  EXPECT_EQ(sa, (std::vector<int64_t>{int64_t(s.T), 1}));
  EXPECT_EQ(sb, sa);
}

// A run that fails after its output file was opened (a NaN found by the engine's check) leaves neither
// the output nor a temporary file, and an existing output exactly as it was.
TEST_F(Cli, RunErrorsLeaveNoFileBehind) {
  Series3 s = tiny_series();
  s.x[(1 * s.T + 5) * s.I + 2] = std::nanf("");
  npy::write_file(path("bad.npy"), s.shape(), std::span<const float>(s.x));
  write_bytes(path("keep.npy"), "old");
  const std::string run = "run --model " + golden_model("tiny") + " --window 5 --inputs " + path("bad.npy") + " --out ";
  for (const char* backend : {"ref", "cpu"})
    for (const char* out : {"new.npy", "new.safetensors", "keep.npy"})
      expect_refused(run + path(out) + " --backend " + backend,
                     path("bad.npy") + ": backtest input: series 1, tick 5, input 2 is NaN");
  s.x[(1 * s.T + 5) * s.I + 2] = 1.0f;
  s.x[(2 * s.T + 0) * s.I + 3] = -INFINITY;
  npy::write_file(path("bad.npy"), s.shape(), std::span<const float>(s.x));
  expect_refused(run + path("new.npy"), "series 2, tick 0, input 3 is Inf");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"bad.npy", "keep.npy", "stderr.txt", "stdout.txt"}));
  EXPECT_EQ(slurp(path("keep.npy")), "old");
  expect_refused("run --model " + golden_model("tiny") + " --window 5 --inputs " + golden_file("tiny") + " --out " +
                     path("missing/o.npy"),
                 "--out '" + path("missing/o.npy") + "': cannot create a file there");
}

// An output that is the run's own input (any spelling, a hard link), or a link, a FIFO or a device, is
// refused before the run with one line naming both flags; the files stay as they were.
TEST_F(Cli, OutputsNeverOverwriteInputsNorWriteThroughLinks) {
  Series3 s = tiny_series();
  npy::write_file(path("x.npy"), s.shape(), std::span<const float>(s.x));
  const std::string before = slurp(path("x.npy"));
  const std::string run = "run --model " + golden_model("tiny") + " --window 5 --inputs " + path("x.npy") + " --out ";
  expect_refused(run + path("x.npy"), "--out '" + path("x.npy") + "' is the same file as --inputs");
  fs::create_hard_link(path("x.npy"), path("same.npy"));
  expect_refused(run + path("same.npy"), "is the same file as --inputs");
  EXPECT_EQ(slurp(path("x.npy")), before);
  write_bytes(path("target.npy"), "keep");
  fs::create_symlink(path("target.npy"), path("link.npy"));
  expect_refused(run + path("link.npy"), "is a symbolic link; hotpath writes only regular files");
  expect_refused("export --model lstm_s --out " + path("link.npy"), "is a symbolic link");
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  expect_refused(run + path("fifo.npy"), "is a FIFO");
  expect_refused("export --model lstm_s --out /dev/null", "--out '/dev/null': is a device");
  expect_refused("scaler fit --model " + golden_model("tiny") + " --inputs " + path("x.npy") + " --until 10 --out " +
                     path("x.npy"),
                 "is the same file as --inputs");
  expect_refused("scaler fit --model " + golden_model("tiny") + " --inputs " + path("x.npy") + " --until 10 --out " +
                     golden_model("tiny"),
                 "is the same file as --model");
  EXPECT_TRUE(fs::is_symlink(path("link.npy")));
  EXPECT_EQ(slurp(path("target.npy")), "keep");
  EXPECT_EQ(slurp(path("x.npy")), before);
}

// A signal during `run` removes its temporary output file (SIGKILL excepted: docs say so).
TEST_F(Cli, AnInterruptedRunLeavesNoTemporaryFile) {
  // a series long enough that the float64 reference is still running lstm_m when the signal comes (~1 ms a tick)
  const int64_t T = 20000, I = 32;
  std::vector<float> x(size_t(T * I), 0.25f);
  npy::write_file(path("long.npy"), std::vector<int64_t>{T, I}, std::span<const float>(x));
  for (const char* sig : {"TERM", "INT", "HUP"}) {
    const std::string cmd = "timeout -s " + std::string(sig) + " 1 " + std::string(HOTPATH_BINARY) +
                            " run --model lstm_m --mode streaming --backend ref --no-progress --inputs " +
                            path("long.npy") + " --out " + path("o.npy") + " >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 124) << sig << ": the run ended before the signal (make the series longer)";
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"long.npy"}) << sig;
  }
}

// Bad series: exit 2 with one line naming the problem, and no output file.
TEST_F(Cli, RunRefusesBadSeries) {
  const std::string run = "run --model " + golden_model("tiny") + " --window 5 --out " + path("o.npy") + " --inputs ";
  auto npy_of = [&](const std::string& name, std::vector<int64_t> shape, double fill = 0.5) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    npy::write_file(path(name), shape, std::span<const double>(std::vector<double>(n, fill)));
    return path(name);
  };
  auto st_of = [&](const std::string& name, std::vector<int64_t> shape, st::DType dtype, double fill = 1.0) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    st::write_file(path(name), {st::make_tensor("inputs", dtype, shape, std::vector<double>(n, fill))}, {});
    return path(name);
  };
  expect_refused(run + npy_of("r1.npy", {40}), "1 dimensions, expected 2 ([T, I]) or 3 ([S, T, I])");
  expect_refused(run + npy_of("r4.npy", {1, 2, 40, 4}), "4 dimensions, expected 2 ([T, I]) or 3 ([S, T, I])");
  expect_refused(run + st_of("r4.safetensors", {1, 2, 40, 4}, st::DType::F32),
                 "of shape [1, 2, 40, 4] has 4 dimensions: the model takes [T, 4] or [S, T, 4]");
  expect_refused(run + st_of("r1.safetensors", {40}, st::DType::F32), "has 1 dimensions");
  expect_refused(run + npy_of("i5.npy", {40, 5}), "array of shape [40, 5]: the model takes 4 inputs per tick ([T, 4] or [S, T, 4])");
  expect_refused(run + npy_of("i3.npy", {2, 40, 3}), "array of shape [2, 40, 3]: the model takes 4 inputs per tick");
  expect_refused(run + st_of("i5.safetensors", {2, 40, 5}, st::DType::F16),
                 "tensor 'inputs' of shape [2, 40, 5]: the model takes 4 inputs per tick");
  expect_refused(run + st_of("int.safetensors", {40, 4}, st::DType::I32), "has dtype I32, expected a float tensor");
  std::string ints = slurp(npy_of("int.npy", {40, 2}));  // 40 x 2 float64 = 40 x 4 int32: only the descr changes
  ints.replace(ints.find("<f8"), 3, "<i4");
  ints.replace(ints.find("(40, 2)"), 7, "(40, 4)");
  write_bytes(path("int.npy"), ints);
  expect_refused(run + path("int.npy"), ".npy dtype '<i4' is not supported");
  std::string fortran = slurp(npy_of("fortran.npy", {2, 40, 4}));
  fortran.replace(fortran.find("False"), 5, "True ");
  write_bytes(path("fortran.npy"), fortran);
  expect_refused(run + path("fortran.npy"), "Fortran");
  expect_refused(run + npy_of("t0.npy", {0, 4}), "array of shape [0, 4] holds no ticks: nothing to run");
  expect_refused(run + npy_of("s0.npy", {0, 40, 4}), "array of shape [0, 40, 4] holds no series: nothing to run");
  expect_refused(run + st_of("t0.safetensors", {2, 0, 4}, st::DType::BF16), "holds no ticks: nothing to run");
  expect_refused(run + npy_of("huge.npy", {2, 40, 4}, 1e300), "element [0, 0, 0] is 1.0000000000000001e+300, beyond float32's range");
  expect_refused(run + st_of("huge.safetensors", {40, 4}, st::DType::F64) + " --inputs-key nope", "no tensor 'nope'");
  expect_refused(run + st_of("huge.safetensors", {2, 40, 4}, st::DType::F64, -1e300),
                 "tensor 'inputs' element [0, 0, 0] is -1.0000000000000001e+300, beyond float32's range");
  expect_refused(run + path("missing.npy"), path("missing.npy") + ": no such file");
  expect_refused(run + path("missing.safetensors"), "missing.safetensors");
  expect_refused(run + path("series.csv"), "--inputs '" + path("series.csv") + "': expected a .npy or .safetensors file");
  expect_refused(run + path("npy"), "expected a .npy or .safetensors file");  // the extension, not the name
  expect_refused("run --model " + golden_model("tiny") + " --window 5 --inputs " + golden_file("tiny") + " --out " +
                     path("o.st"),
                 "--out '" + path("o.st") + "': expected a .npy or .safetensors file");
  expect_refused(run + npy_of("short.npy", {3, 4}), "--window 5 is longer than the series (3 ticks in '");
  expect_refused(run + golden_file("tiny") + " --progress --no-progress", "excludes");
  if (::geteuid() != 0) {  // root reads anything
    fs::permissions(npy_of("locked.npy", {40, 4}), fs::perms::none);
    expect_refused(run + path("locked.npy"), "cannot open (Permission denied)");
  }
  EXPECT_FALSE(fs::exists(path("o.npy")));
}

// The summary line (series, ticks, mode, W, backend, time, rate), nothing else when stdout is not a
// terminal; --progress forces the bar: redrawn with '\r', ending at 100% on a line of its own.
TEST_F(Cli, RunProgressAndSummary) {
  const Series3 s = tiny_series();
  npy::write_file(path("x.npy"), s.shape(), std::span<const float>(s.x));
  const std::string run = "run --model " + golden_model("tiny") + " --inputs " + path("x.npy") + " --out " + path("o.npy");
  Result r = hotpath(run + " --window 5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "a bar outside a terminal: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("hotpath run: 3 series x 40 ticks, window mode W=5, backend ref: 120 rows in ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(" rows/s) -> " + path("o.npy") + "\n"), std::string::npos) << r.err;
  r = hotpath(run + " --mode streaming --backend cpu --progress");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.err.front(), '\r') << r.err;
  const size_t nl = r.err.find('\n');
  ASSERT_NE(nl, std::string::npos) << r.err;
  const std::string bar = r.err.substr(0, nl), summary = r.err.substr(nl + 1);
  const std::string last = bar.substr(bar.rfind('\r') + 1);
  EXPECT_EQ(last.rfind("[####################] 100%  120/120 rows  ", 0), 0u) << last;
  EXPECT_NE(last.find(" rows/s  ETA 0:00"), std::string::npos) << last;
  EXPECT_EQ(summary.rfind("hotpath run: 3 series x 40 ticks, streaming mode, backend cpu: 120 rows in ", 0), 0u) << summary;
  EXPECT_EQ(std::count(summary.begin(), summary.end(), '\n'), 1) << summary;
}
