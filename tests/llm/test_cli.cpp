#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
#include <unistd.h>

#include "llm/llm_cli.hpp"
#include "llm/workloads/dataset.hpp"
#include "util/cli_number.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

std::unique_ptr<CLI::App> make_app() {
  auto app = std::make_unique<CLI::App>("hotpath");
  app->require_subcommand(1);
  add_llm_commands(*app);
  return app;
}

#ifdef HOTPATH_HAVE_CURL
TEST(LlmCli, DatasetSynthWritesFile) {
  const std::string p = (std::filesystem::temp_directory_path() / ("hotpath_llm_cli_" + std::to_string(getpid()))).string();
  auto app = make_app();
  app->parse("llm dataset synth --requests 7 --input-mean 20 --input-stdev 3 --output-mean 9 --seed 2 --out " + p,
            false);
  const auto items = load_dataset(p);
  std::filesystem::remove(p);
  EXPECT_EQ(items.size(), 7u);
  EXPECT_EQ(items[0].output_tokens, 9);  // stdev 0: exactly the mean
}

TEST(LlmCli, BadFlagsAreUserErrors) {
  {
    auto app = make_app();
    EXPECT_THROW(app->parse("llm bench --model m --dataset x.jsonl", false), CLI::ParseError);  // no --endpoint
  }
  {
    auto app = make_app();
    EXPECT_THROW(app->parse("llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset x --mode fast", false), Error);
  }
  {
    auto app = make_app();
    EXPECT_THROW(app->parse("llm bench --endpoint ftp://x --model m --dataset x", false), Error);
  }
  {
    auto app = make_app();  // interactive without a rate
    EXPECT_THROW(app->parse("llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset x --mode interactive", false),
                 Error);
  }
  {
    auto app = make_app();
    EXPECT_THROW(app->parse("llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset /no/such.jsonl", false),
                 Error);
  }
}
// Every output is checked before the first request (a run's results are never lost at its end): a folder
// that cannot take the file, an output that is the data set or another output. The endpoint (port 1)
// would refuse any request: the error is the output's, so nothing was sent.
TEST(LlmCli, OutputsAreCheckedBeforeAnyRequest) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("hotpath_llm_out_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/d.jsonl";
  {
    auto app = make_app();
    app->parse("llm dataset synth --requests 3 --input-mean 5 --output-mean 4 --out " + data, false);
  }
  const std::string bench = "llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset " + data + " ";
  auto refusal = [&](const std::string& flags) {
    auto app = make_app();
    try {
      app->parse(bench + flags, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(refusal("--json " + dir + "/nope/x.json").find("--json '" + dir + "/nope/x.json': cannot create a file there"),
            std::string::npos);
  EXPECT_NE(refusal("--csv " + data).find("is the same file as --dataset"), std::string::npos);
  EXPECT_NE(refusal("--json " + dir + "/r.json --csv " + dir + "/r.json").find("is the same file as --json"),
            std::string::npos);
  EXPECT_NE(refusal("--report /dev/null").find("is a device"), std::string::npos);
  const auto before = load_dataset(data);
  EXPECT_EQ(before.size(), 3u);
  std::filesystem::remove_all(dir);
}
#endif

// Every subcommand under `app`, depth first.
void all_subcommands(CLI::App* app, std::vector<CLI::App*>& out) {
  for (CLI::App* sub : app->get_subcommands({})) {
    out.push_back(sub);
    all_subcommands(sub, out);
  }
}

// Thrown by every command of a quiet app once its options are parsed and stored.
struct QuietStop {};

// The app with every command stopped right after its options are parsed (a parse-complete callback that
// throws, which parse() lets through), so no action runs. The actions are not replaced: each owns the
// storage its options write into, which replacing it would free while CLI11 still writes there.
std::unique_ptr<CLI::App> make_quiet_app(std::vector<CLI::App*>& commands) {
  auto app = make_app();
  all_subcommands(app.get(), commands);
  for (CLI::App* c : commands) c->parse_complete_callback([] { throw QuietStop{}; });
  return app;
}
void quiet_parse(CLI::App& app, const std::string& args) {
  try {
    app.parse(args, false);
  } catch (const QuietStop&) {
  }
}

// One number grammar for every numeric flag of every llm command, found by walking the commands so
// that a new flag is covered too: a numeric option shows its range and reads its value through the
// grammar's transform (a check's rewrite is dropped by CLI11, which then reads "010" as octal).
TEST(LlmCli, EveryNumericFlagReadsDecimalNumbersOnly) {
  std::vector<CLI::App*> commands;
  auto app = make_quiet_app(commands);
  std::size_t numeric = 0;
  for (CLI::App* c : commands) {
    for (const CLI::Option* o : c->get_options()) {
      const std::string type = o->get_type_name();
      const bool integer = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
      if (!integer && type.rfind("FLOAT", 0) != 0) continue;
      ++numeric;
      const std::string flag = o->get_name();
      EXPECT_TRUE(type.find(" in [") != std::string::npos || type.find(" in (") != std::string::npos)
          << c->get_name() << " " << flag << ": " << type;
      const CLI::Validator* v = nullptr;
      try {
        v = const_cast<CLI::Option*>(o)->get_validator(util::kNumberValidator);
      } catch (const CLI::OptionNotFound&) {
      }
      ASSERT_NE(v, nullptr) << c->get_name() << " " << flag << " skips the number grammar";
      EXPECT_TRUE(v->get_modifying()) << c->get_name() << " " << flag;
      // The value that CLI11 converts is the canonical decimal text: "0" + N reads as N, never octal, for
      // an N inside the flag's range (10, else 1, else its top); bad text is refused naming the flag.
      const std::string bounds = type.substr(type.find_first_of("[(") + 1);
      const std::size_t comma = bounds.find(", ");
      const std::string top = bounds.substr(comma + 2, bounds.find(']') - comma - 2);
      const double lo = std::stod(bounds), hi = std::stod(top);
      const bool open = type.find(" in (") != std::string::npos;
      const auto inside = [&](double x) { return (open ? x > lo : x >= lo) && x <= hi; };
      const std::string n = inside(10) ? "10" : inside(1) ? "1" : top;
      std::string padded = "0" + n;
      EXPECT_EQ((*v)(padded), "") << flag << " '0" << n << "'";
      EXPECT_EQ(padded, n) << flag;
      for (std::string bad : {"0x10", "", "1e999", "inf", "nan", " 1", "+-1", "0x1p4", "1,5", "18446744073709551616"}) {
        const std::string text = bad;
        const std::string why = (*v)(bad);
        EXPECT_NE(why.find(std::string("must be a decimal ") + (integer ? "integer" : "number")), std::string::npos)
            << flag << " '" << text << "': " << why;
        EXPECT_NE(why.find("(got '" + text + "')"), std::string::npos) << why;
      }
      if (integer) {
        for (std::string bad : {"1e1", "1.0", "0b1", "-1"}) EXPECT_NE((*v)(bad), "") << flag << " '" << bad << "'";
      }
    }
  }
  EXPECT_GE(numeric, 45u);  // llm bench 23, dataset synth 6, serve-sim 16
}

TEST(LlmCli, IntegersAreDecimalEverywhere) {
  std::vector<CLI::App*> commands;
  {
    auto app = make_quiet_app(commands);
    quiet_parse(*app, "llm serve-sim --port 010 --seed 010 --error-status 0499 --ttft-ms 010 --max-requests 010");
    CLI::App* sim = app->get_subcommand("llm")->get_subcommand("serve-sim");
    EXPECT_EQ(sim->get_option("--port")->as<int>(), 10);  // was port 8
    EXPECT_EQ(sim->get_option("--seed")->as<std::uint64_t>(), 10u);
    EXPECT_EQ(sim->get_option("--error-status")->as<int>(), 499);
    EXPECT_EQ(sim->get_option("--ttft-ms")->as<double>(), 10.0);
    EXPECT_EQ(sim->get_option("--max-requests")->as<std::uint64_t>(), 10u);
  }
  {
    commands.clear();
    auto app = make_quiet_app(commands);
    quiet_parse(*app, "llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset x --requests 010 --warmup 010 "
               "--max-concurrency 010 --seed 010 --threads 02 --rate 010");
    CLI::App* bench = app->get_subcommand("llm")->get_subcommand("bench");
    for (const char* flag : {"--requests", "--warmup", "--max-concurrency", "--seed"})
      EXPECT_EQ(bench->get_option(flag)->as<std::uint64_t>(), 10u) << flag;
    EXPECT_EQ(bench->get_option("--threads")->as<int>(), 2);
    EXPECT_EQ(bench->get_option("--rate")->as<double>(), 10.0);
  }
}

#ifndef HOTPATH_HAVE_CURL
TEST(LlmCli, WithoutCurlEveryLlmCommandSaysSo) {
  for (const char* cmd : {"llm bench --endpoint http://127.0.0.1:1/v1 --model m --dataset x", "llm serve-sim",
                          "llm dataset synth --requests 1 --input-mean 1 --output-mean 1 --out /dev/null", "llm"}) {
    auto app = make_app();
    try {
      app->parse(cmd, false);
      ADD_FAILURE() << cmd << ": no error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), kNoCurlMessage);
    }
  }
}
#endif

}  // namespace
}  // namespace hotpath::llm
