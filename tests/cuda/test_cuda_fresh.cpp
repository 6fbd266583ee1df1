// The fresh-window server (cuda/fresh_server.hpp, kernels/fresh/): whole windows through a persistent kernel's
// mailbox, against the float64 reference.
//
// Tolerance: the precision's bound in docs/model.md (fp16 3e-4, bf16 2e-3): the weights are rounded to the half
// type; x and h enter the tensor cores as hi + lo halves (~22 bits), c, the gates and every sum stay fp32.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "common/random_model.hpp"
#include "cuda/batch_runner.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels/fresh/lstm_fresh.hpp"
#include "cuda/cuda_backend.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"

namespace hotpath {
namespace {

bool gpu(std::string* why) { return cuda::device_available(why); }

// Windows of `rows` rows on the runner: its server answers (when `served`) within the precision's bound.
double fresh_error(cuda::BatchRunner& runner, const Model& m, size_t rows, size_t W, uint64_t seed, bool served) {
  const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
  const auto x = reference::normal_inputs(rows * W * I, seed);
  std::vector<float> z(rows * O, std::nanf(""));
  runner.fresh(x.data(), rows, W, z.data());
  EXPECT_EQ(runner.stats().fresh_server, served) << "rows " << rows << " W " << W;
  const auto want = reference::batch(m, std::span<const float>(x), rows, W);
  return reference::normalized_error(std::vector<double>(z.begin(), z.end()), want);
}

// --- no GPU needed ------------------------------------------------------------------------------------

TEST(FreshPlan, ShapesBeyondTheKernelSayWhy) {
  // checked before the device is asked
  EXPECT_EQ(cuda::fresh_plan(32, 256, 2, 1, 50, false, 0).rows, 0);
  EXPECT_NE(std::string(cuda::fresh_plan(32, 256, 2, 1, 50, false, 0).why).find("128 units"), std::string::npos);
  EXPECT_NE(std::string(cuda::fresh_plan(32, 64, 5, 1, 50, false, 0).why).find("4 layers"), std::string::npos);
  EXPECT_EQ(cuda::launch_fresh(cuda::FreshParams{}, nullptr), cudaErrorInvalidValue);
}

// --- GPU --------------------------------------------------------------------------------------------------

// The zoo's small shapes in both precisions: one pass (1 row, a full pass), several passes (the last part-
// filled), a window shorter than the model's, and a call beyond the server's rows (the throughput kernels).
TEST(CudaFreshServer, SmallZooShapesEveryRowCount) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  for (const Precision prec : {Precision::fp16, Precision::bf16})
    for (const std::string name : {"lstm_s", "nv_small", "stac_a", "vollo_tiny"}) {
      const Model m = *zoo_model(name);
      const size_t W = size_t(find_zoo(name)->config.window.value_or(1));
      cuda::BatchTuning tuning;
      tuning.fresh_rows = 9;
      cuda::BatchRunner runner(m, prec, 0, tuning);
      ASSERT_EQ(runner.fresh_server_rows(), 9) << name << ": " << runner.fresh_server_why();
      for (const size_t rows : {size_t(1), size_t(2), size_t(4), size_t(5), size_t(9)}) {
        const double err = fresh_error(runner, m, rows, W, 3 + rows, true);
        EXPECT_LE(err, error_bound(prec)) << name << " rows " << rows;
        std::printf("[fresh server] %s %s rows %zu: error %.2e\n", name.c_str(), precision_name(prec), rows, err);
      }
      if (W > 8) EXPECT_LE(fresh_error(runner, m, 3, W - 7, 21, true), error_bound(prec)) << name << " short window";
      EXPECT_LE(fresh_error(runner, m, 10, W, 22, false), error_bound(prec)) << name << " beyond the server";
      EXPECT_LE(fresh_error(runner, m, 1, W, 23, true), error_bound(prec)) << name << " after";
    }
}

// Random shapes: every layer count the kernel takes (1-4 blocks a cluster), unpadded H and I, many outputs,
// windows from one step to several groups, with and without biases.
TEST(CudaFreshServer, RandomShapesEveryLayerCount) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  struct Shape {
    int I, H, L, O, W;
    bool bias;
  };
  for (const Shape s : {Shape{9, 33, 3, 5, 13, true}, Shape{16, 40, 1, 33, 7, false}, Shape{32, 64, 4, 2, 3, true},
                        Shape{5, 128, 2, 1, 1, true}, Shape{40, 96, 2, 3, 21, true}, Shape{3, 8, 4, 1, 30, false}})
    for (const Precision prec : {Precision::fp16, Precision::bf16}) {
      Model m = test_support::random_model(s.I, s.H, s.L, s.O, s.bias, s.bias, 100 + uint64_t(s.H));
      m.config.window = s.W;
      cuda::BatchTuning tuning;
      tuning.fresh_rows = 7;
      cuda::BatchRunner runner(m, prec, 0, tuning);
      ASSERT_GT(runner.fresh_server_rows(), 0) << runner.fresh_server_why();
      for (const size_t rows : {size_t(1), size_t(3), size_t(7)}) {
        const double err = fresh_error(runner, m, rows, size_t(s.W), 50 + rows, true);
        EXPECT_LE(err, error_bound(prec)) << "I" << s.I << " H" << s.H << " L" << s.L << " O" << s.O << " W" << s.W
                                          << " rows " << rows << " " << precision_name(prec);
      }
    }
}

// A batch backend asked for the server (its default reach: one pass of the kernel) sends it the calls that fit
// and the others to the throughput kernels, many calls in a row with varying rows; by default it is not asked
// for; a shape beyond it (lstm_m: H 256) says why.
TEST(CudaFreshServer, TheBatchBackendSendsItTheCallsOfOnePass) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const size_t W = 50, I = 32;
  BackendOptions bo;
  bo.mode = Mode::batch;
  bo.window = int(W);
  EXPECT_EQ(CudaOptions{}.batch_fresh_rows, 0);  // off unless asked for (docs/cuda.md)
  CudaOptions co;
  co.batch_fresh_rows = -1;
  auto engine = make_cuda_backend(m, bo, co);
  double served_rows = 0;
  for (int call = 0; call < 300; ++call) {
    const size_t rows = size_t(1 + call % 8);
    const auto x = reference::normal_inputs(rows * W * I, 1000 + uint64_t(call));
    std::vector<float> z(rows);
    engine->run_batch(x, rows, W, z);
    if (call % 37 == 0) {
      const auto want = reference::batch(m, std::span<const float>(x), rows, W);
      EXPECT_LE(reference::normalized_error(std::vector<double>(z.begin(), z.end()), want), error_bound(Precision::fp16));
      const auto c = engine->counters();
      served_rows = c.at("batch_fresh_server_rows");
      EXPECT_EQ(c.at("batch_fresh_server"), double(rows) <= served_rows ? 1.0 : 0.0) << "call " << call;
    }
  }
  EXPECT_GE(served_rows, 1.0);  // one pass: up to kFreshMaxRows
  EXPECT_LE(served_rows, double(cuda::kFreshMaxRows));
  cuda::BatchRunner beyond(*zoo_model("lstm_m"), Precision::fp16, 0, cuda::BatchTuning{.fresh_rows = -1});
  EXPECT_EQ(beyond.fresh_server_rows(), 0);
  EXPECT_NE(beyond.fresh_server_why().find("128 units"), std::string::npos) << beyond.fresh_server_why();
}

// The kernel leaves after its idle time (its SMs back to the device) and the next call launches it again, with
// answers as before; the kernel's earlier forms (kept to measure against: the ring's waits a pair at a time, W_hh's
// tiles counted at run time) answer the same.
TEST(CudaFreshServer, LeavesWhenIdleAndComesBackOnTheNextCall) {
  std::string why;
  if (!gpu(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  const Model m = *zoo_model("lstm_s");
  const size_t W = 50, I = 32;
  for (const unsigned form : {0u, unsigned(cuda::kFreshRingSerial), unsigned(cuda::kFreshDynamicK)}) {
    const std::string named = " form " + std::to_string(form);
    cuda::BatchTuning tuning;
    tuning.fresh_rows = 2;
    tuning.fresh_form = form;
    cuda::BatchRunner runner(m, Precision::fp16, 0, tuning);
    EXPECT_LE(fresh_error(runner, m, 1, W, 71, true), error_bound(Precision::fp16));
    EXPECT_EQ(runner.fresh_server_profile().at("fresh_server_launches"), 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // > its idle time (10 ms)
    // two calls back to back (the float64 references after: they take longer than the idle time)
    const auto x2 = reference::normal_inputs(2 * W * I, 72), x1 = reference::normal_inputs(W * I, 73);
    std::vector<float> z2(2, std::nanf("")), z1(1, std::nanf(""));
    runner.fresh(x2.data(), 2, W, z2.data());
    EXPECT_TRUE(runner.stats().fresh_server);
    runner.fresh(x1.data(), 1, W, z1.data());
    EXPECT_TRUE(runner.stats().fresh_server);
    // the kernel copies its time sums after its answer: a moment for the last request's
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto prof = runner.fresh_server_profile();
    EXPECT_EQ(prof.at("fresh_server_launches"), 2.0) << named;
    EXPECT_EQ(prof.at("fresh_server_requests"), 2.0);  // by the second launch
    EXPECT_EQ(prof.at("fresh_server_l0_steps"), 50.0);  // a request of 2 rows, one of 1: one pass of 50 steps each
    for (const auto& [x, z, rows] : {std::tuple{&x2, &z2, size_t(2)}, std::tuple{&x1, &z1, size_t(1)}}) {
      const auto want = reference::batch(m, std::span<const float>(*x), rows, W);
      EXPECT_LE(reference::normalized_error(std::vector<double>(z->begin(), z->end()), want), error_bound(Precision::fp16))
          << "after idle, rows " << rows << named;
    }
  }
}

}  // namespace
}  // namespace hotpath
