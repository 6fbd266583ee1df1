#include "hybrid/hybrid_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cpu/cpu_backend.hpp"
#include "cpu/window_feed.hpp"
#include "util/error.hpp"
#ifdef HOTPATH_HAVE_CUDA
#include "cuda/hybrid_precompute.hpp"
#endif

namespace hotpath {

#ifdef HOTPATH_HAVE_CUDA
namespace {

// The GPU precompute as the CPU critical step's feed.
class GpuFeed final : public cpu::WindowStateFeed {
 public:
  GpuFeed(const Model& model, const BackendOptions& o, const cpu::CriticalStateLayout& layout)
      : gpu_(model, o.mode, o.mode == Mode::window ? o.window : 1,
             cuda::ExportLayout{layout.lanes, layout.gate_floats, layout.layer_floats}, o.gpu.device, kLeaseMs,
             form_from_env(), tuning_from_env(o.precision.value_or(Precision::fp32))) {}  // the cpu half's default
  const float* wait(long long t, std::chrono::nanoseconds timeout, bool* waited, std::string* why) override {
    return gpu_.wait(t, timeout, waited, why);
  }
  void consume(std::span<const float> x, long long t) override { gpu_.send(x, t); }
  bool input_before_step() const override { return input_early_; }
  void reset() override { gpu_.restart(); }
  std::string describe() const override { return gpu_.describe(); }
  std::map<std::string, double> counters() const override {
    auto c = gpu_.counters();
    c["gpu_input_before_step"] = input_early_ ? 1.0 : 0.0;
    return c;
  }
  void clear_counters() override { gpu_.clear_counters(); }

 private:
  static constexpr double kLeaseMs = 1000;  // the kernel leaves a second after the host's heartbeat stops
  // HOTPATH_HYBRID_PRECOMPUTE=auto|fp32|mma (docs/hybrid.md): the GPU precompute's form, to compare them.
  static cuda::HybridForm form_from_env() {
    const char* v = std::getenv("HOTPATH_HYBRID_PRECOMPUTE");
    const std::string s = v ? v : "";
    if (s.empty() || s == "auto") return cuda::HybridForm::automatic;
    if (s == "fp32") return cuda::HybridForm::fp32;
    if (s == "mma") return cuda::HybridForm::mma;
    throw Error("HOTPATH_HYBRID_PRECOMPUTE='" + s + "': auto, fp32 or mma");
  }
  // HOTPATH_HYBRID_SEND=early|late (docs/hybrid.md): x_t to the GPU before the critical step (its round runs
  // while the CPU answers; the default) or after it, to compare them.
  static bool early_from_env() {
    const char* v = std::getenv("HOTPATH_HYBRID_SEND");
    const std::string s = v ? v : "";
    if (s.empty() || s == "early") return true;
    if (s == "late") return false;
    throw Error("HOTPATH_HYBRID_SEND='" + s + "': early or late");
  }
  // HOTPATH_HYBRID_TUNE=rows=N,fence=block|round,barrier=fence|release,input=feeder|mirror,last=split|whole,
  // cluster=1|2|4|8,stage=loads|tma,products=fp16|exact,blocks=N
  // (docs/hybrid.md): the kernel's variants
  // (cuda::HybridTuning), to compare them; unset: the defaults. products=fp16 only where the critical step
  // rounds coarser than fp16 (bf16, int8): with the fp32 step it would be the error's main source.
  static cuda::HybridTuning tuning_from_env(Precision precision) {
    cuda::HybridTuning t;
    const char* v = std::getenv("HOTPATH_HYBRID_TUNE");
    const std::string all = v ? v : "";
    auto bad = [&](const std::string& item) {
      return Error("HOTPATH_HYBRID_TUNE='" + all + "': '" + item +
                   "' (comma-separated rows=1.." + std::to_string(cuda::HybridTuning::kMaxStageRows) +
                   ", fence=block|round, barrier=fence|release, input=feeder|mirror, last=split|whole, cluster=1|2|4|8, "
                   "stage=loads|tma, products=fp16|exact, blocks=1..4096)");
    };
    size_t at = 0;
    while (!all.empty() && at <= all.size()) {  // an empty item anywhere (",", "a,,b", "a,") is refused
      const size_t end = std::min(all.find(',', at), all.size());
      const std::string item = all.substr(at, end - at);
      at = end + 1;
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key == "rows" && value.size() == 1 && value[0] >= '1' && value[0] <= '0' + cuda::HybridTuning::kMaxStageRows)
        t.stage_rows = value[0] - '0';
      else if (key == "fence" && (value == "block" || value == "round"))
        t.round_fence = value == "round";
      else if (key == "barrier" && (value == "fence" || value == "release"))
        t.release_barrier = value == "release";
      else if (key == "input" && (value == "feeder" || value == "mirror"))
        t.input_mirror = value == "mirror";
      else if (key == "last" && (value == "split" || value == "whole"))
        t.last_whole = value == "whole";
      else if (key == "cluster" && (value == "1" || value == "2" || value == "4" || value == "8"))
        t.stage_cluster = value[0] - '0';
      else if (key == "stage" && (value == "loads" || value == "tma"))
        t.stage_tma = value == "tma";
      else if (key == "products" && (value == "fp16" || value == "exact")) {
        if (value == "fp16" && precision == Precision::fp32)
          throw Error("HOTPATH_HYBRID_TUNE='" + all + "': 'products=fp16' with the fp32 critical step (fp16 operands "
                      "round coarser than its own bound; bf16 or int8)");
        t.fp16_products = value == "fp16";
      }
      else if (key == "blocks" && !value.empty() && value.size() <= 4 &&
               value.find_first_not_of("0123456789") == std::string::npos && value[0] != '0' && std::stoi(value) <= 4096)
        t.max_blocks = std::stoi(value);
      else
        throw bad(item);
    }
    return t;
  }
  bool input_early_ = early_from_env();  // read first: a bad value is refused before the GPU is looked for
  cuda::HybridPrecompute gpu_;
};

}  // namespace
#endif

std::unique_ptr<Backend> make_hybrid_backend(const Model& model, const BackendOptions& options) {
#ifdef HOTPATH_HAVE_CUDA
  return make_cpu_backend_fed(model, options, "hybrid", [&](const cpu::CriticalStateLayout& layout) {
    return std::make_unique<GpuFeed>(model, options, layout);
  });
#else
  // the cpu half's own checks (precision, mode) first, as with CUDA; then the GPU half that is not here
  return make_cpu_backend_fed(model, options, "hybrid", [](const cpu::CriticalStateLayout&) -> std::unique_ptr<cpu::WindowStateFeed> {
    throw UnsupportedError("backend hybrid: this hotpath was built without CUDA (its precompute runs on a GPU)");
  });
#endif
}

}  // namespace hotpath
