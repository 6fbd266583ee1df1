#include "engine/fallback.hpp"

#include <string>

#include "engine/shadow.hpp"
#include "util/error.hpp"

namespace hotpath::engine {
namespace {

class FallbackBackend final : public Backend {
 public:
  FallbackBackend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> shadow, int shadow_cpu,
                  std::vector<int> staging)
      : Backend(primary->config(), primary->options()),
        primary_(std::move(primary)),
        shadow_(std::make_unique<Shadow>(std::move(shadow), shadow_cpu, std::move(staging))) {}

  std::string name() const override { return primary_->name(); }
  std::string variant() const override { return primary_->variant(); }
  Precision precision() const override { return primary_->precision(); }
  long long ticks() const override { return primary_->ticks(); }

  void step(std::span<const float> x, std::span<float> out) override {
    // A bad tick reaches neither backend: both keep their state.
    check_tick_input(x, primary_->ticks());
    if (out.size() < size_t(config().output_size))
      throw Error("output span holds " + std::to_string(out.size()) + " floats, need " +
                  std::to_string(config().output_size));
    if (!broken_.empty()) throw BackendError("fallback: " + broken_ + "; reset the engine");
    const long long n = shadow_->submit(x);
    std::string why;
    bool answered = false;
    try {
      answered = primary_->try_step(x, out, &why);
    } catch (const std::exception& e) {
      // The shadow has the tick and the primary may not: the two streams no longer match until reset.
      broken_ = std::string("the ") + primary_->name() + " backend failed on a tick (" + e.what() + ")";
      throw;
    }
    last_from_primary_ = answered;
    if (answered) return;
    shadow_->result(n, out);
    ++fallback_answers_;
  }
  // The primary's exact outputs (ref) when it answered; none after a shadow's answer.
  std::span<const double> last_output_f64() const override {
    return last_from_primary_ ? primary_->last_output_f64() : std::span<const double>();
  }
  bool try_step(std::span<const float> x, std::span<float> out, std::string*) override {
    step(x, out);
    return true;
  }
  void finish_precompute() override {
    std::string why;
    (void)primary_->try_finish_precompute(&why);  // not ready: the next step falls back if still late
  }
  void reset() override {
    primary_->reset();
    shadow_->reset();
    broken_.clear();
    last_from_primary_ = false;
  }
  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override {
    primary_->run_batch(x, batch, window, out);
  }
  // A backtest is throughput, not latency: the primary runs it alone, and both end reset.
  void backtest(std::span<const float> x, size_t series, size_t ticks, BacktestOutput out,
                std::atomic<size_t>* done) override {
    primary_->backtest(x, series, ticks, out, done);
    reset();
  }
  void run_batch_on_device(const float* x, size_t batch, size_t window, float* out) override {
    primary_->run_batch_on_device(x, batch, window, out);
  }
  void backtest_on_device(const float* x, size_t series, size_t ticks, float* out, std::atomic<size_t>* done) override {
    primary_->backtest_on_device(x, series, ticks, out, done);
    reset();
  }
  std::map<std::string, double> counters() const override {
    auto c = primary_->counters();
    c["fallback_answers"] = double(fallback_answers_);
    return c;
  }
  void clear_counters() override {
    primary_->clear_counters();
    fallback_answers_ = 0;
  }
  std::map<std::string, std::string> facts() const override {
    auto f = primary_->facts();
    f["fallback"] = shadow_->backend().name();
    return f;
  }
  void settle_threads() override {
    primary_->settle_threads();
    shadow_->settle();
  }

 private:
  std::unique_ptr<Backend> primary_;
  std::unique_ptr<Shadow> shadow_;
  long long fallback_answers_ = 0;
  bool last_from_primary_ = false;
  std::string broken_;  // why the primary and the shadow no longer follow the same stream
};

}  // namespace

std::unique_ptr<Backend> with_fallback(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> shadow, int shadow_cpu,
                                       std::vector<int> staging) {
  if (!primary || !shadow) throw Error("fallback: both a primary and a shadow backend are needed");
  return std::make_unique<FallbackBackend>(std::move(primary), std::move(shadow), shadow_cpu, std::move(staging));
}

}  // namespace hotpath::engine
