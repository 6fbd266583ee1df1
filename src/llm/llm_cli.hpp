// `hotpath llm ...`: the LLM server benchmark (bench), its data sets (dataset synth) and its
// simulated server (serve-sim). See docs/llm.md.
#pragma once
#include <CLI/CLI.hpp>

namespace hotpath::llm {

// Adds subcommand `llm` with `bench`, `dataset synth` and `serve-sim` to `root`. Callbacks throw
// hotpath::Error for bad input and CLI::RuntimeError(code) for other exit codes. In a build without
// libcurl every `llm` command throws hotpath::Error saying so.
void add_llm_commands(CLI::App& root);

// The message a build without libcurl gives for every `hotpath llm` command.
inline constexpr const char* kNoCurlMessage =
    "hotpath was built without libcurl, so `hotpath llm` is unavailable; install libcurl's development "
    "headers (e.g. libcurl4-openssl-dev) and rebuild";

}  // namespace hotpath::llm
