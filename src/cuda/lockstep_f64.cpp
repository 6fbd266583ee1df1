// The float64 lockstep states on the GPU (cuda/lockstep_f64.hpp): the host side. A step is, per layer, one
// GEMM of the states' inputs by the layer's weights onto its biases, then the cells; the head on demand
// (kernels/check/: the layouts, and why each gate row's value is FastF64's).
#include "cuda/lockstep_f64.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/cuda_raii.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/check/lockstep_kernels.hpp"
#include "cuda/memory.hpp"
#include "util/error.hpp"

namespace hotpath::cuda {
namespace {

// Pinned host memory of n doubles (cuda/memory.hpp: kept for reuse on free).
class PinnedDoubles {
 public:
  explicit PinnedDoubles(size_t n) : n_(std::max<size_t>(n, 1)) {
    p_ = static_cast<double*>(pinned_alloc(n_ * sizeof(double), cudaHostAllocDefault));
  }
  ~PinnedDoubles() { pinned_free(p_, n_ * sizeof(double), cudaHostAllocDefault); }
  PinnedDoubles(const PinnedDoubles&) = delete;
  PinnedDoubles& operator=(const PinnedDoubles&) = delete;
  double* get() const { return p_; }

 private:
  double* p_ = nullptr;
  size_t n_;
};

class GpuLockstepF64 final : public reference::LockstepF64 {
 public:
  GpuLockstepF64(const Model& m, int states, int device)
      : cfg_(m.config), S_(std::max(1, states)), device_(device) {
    std::string why;
    if (!device_available(&why, device)) throw UnsupportedError("the float64 check on the GPU: " + why);
    HOTPATH_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    HOTPATH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    where_ = "gpu " + std::to_string(device) + ": " + prop.name;
    sms_ = prop.multiProcessorCount;
    const int H = cfg_.hidden_size, L = cfg_.num_layers, O = cfg_.output_size;
    // what it will hold, against the device's free memory: a refusal that gives the bytes, not a failed
    // allocation half-way
    size_t bytes = size_t(S_) * 4 * H + size_t(O) * (H + 1) + size_t(S_) * O;
    for (int l = 0; l < L; ++l) {
      const size_t K = size_t(cfg_.layer_input_size(l)) + H;
      bytes += 4 * size_t(H) * (K + 1) + size_t(S_) * (K + H);
    }
    bytes *= sizeof(double);
    size_t free_bytes = 0, total = 0;
    HOTPATH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (bytes > free_bytes)
      throw Error("the float64 check of " + std::to_string(S_) + " states on " + where_ + " needs " +
                  std::to_string(bytes >> 20) + " MiB, " + std::to_string(free_bytes >> 20) + " MiB are free");
    stream_ = Stream(cudaStreamNonBlocking);
    HOTPATH_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    // the pinned buffers before any upload: nothing is in flight when an allocation fails
    in_.emplace(size_t(S_) * cfg_.input_size);
    out_.emplace(size_t(S_) * O);
    for (int l = 0; l < L; ++l) {
      const LstmLayer& w = m.layers[size_t(l)];
      const size_t n_in = size_t(cfg_.layer_input_size(l)), K = n_in + H, R = 4 * size_t(H);
      std::vector<double> packed(R * K);
      for (size_t r = 0; r < R; ++r) {
        std::copy_n(w.w_ih.begin() + ptrdiff_t(r * n_in), n_in, packed.begin() + ptrdiff_t(r * K));
        std::copy_n(w.w_hh.begin() + ptrdiff_t(r * H), H, packed.begin() + ptrdiff_t(r * K + n_in));
      }
      const std::vector<double> bias = w.bias_sum(H);
      Layer layer{DeviceBuffer<double>(R * K), DeviceBuffer<double>(R), DeviceBuffer<double>(size_t(S_) * K),
                  DeviceBuffer<double>(size_t(S_) * H), int(n_in), int(K)};
      layer.w.upload(packed.data(), packed.size(), stream_.get());
      layer.bias.upload(bias.data(), R, stream_.get());
      layer.x.zero(stream_.get());
      layer.c.zero(stream_.get());
      HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // the host vectors go out of scope
      layers_.push_back(std::move(layer));
    }
    gates_ = DeviceBuffer<double>(size_t(S_) * 4 * H);
    head_w_ = DeviceBuffer<double>(size_t(O) * H);
    head_b_ = DeviceBuffer<double>(size_t(O));
    z_ = DeviceBuffer<double>(size_t(S_) * O);
    std::vector<double> hb(size_t(O), 0.0);
    if (!m.head_b.empty()) std::copy(m.head_b.begin(), m.head_b.end(), hb.begin());
    head_w_.upload(m.head_w.data(), size_t(O) * H, stream_.get());
    head_b_.upload(hb.data(), size_t(O), stream_.get());
    HOTPATH_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  int states() const override { return S_; }
  std::string where() const override { return where_; }

  void step(const double* xs) override {
    HOTPATH_CUDA_CHECK(cudaSetDevice(device_));
    const int H = cfg_.hidden_size, L = cfg_.num_layers, I = cfg_.input_size;
    cudaStream_t st = stream_.get();
    // the previous step's copy out of in_ is done before in_ is written again (its kernels may still run:
    // this step's queue behind them)
    HOTPATH_CUDA_CHECK(cudaEventSynchronize(copied_));
    std::copy_n(xs, size_t(S_) * I, in_->get());
    Layer& first = layers_.front();
    HOTPATH_CUDA_CHECK(cudaMemcpy2DAsync(first.x.get(), size_t(first.K) * sizeof(double), in_->get(), size_t(I) * sizeof(double),
                                         size_t(I) * sizeof(double), size_t(S_), cudaMemcpyHostToDevice, st));
    HOTPATH_CUDA_CHECK(cudaEventRecord(copied_, st));
    const int R = 4 * H;
    for (int l = 0; l < L; ++l) {
      Layer& y = layers_[size_t(l)];
      launch_gates_f64(y.x.get(), S_, y.K, y.w.get(), y.bias.get(), R, gates_.get(), sms_, st);
      Layer* next = l + 1 < L ? &layers_[size_t(l) + 1] : nullptr;
      launch_cells_f64(gates_.get(), S_, H, y.c.get(), y.x.get(), y.K, y.n_in, next ? next->x.get() : nullptr,
                       next ? next->K : 0, st);
    }
    cached_ = false;
  }

  void reset() override {
    HOTPATH_CUDA_CHECK(cudaSetDevice(device_));
    for (Layer& y : layers_) {
      y.x.zero(stream_.get());
      y.c.zero(stream_.get());
    }
    cached_ = false;
  }

  void heads(double* z) override {
    HOTPATH_CUDA_CHECK(cudaSetDevice(device_));
    const int H = cfg_.hidden_size, O = cfg_.output_size;
    cudaStream_t st = stream_.get();
    const Layer& last = layers_.back();
    launch_head_f64(last.x.get(), S_, last.K, last.n_in, H, head_w_.get(), head_b_.get(), O, z_.get(), st);
    HOTPATH_CUDA_CHECK(cudaMemcpyAsync(out_->get(), z_.get(), size_t(S_) * O * sizeof(double), cudaMemcpyDeviceToHost, st));
    HOTPATH_CUDA_CHECK(cudaStreamSynchronize(st));
    std::copy_n(out_->get(), size_t(S_) * O, z);
  }

  reference::LstmState state(int s) override {
    if (s < 0 || s >= S_) throw Error("lockstep state " + std::to_string(s) + " of " + std::to_string(S_));
    const int H = cfg_.hidden_size, L = cfg_.num_layers;
    if (!cached_) {  // every state at once: the checker asks for many at the same step
      HOTPATH_CUDA_CHECK(cudaSetDevice(device_));
      cudaStream_t st = stream_.get();
      h_.resize(size_t(L) * S_ * H);
      c_.resize(size_t(L) * S_ * H);
      for (int l = 0; l < L; ++l) {
        const Layer& y = layers_[size_t(l)];
        HOTPATH_CUDA_CHECK(cudaMemcpy2DAsync(h_.data() + size_t(l) * S_ * H, size_t(H) * sizeof(double), y.x.get() + y.n_in,
                                             size_t(y.K) * sizeof(double), size_t(H) * sizeof(double), size_t(S_),
                                             cudaMemcpyDeviceToHost, st));
        HOTPATH_CUDA_CHECK(cudaMemcpyAsync(c_.data() + size_t(l) * S_ * H, y.c.get(), size_t(S_) * H * sizeof(double),
                                           cudaMemcpyDeviceToHost, st));
      }
      HOTPATH_CUDA_CHECK(cudaStreamSynchronize(st));
      cached_ = true;
    }
    reference::LstmState out(cfg_);
    for (int l = 0; l < L; ++l) {
      const size_t at = (size_t(l) * S_ + s) * H;
      std::copy_n(h_.begin() + ptrdiff_t(at), H, out.h[size_t(l)].begin());
      std::copy_n(c_.begin() + ptrdiff_t(at), H, out.c[size_t(l)].begin());
    }
    return out;
  }

  ~GpuLockstepF64() override {
    HOTPATH_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));  // the buffers are freed on this device's stream
    if (stream_) HOTPATH_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_.get()));  // before the buffers go
    if (copied_) HOTPATH_CUDA_CHECK_NOTHROW(cudaEventDestroy(copied_));
  }

 private:
  struct Layer {
    DeviceBuffer<double> w, bias, x, c;  // [4H][K], [4H], [S][K] (the input, then the own h), [S][H]
    int n_in, K;
  };
  ModelConfig cfg_;
  int S_, device_, sms_ = 1;
  std::string where_;
  Stream stream_;
  cudaEvent_t copied_ = nullptr;  // after the last step's copy of the inputs out of in_
  std::vector<Layer> layers_;
  DeviceBuffer<double> gates_, head_w_, head_b_, z_;
  std::optional<PinnedDoubles> in_, out_;
  std::vector<double> h_, c_;  // every state's h and c, [L][S][H], as of the last step when cached_
  bool cached_ = false;
};

}  // namespace

std::unique_ptr<reference::LockstepF64> make_lockstep_f64(const Model& model, int states, int device) {
  // the kernels' grids index states in int and in a grid's y dimension
  if (states < 1 || states > kMaxLockstepStates)
    throw Error("the float64 check on the GPU takes 1 to " + std::to_string(kMaxLockstepStates) + " states, not " +
                std::to_string(states));
  return std::make_unique<GpuLockstepF64>(model, states, device);
}

}  // namespace hotpath::cuda
