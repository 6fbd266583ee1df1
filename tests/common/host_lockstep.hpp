// A reference::LockstepF64 stepped on the host (FastF64::step_batch), for testing what drives one (the
// bench's check in chunks on the GPU) where there is no GPU: the same bits as the host's chunks.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "reference/lockstep_f64.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"

namespace hotpath::test_support {

class HostLockstep final : public reference::LockstepF64 {
 public:
  // fail_after >= 0: the step after that many throws (a GPU that fails part-way through a check).
  HostLockstep(const Model& m, int states, std::atomic<long long>* steps, long long fail_after = -1)
      : f64_(m), states_(size_t(states), reference::LstmState(m.config)), steps_(steps), fail_after_(fail_after) {}
  int states() const override { return int(states_.size()); }
  void step(const double* xs) override {
    if (fail_after_ >= 0 && taken_++ >= fail_after_) throw Error("cuda: the test GPU fell off the bus");
    const size_t I = size_t(f64_.config().input_size);
    std::vector<const double*> x(states_.size());
    std::vector<reference::LstmState*> s(states_.size());
    for (size_t i = 0; i < states_.size(); ++i) {
      x[i] = xs + i * I;
      s[i] = &states_[i];
    }
    f64_.step_batch(x, s);
    if (steps_) steps_->fetch_add(1);
  }
  void reset() override {
    for (auto& st : states_) st.clear();
  }
  void heads(double* z) override {
    const size_t O = size_t(f64_.config().output_size);
    for (size_t i = 0; i < states_.size(); ++i) f64_.head(states_[i], std::span<double>(z + i * O, O));
  }
  reference::LstmState state(int s) override { return states_.at(size_t(s)); }
  std::string where() const override { return "host (test)"; }

 private:
  reference::FastF64 f64_;
  std::vector<reference::LstmState> states_;
  std::atomic<long long>* steps_;
  long long fail_after_, taken_ = 0;
};

// Makes HostLockstep states, counting their steps into *steps (may be null).
inline reference::LockstepF64Maker host_lockstep(std::atomic<long long>* steps = nullptr) {
  return [steps](const Model& m, int states) { return std::make_unique<HostLockstep>(m, states, steps); };
}
// Makes HostLockstep states whose step fails after `steps` steps.
inline reference::LockstepF64Maker failing_lockstep(long long steps) {
  return [steps](const Model& m, int states) { return std::make_unique<HostLockstep>(m, states, nullptr, steps); };
}
// A maker that cannot make any (a GPU without the memory): the checker falls back to the host's cores.
inline reference::LockstepF64Maker refusing_lockstep() {
  return [](const Model&, int) -> std::unique_ptr<reference::LockstepF64> {
    throw Error("the float64 check on the test GPU needs 9 MiB, 1 MiB are free");
  };
}

}  // namespace hotpath::test_support
