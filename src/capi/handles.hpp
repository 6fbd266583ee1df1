// What the C ABI's opaque handles hold. Internal: the C ABI (capi.cpp) and, through the static library,
// the tests and the overhead benchmark, which time the C call and Engine::step on one engine.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.hpp"
#include "engine/instances.hpp"
#include "hotpath/hotpath.h"

struct hotpath_model {
  hotpath::Model model;
};

struct hotpath_engine {
  hotpath_engine(hotpath::Model model, const hotpath::EngineOptions& options)
      : own(std::make_unique<hotpath::Engine>(std::move(model), options)), engine(*own) {
    describe_sizes();
    describe();
  }
  hotpath_engine(hotpath::Model model, std::unique_ptr<hotpath::Backend> served_by)
      : own(std::make_unique<hotpath::Engine>(std::move(model), std::move(served_by))), engine(*own) {
    describe_sizes();
    describe();
  }
  // An engine owned elsewhere (an instance of a hotpath_instances set): hotpath_engine_close leaves it.
  explicit hotpath_engine(hotpath::Engine& borrowed) : engine(borrowed) {
    describe_sizes();
    describe();
  }
  void describe_sizes() {
    input_size = size_t(engine.input_size());
    output_size = size_t(engine.output_size());
  }

  std::unique_ptr<hotpath::Engine> own;  // null: borrowed
  hotpath::Engine& engine;
  // Sizes the hot path checks, read once.
  size_t input_size = 0;
  size_t output_size = 0;
  // What hotpath_engine_get_info hands out. A swap may change the variant and precision: a new
  // description is made then, and the older ones are kept, so every string handed out stays valid while
  // the engine is open.
  struct Description {
    std::string backend, variant, precision, mode, choice_note, scaler;
    int window = 0;
  };
  const Description& description() const {
    if (!current || described_swaps != engine.swaps()) describe();
    return *current;
  }
  // The latest snapshots of hotpath_engine_counters / hotpath_engine_facts.
  std::vector<std::pair<std::string, double>> counters;
  std::vector<std::pair<std::string, std::string>> facts;

  // A string hotpath_engine_metrics hands out (a model id, a backend or variant name), valid while the
  // engine is open: a swap changes them, so each one seen is kept. Any thread (a scrape beside the
  // tick thread), hence the lock.
  const char* kept(const std::string& s) const {
    std::lock_guard lock(kept_mutex_);
    return kept_.insert(s).first->c_str();  // a set's nodes never move
  }

 private:
  // A cache of what the engine says (hence mutable: get_info takes a const engine).
  mutable std::vector<std::unique_ptr<Description>> descriptions;
  mutable Description* current = nullptr;
  mutable long long described_swaps = -1;
  mutable std::mutex kept_mutex_;
  mutable std::set<std::string> kept_;
  void describe() const {
    auto d = std::make_unique<Description>();
    d->backend = engine.backend_name();
    d->variant = engine.variant();
    d->precision = hotpath::precision_name(engine.precision());
    d->mode = hotpath::mode_name(engine.mode());
    d->choice_note = engine.choice_note();
    d->scaler = hotpath::scaler_name(engine.scaler());
    d->window = engine.window();
    current = d.get();
    descriptions.push_back(std::move(d));
    described_swaps = engine.swaps();
  }
};

struct hotpath_instances {
  hotpath_instances(const hotpath::Model& model, const hotpath::EngineOptions& options,
                    const hotpath::engine::InstanceOptions& instances)
      : set(model, options, instances) {
    for (size_t k = 0; k < set.size(); ++k) handles.push_back(std::make_unique<hotpath_engine>(set[k]));
  }
  hotpath::engine::InstanceSet set;
  std::vector<std::unique_ptr<hotpath_engine>> handles;  // one per instance, over set's engines
};
