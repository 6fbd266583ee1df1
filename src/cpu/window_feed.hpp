// The window state a CPU critical step reads each tick, delivered by another producer instead of the CPU's
// own precompute (the hybrid backend: a GPU advances the open windows, docs/hybrid.md). The producer writes
// the state in the critical step's own layout, so the step reads it as it reads its own.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

namespace hotpath::cpu {

// One tick's state: for each layer l, at l * layer_floats, P = W_hh,l h + b_l of the window that completes
// at that tick as [nb][4 gates][lanes] floats (unit u, gate g at (u / lanes) * 4 * lanes + g * lanes +
// u % lanes; units H..Hp-1 are padding and stay zero), then its c as [Hp] floats at gate_floats.
struct CriticalStateLayout {
  int layers = 0, input = 0, hidden = 0;  // L, I, H
  int lanes = 0, blocks = 0, padded = 0;  // the CPU's vector lanes, nb = Hp / lanes, Hp
  size_t gate_floats = 0;                 // nb * 4 * lanes
  size_t layer_floats = 0;                // gate_floats + Hp, rounded up to whole cache lines
  size_t tick_floats() const { return layer_floats * size_t(layers); }
  size_t p_index(int unit, int gate) const {
    return size_t(unit / lanes) * 4 * size_t(lanes) + size_t(gate) * size_t(lanes) + size_t(unit % lanes);
  }
};

class WindowStateFeed {
 public:
  virtual ~WindowStateFeed() = default;
  // The state for tick t (layout above), once the producer has it: null when it has not come within
  // `timeout` (*why then says why). *waited: it was not there at the first look. Valid until the next
  // consume() or reset(). Tick 0's state is every window fresh (P = b, c = 0), ready without any consume().
  virtual const float* wait(long long t, std::chrono::nanoseconds timeout, bool* waited, std::string* why) = 0;
  // Tick t's input (scaled as the critical step uses it, `input` floats): every open window advances by it,
  // and the state for tick t + 1 follows. Given after the critical step, or before it where
  // input_before_step() says so (the producer then works while the step runs; tick t's state was copied out
  // before, so the producer may overwrite what wait() returned).
  virtual void consume(std::span<const float> x, long long t) = 0;
  virtual bool input_before_step() const { return false; }
  // Every window fresh again: the next tick is t = 0.
  virtual void reset() = 0;
  // What produces the state, for the report (e.g. "cuda precompute on NVIDIA H100 80GB HBM3, 127 blocks").
  virtual std::string describe() const = 0;
  virtual std::map<std::string, double> counters() const { return {}; }
  virtual void clear_counters() {}
};

// Makes the feed for a backend once its layout is known (the CPU's lanes come from the ISA it chose).
using WindowFeedMaker = std::function<std::unique_ptr<WindowStateFeed>(const CriticalStateLayout&)>;

}  // namespace hotpath::cpu
