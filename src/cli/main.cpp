// hotpath: microsecond LSTM inference on trading signals, and the benchmarks that prove it.
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>
#include <string>

#include "cli/commands.hpp"
#include "engine/gpu.hpp"
#include "llm/llm_cli.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"hotpath: microsecond LSTM inference on trading signals, and the benchmarks that prove it"};
  app.set_version_flag("--version", std::string("hotpath ") + HOTPATH_VERSION + " (commit " + HOTPATH_GIT_COMMIT +
                                        "); GPU kernels: " + hotpath::gpu::served());
  app.require_subcommand(1);
  // The usage line names the command, not where this binary lies (the pip package runs it from inside
  // site-packages).
  app.name("hotpath");
  hotpath::cli::set_command_line(argc, argv);
  hotpath::util::remove_temporary_files_on_signals();  // an interrupted run leaves no OUT.tmp-PID-N behind
  hotpath::cli::add_models_command(app);
  hotpath::cli::add_info_command(app);
  hotpath::cli::add_run_command(app);
  hotpath::cli::add_verify_command(app);
  hotpath::cli::add_export_command(app);
  hotpath::cli::add_bench_command(app);
  hotpath::cli::add_scaler_command(app);
  hotpath::llm::add_llm_commands(app);
  // ONNX import reads the graph with the onnx Python package: the Python package's `hotpath` command
  // answers it, and runs this binary for everything else.
  if (argc > 1 && std::string(argv[1]) == "import") {
    std::cerr << "hotpath: error: 'hotpath import' is in the Python package: pip install '.[onnx]' and use the "
                 "hotpath command it installs, or python3 -m hotpath import --onnx MODEL.onnx --out MODEL.safetensors\n";
    return 2;
  }
  // CLI11 would only say that a subcommand is required; name the word it did not know.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::cerr << "hotpath: error: unknown command '" << argv[1]
                << "' (commands: models, info, run, verify, export, bench, scaler, llm)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command chose its exit code and has said why
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "hotpath: error: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const hotpath::Error& e) {
    std::cerr << "hotpath: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "hotpath: error: out of memory\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hotpath: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
