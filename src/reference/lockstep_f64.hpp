// Many independent float64 streaming states stepped together by arithmetic that lives elsewhere (the GPU:
// cuda/lockstep_f64.hpp), for checking a long streaming run in chunks side by side when the host's cores
// would take longer than the run did (README, the float64 check of `hotpath bench`).
//
// Every implementation computes what lstm_step does, in float64, and each gate row in FastF64's order (the
// bias b_ih + b_hh, then w_ih[r][k] x[k] for k = 0, 1, ..., then w_hh[r][k] h[k], a multiply and an add
// each, no fused multiply-add); only the activations' last bits may differ from libm's. The states never
// mix: a state's values do not depend on how many others are stepped beside it.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "model/model.hpp"
#include "reference/reference.hpp"

namespace hotpath::reference {

class LockstepF64 {
 public:
  virtual ~LockstepF64() = default;
  virtual int states() const = 0;
  // One step of every state, state s on xs[s * I .. s * I + I) (I the model's input size). xs may be
  // changed once the call returns; the step itself may still be running.
  virtual void step(const double* xs) = 0;
  // Every state back to zero.
  virtual void reset() = 0;
  // Every state's head after the steps so far: [states][O] into z.
  virtual void heads(double* z) = 0;
  // State s's h and c after the steps so far.
  virtual LstmState state(int s) = 0;
  // Where the arithmetic runs, in words, for reports ("gpu 0: NVIDIA H100 80GB HBM3").
  virtual std::string where() const = 0;
};

// Makes a LockstepF64 of `states` zero states for a model (throws hotpath::Error when it cannot, saying why).
using LockstepF64Maker = std::function<std::unique_ptr<LockstepF64>(const Model& model, int states)>;

}  // namespace hotpath::reference
