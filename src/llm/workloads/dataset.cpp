#include "llm/workloads/dataset.hpp"

#include <array>
#include <cstdint>
#include <cmath>
#include <fstream>

#include "llm/common/json_int.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/text.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace hotpath::llm {

std::size_t message_words(const nlohmann::json& messages) {
  std::size_t n = 0;
  for (const auto& m : messages) {
    const auto it = m.find("content");
    if (it != m.end() && it->is_string()) n += count_words(it->get_ref<const std::string&>());
  }
  return n;
}

DatasetItem parse_dataset_line(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw Error(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error("a record must be a JSON object");
  DatasetItem it;
  if (auto p = j.find("prompt"); p != j.end()) {
    if (!p->is_string()) throw Error("`prompt` must be a string");
    it.prompt = p->get<std::string>();
    it.input_words = count_words(*it.prompt);
  } else if (auto m = j.find("messages"); m != j.end()) {
    if (!m->is_array() || m->empty()) throw Error("`messages` must be a non-empty list");
    for (const auto& msg : *m) {
      if (!msg.is_object() || !msg.contains("role") || !msg.contains("content"))
        throw Error("each message needs `role` and `content`");
    }
    it.messages = *m;
    it.input_words = message_words(*m);
  } else {
    throw Error("a record needs `prompt` (string) or `messages` (chat list)");
  }
  it.output_tokens = static_cast<int>(json_int_in(j, "output_tokens", 1, kMaxOutputTokens).value_or(0));
  if (it.output_tokens < 1) throw Error("`output_tokens` must be an integer in [1, 2147483647]");
  if (auto r = j.find("reference"); r != j.end() && !r->is_null()) {
    if (!r->is_string()) throw Error("`reference` must be a string");
    it.reference = r->get<std::string>();
  }
  return it;
}

std::vector<DatasetItem> load_dataset(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open dataset " + path);
  std::vector<DatasetItem> items;
  std::string line;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      items.push_back(parse_dataset_line(line));
    } catch (const Error& e) {
      throw Error(path + ":" + std::to_string(lineno) + ": " + e.what());
    }
  }
  if (items.empty()) throw Error("dataset " + path + " has no records");
  return items;
}

namespace {
// Filing-flavoured vocabulary, so synthetic prompts look like the EDGAR text they stand in for.
constexpr std::array<const char*, 48> kVocab = {
    "revenue",   "operating", "income",     "net",       "fiscal",    "quarter",   "segment",
    "margin",    "liquidity", "capital",    "expenditure", "risk",    "factors",   "company",
    "shares",    "dividend",  "cash",       "flow",      "assets",    "liabilities", "equity",
    "debt",      "interest",  "rate",       "growth",    "decline",   "compared",  "year",
    "management", "discussion", "analysis", "results",   "financial", "statements", "reported",
    "increase",  "decrease",  "guidance",   "market",    "customers", "products",  "services",
    "acquisition", "goodwill", "impairment", "tax",      "expense",   "billion"};

long long draw_clamped(util::Rng& rng, double mean, double stdev, double max) {
  const double v = std::round(mean + stdev * rng.normal());
  return v < 1.0 ? 1 : static_cast<long long>(std::min(v, max));
}
}  // namespace

std::string synth_text(std::uint64_t seed, std::size_t n) {
  util::Rng words(seed);
  std::string text;
  text.reserve(n * 9);
  for (std::size_t w = 0; w < n; ++w) {
    if (w) text += ' ';
    text += kVocab[words.next() % kVocab.size()];
  }
  return text;
}

std::vector<DatasetItem> synth_dataset(const SynthParams& p) {
  // Written so that NaN fails every check.
  if (!(p.input_mean > 0 && p.input_mean <= kMaxInputWords)) throw Error("--input-mean must be in (0, 1000000] words");
  if (!(p.input_stdev >= 0 && p.input_stdev <= kMaxInputWords)) throw Error("--input-stdev must be in [0, 1000000] words");
  if (!(p.output_mean > 0 && p.output_mean <= kMaxOutputTokens))
    throw Error("--output-mean must be in (0, 2147483647] tokens");
  if (!(p.output_stdev >= 0 && p.output_stdev <= kMaxOutputTokens))
    throw Error("--output-stdev must be in [0, 2147483647] tokens");
  if (p.requests < 1 || p.requests > kMaxRequests) throw Error("--requests must be in [1, 10000000]");
  if (static_cast<double>(p.requests) * p.input_mean > kMaxSynthWords)
    throw Error("--requests x --input-mean must be at most 100000000 words (about 1 GB of prompts)");
  util::Rng lengths(p.seed);
  util::Rng words(util::splitmix64(p.seed ^ 0x5eed5eedULL));
  // The check above bounds the mean; a wide stdev can still draw far longer prompts, so every length
  // is drawn first (the same sequence as drawing them one request at a time) and the words actually
  // drawn are held to the same limit before any prompt is built.
  struct Lengths {
    std::int32_t in_words, out_tokens;
  };
  std::vector<Lengths> lens(p.requests);
  double total_words = 0;
  for (auto& l : lens) {
    l.in_words = static_cast<std::int32_t>(draw_clamped(lengths, p.input_mean, p.input_stdev, kMaxInputWords));
    l.out_tokens = static_cast<std::int32_t>(draw_clamped(lengths, p.output_mean, p.output_stdev, kMaxOutputTokens));
    total_words += l.in_words;
  }
  if (total_words > kMaxSynthWords)
    throw Error("the drawn prompt lengths add up to " + std::to_string(static_cast<long long>(total_words)) +
                " words, over 100000000 (about 1 GB); lower --requests, --input-mean or --input-stdev");
  std::vector<DatasetItem> out;
  out.reserve(p.requests);
  for (const Lengths& l : lens) {
    const long long in_words = l.in_words, out_tokens = l.out_tokens;
    std::string prompt;
    prompt.reserve(static_cast<std::size_t>(in_words) * 9);
    for (long long w = 0; w < in_words; ++w) {
      if (w) prompt += ' ';
      prompt += kVocab[words.next() % kVocab.size()];
    }
    DatasetItem it;
    it.prompt = std::move(prompt);
    it.input_words = static_cast<std::size_t>(in_words);
    it.output_tokens = static_cast<int>(out_tokens);
    out.push_back(std::move(it));
  }
  return out;
}

std::string to_jsonl_line(const DatasetItem& item) {
  nlohmann::json j;
  if (item.prompt) j["prompt"] = *item.prompt;
  if (item.messages) j["messages"] = *item.messages;
  j["output_tokens"] = item.output_tokens;
  if (item.reference) j["reference"] = *item.reference;
  return j.dump();
}

void write_jsonl(const std::vector<DatasetItem>& items, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write " + path);
  for (const auto& it : items) out << to_jsonl_line(it) << '\n';
  if (!out) throw Error("failed writing " + path);
}

std::string build_request_body(const DatasetItem& item, Api api, const std::string& model,
                               bool ignore_eos) {
  nlohmann::json j;
  j["model"] = model;
  if (api == Api::chat) {
    if (item.messages) {
      j["messages"] = *item.messages;
    } else {
      j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", *item.prompt}}});
    }
  } else {
    if (item.prompt) {
      j["prompt"] = *item.prompt;
    } else {
      std::string joined;
      for (const auto& m : *item.messages) {
        if (!joined.empty()) joined += "\n\n";
        if (m["content"].is_string()) joined += m["content"].get<std::string>();
      }
      j["prompt"] = joined;
    }
  }
  j["max_tokens"] = item.output_tokens;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (ignore_eos) j["ignore_eos"] = true;
  return j.dump();
}

}  // namespace hotpath::llm
