#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <unistd.h>

#include "llm/common/text.hpp"
#include "llm/workloads/dataset.hpp"
#include "util/error.hpp"

namespace hotpath::llm {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hotpath_llm_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(LlmDataset, ParsesPromptMessagesAndReference) {
  auto a = parse_dataset_line(R"({"prompt": "summarize this filing", "output_tokens": 64, "reference": "ok"})");
  ASSERT_TRUE(a.prompt);
  EXPECT_EQ(a.input_words, 3u);
  EXPECT_EQ(a.output_tokens, 64);
  EXPECT_EQ(*a.reference, "ok");
  auto b = parse_dataset_line(
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q one"}], "output_tokens": 8})");
  ASSERT_TRUE(b.messages);
  EXPECT_EQ(b.input_words, 4u);
  EXPECT_FALSE(b.reference);
}

TEST(LlmDataset, BadRecordsNameTheLine) {
  const std::string p = temp_path("bad.jsonl");
  {
    std::ofstream o(p);
    o << R"({"prompt": "a", "output_tokens": 1})" << "\n\n" << R"({"prompt": "b"})" << "\n";
  }
  try {
    load_dataset(p);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("output_tokens"), std::string::npos) << e.what();
  }
  std::remove(p.c_str());
  EXPECT_THROW(parse_dataset_line("{not json"), Error);
  EXPECT_THROW(parse_dataset_line(R"({"output_tokens": 3})"), Error);
  EXPECT_THROW(parse_dataset_line(R"({"prompt": "x", "output_tokens": 0})"), Error);
  EXPECT_THROW(load_dataset(temp_path("missing.jsonl")), Error);
}

TEST(LlmDataset, SynthIsReproducibleAndRoundTrips) {
  SynthParams p;
  p.requests = 200;
  p.input_mean = 50;
  p.input_stdev = 10;
  p.output_mean = 30;
  p.output_stdev = 5;
  p.seed = 9;
  const auto a = synth_dataset(p), b = synth_dataset(p);
  ASSERT_EQ(a.size(), 200u);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(to_jsonl_line(a[i]), to_jsonl_line(b[i]));
  p.seed = 10;
  EXPECT_NE(to_jsonl_line(synth_dataset(p)[0]), to_jsonl_line(a[0]));

  const std::string path = temp_path("synth.jsonl");
  write_jsonl(a, path);
  const auto back = load_dataset(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(back[i].input_words, count_words(*a[i].prompt));
    EXPECT_EQ(back[i].input_words, a[i].input_words);
    EXPECT_EQ(back[i].output_tokens, a[i].output_tokens);
  }
}

TEST(LlmDataset, SynthLengthsFollowTheNormalsClampedAtOne) {
  SynthParams p;
  p.requests = 4000;
  p.input_mean = 300;
  p.input_stdev = 40;
  p.output_mean = 100;
  p.output_stdev = 20;
  const auto items = synth_dataset(p);
  double si = 0, so = 0, si2 = 0;
  for (const auto& it : items) {
    si += it.input_words;
    si2 += double(it.input_words) * it.input_words;
    so += it.output_tokens;
  }
  const double n = items.size(), mi = si / n;
  // Standard error of the mean is 40/sqrt(4000) ~ 0.63 words: 3 words is ~5 standard errors.
  EXPECT_NEAR(mi, 300, 3);
  EXPECT_NEAR(so / n, 100, 1.5);
  EXPECT_NEAR(std::sqrt(si2 / n - mi * mi), 40, 2);
  p.input_mean = 2;
  p.input_stdev = 50;  // most draws are negative: all clamp to >= 1
  p.output_mean = 1;
  p.output_stdev = 50;
  for (const auto& it : synth_dataset(p)) {
    ASSERT_GE(it.input_words, 1u);
    ASSERT_GE(it.output_tokens, 1);
  }
}

TEST(LlmDataset, RequestBodyAsksForUsageAndLength) {
  DatasetItem it = parse_dataset_line(R"({"prompt": "hello there", "output_tokens": 17})");
  auto chat = nlohmann::json::parse(build_request_body(it, Api::chat, "m", true));
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "hello there");
  EXPECT_EQ(chat["max_tokens"], 17);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_EQ(chat["ignore_eos"], true);
  auto comp = nlohmann::json::parse(build_request_body(it, Api::completions, "m", false));
  EXPECT_EQ(comp["prompt"], "hello there");
  EXPECT_FALSE(comp.contains("ignore_eos"));
  DatasetItem m = parse_dataset_line(
      R"({"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}], "output_tokens": 2})");
  EXPECT_EQ(nlohmann::json::parse(build_request_body(m, Api::completions, "m", false))["prompt"], "a\n\nb");
  EXPECT_EQ(nlohmann::json::parse(build_request_body(m, Api::chat, "m", false))["messages"].size(), 2u);
}

}  // namespace
}  // namespace hotpath::llm
