// What the C ABI's opaque handles hold. Internal: the C ABI (capi.cpp) and, through the static library,
// the tests and the overhead benchmark, which time the C call and Engine::step on one engine.
#pragma once
#include <cstddef>
#include <memory>
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
    describe();
  }
  hotpath_engine(hotpath::Model model, std::unique_ptr<hotpath::Backend> served_by)
      : own(std::make_unique<hotpath::Engine>(std::move(model), std::move(served_by))), engine(*own) {
    describe();
  }
  // An engine owned elsewhere (an instance of a hotpath_instances set): hotpath_engine_close leaves it.
  explicit hotpath_engine(hotpath::Engine& borrowed) : engine(borrowed) { describe(); }

  std::unique_ptr<hotpath::Engine> own;  // null: borrowed
  hotpath::Engine& engine;
  // Sizes the hot path checks, read once.
  size_t input_size = 0;
  size_t output_size = 0;
  // The strings hotpath_engine_get_info hands out, valid while the engine is open.
  std::string backend, variant, precision, mode, choice_note, scaler;
  int window = 0;
  // The latest snapshots of hotpath_engine_counters / hotpath_engine_facts.
  std::vector<std::pair<std::string, double>> counters;
  std::vector<std::pair<std::string, std::string>> facts;

 private:
  void describe() {
    input_size = size_t(engine.input_size());
    output_size = size_t(engine.output_size());
    backend = engine.backend_name();
    variant = engine.variant();
    precision = hotpath::precision_name(engine.precision());
    mode = hotpath::mode_name(engine.mode());
    choice_note = engine.choice_note();
    scaler = hotpath::scaler_name(engine.scaler());
    window = engine.window();
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
