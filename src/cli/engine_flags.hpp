// The engine's flags, bound to one EngineOptions (engine/engine.hpp, backend/options.hpp): the command
// line's one mapping onto the options the C ABI and Python fill too. Every choice is parsed by its
// enum's name table as it is read; numbers by the one number grammar (util/cli_number.hpp).
#pragma once
#include <CLI/CLI.hpp>

#include "engine/engine.hpp"

namespace hotpath::cli {

struct EngineFlagSet {
  // --timeout-us, --fallback and --no-warm: what a run of live ticks reads (bench's latency modes)
  bool live = false;
};

// --backend (its default: o.backend as given), --precision, --cpuset, --device, --variant, --kernel,
// --batch-rows, --scaler, --cpu-options, and the `set`'s, into `o` (which must outlive parsing).
void add_engine_flags(CLI::App* cmd, EngineOptions& o, EngineFlagSet set = {});

// The flags add_engine_flags adds for `set` that a run of live ticks alone reads (for commands that
// refuse them in other modes).
inline constexpr const char* kLiveEngineFlags[] = {"--timeout-us", "--fallback", "--no-warm", "--tick-trace"};

}  // namespace hotpath::cli
