#include "reference/reference_backend.hpp"

#include <algorithm>

#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(const Model& model, const BackendOptions& options)
      : Backend(model.config, options),
        model_(model),
        inc_(model_, options.mode == Mode::streaming, options.mode == Mode::streaming ? 1 : options.window),
        scaler_(model, options.scaler),
        xd_(size_t(model.config.input_size)) {}

  std::string name() const override { return "ref"; }
  std::string variant() const override { return "float64-plain"; }
  Precision precision() const override { return Precision::fp64; }

  void step(std::span<const float> x, std::span<float> out) override {
    check_tick_input(x, ticks_);
    scaler_.scale(x, xd_.data());  // the scaled input, in float64
    last_ = inc_.tick(std::span<const double>(xd_));
    std::copy(last_.begin(), last_.end(), out.begin());
    ++ticks_;
  }
  void finish_precompute() override { scaler_.prepare(); }
  void reset() override {
    inc_.reset();
    scaler_.reset();
    ticks_ = 0;
  }
  long long ticks() const override { return ticks_; }
  std::span<const double> last_output_f64() const override { return last_; }

  void run_batch(std::span<const float> x, size_t batch, size_t window, std::span<float> out) override {
    std::vector<double> xs(x.size());
    scaler_.scale_batch(x, xs.data());
    const auto z = reference::batch(model_, std::span<const double>(xs), batch, window);
    std::copy(z.begin(), z.end(), out.begin());
  }

 private:
  Model model_;  // owned copy: the incremental reference keeps a reference to it
  reference::Incremental inc_;
  InputScaler scaler_;
  std::vector<double> xd_;
  long long ticks_ = 0;
  std::vector<double> last_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const Model& model, const BackendOptions& options) {
  if (options.precision && *options.precision != Precision::fp64)
    throw Error(std::string("backend ref computes in float64 only; --precision ") +
                precision_name(*options.precision) + " is not available for it");
  // Window mode keeps W float64 states of L x 2H values (reference::Incremental).
  if (options.mode == Mode::window)
    check_window_state("ref", options.window,
                       double(options.window) * 2.0 * model.config.num_layers * model.config.hidden_size * 8.0);
  return std::make_unique<ReferenceBackend>(model, options);
}

}  // namespace hotpath
