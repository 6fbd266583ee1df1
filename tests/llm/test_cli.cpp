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
