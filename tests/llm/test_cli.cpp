#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <unistd.h>

#include "llm/dataset.hpp"
#include "llm/llm_cli.hpp"
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
#else
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
