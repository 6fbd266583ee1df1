// The `hotpath` subcommands. Each adds itself to the CLI11 app; its callback throws hotpath::Error for
// bad input (main prints one line, exits 2) and CLI::RuntimeError(code) for other exit codes.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "model/loader.hpp"

namespace hotpath::cli {

// --lstm-prefix, --head-prefix and --ignore-tensors, into `load` (every command that takes --model).
void add_load_options(CLI::App* cmd, LoadOptions& load);

// The command line as typed, recorded in benchmark reports.
void set_command_line(int argc, char** argv);
const std::string& command_line();

void add_models_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_scaler_command(CLI::App& app);  // scaler_command.cpp

}  // namespace hotpath::cli
