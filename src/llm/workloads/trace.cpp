#include "llm/workloads/trace.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "llm/common/json_int.hpp"
#include "llm/common/limits.hpp"
#include "llm/common/text.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace hotpath::llm {

namespace {

struct Raw {
  double t_s = 0;
  DatasetItem item;
};

// The text of one hash-id block, cached: long traces reuse a few thousand blocks many times.
class Blocks {
 public:
  explicit Blocks(std::size_t words) : words_(words) {}
  const std::string& get(long long id) {
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(id, synth_text(util::splitmix64(static_cast<std::uint64_t>(id) ^ 0xb10cb10cULL), words_)).first->second;
  }

 private:
  std::size_t words_;
  std::unordered_map<long long, std::string> cache_;
};

// The first `n` words of `text` (words are separated by single spaces in synthetic text).
void append_words(std::string& out, const std::string& text, std::size_t n) {
  if (n == 0) return;
  std::size_t pos = 0;
  for (std::size_t k = 0; k < n && pos != std::string::npos; ++k) pos = text.find(' ', pos + (k ? 1 : 0));
  if (!out.empty()) out += ' ';
  out.append(text, 0, pos == std::string::npos ? text.size() : pos);
}

Raw parse_line(const std::string& line, std::size_t lineno, const TraceParams& p, Blocks& blocks) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error("a record must be a JSON object");
  Raw r;
  const bool has_ms = j.contains("timestamp"), has_s = j.contains("t");
  if (has_ms == has_s) throw Error("a record needs exactly one of `timestamp` (ms) and `t` (s)");
  const auto& tv = has_ms ? j["timestamp"] : j["t"];
  if (!tv.is_number()) throw Error(std::string("`") + (has_ms ? "timestamp" : "t") + "` must be a number");
  r.t_s = tv.get<double>() * (has_ms ? 1e-3 : 1.0);
  if (!(r.t_s >= 0 && r.t_s <= kMaxDurationS)) throw Error("the arrival time must be in [0, 10000000] s");

  if (j.contains("prompt") || j.contains("messages")) {
    nlohmann::json rec = j;
    rec.erase("t");
    rec.erase("timestamp");
    if (!rec.contains("output_tokens") && rec.contains("output_length")) rec["output_tokens"] = rec["output_length"];
    r.item = parse_dataset_line(rec.dump());
    return r;
  }
  const char* in_key = j.contains("input_length") ? "input_length" : "input_words";
  const long long in_words = json_int_in(j, in_key, 1, static_cast<long long>(kMaxInputWords)).value_or(0);
  if (in_words < 1) throw Error("a record needs `prompt`, `messages` or `input_length` (an integer in [1, 1000000])");
  const char* out_key = j.contains("output_length") ? "output_length" : "output_tokens";
  const long long out_tokens = json_int_in(j, out_key, 1, kMaxOutputTokens).value_or(0);
  if (out_tokens < 1) throw Error(std::string("`") + out_key + "` must be an integer in [1, 2147483647]");
  std::string prompt;
  std::size_t have = 0;
  const std::size_t want = static_cast<std::size_t>(in_words);
  if (auto h = j.find("hash_ids"); h != j.end()) {
    if (!h->is_array()) throw Error("`hash_ids` must be a list of integers");
    for (const auto& id : *h) {
      if (!id.is_number_integer()) throw Error("`hash_ids` must be a list of integers");
      if (have >= want) break;
      const std::size_t take = std::min(p.block_words, want - have);
      append_words(prompt, blocks.get(id.get<long long>()), take);
      have += take;
    }
  }
  // Words the blocks do not cover are unique to this request.
  if (have < want) append_words(prompt, synth_text(util::splitmix64(lineno * 0x9e37ULL + 17), want - have), want - have);
  r.item.prompt = std::move(prompt);
  r.item.input_words = want;
  r.item.output_tokens = static_cast<int>(out_tokens);
  return r;
}

}  // namespace

Trace parse_trace(const std::string& text, const std::string& name, const TraceParams& p) {
  if (!(p.speed >= 1e-3 && p.speed <= 1e6)) throw Error("--trace-speed must be in [0.001, 1000000]");
  if (p.block_words < 1 || p.block_words > 1'000'000) throw Error("--trace-block-words must be in [1, 1000000]");
  std::istringstream in(text);
  std::vector<Raw> raw;
  Blocks blocks(p.block_words);
  std::string line;
  std::size_t lineno = 0;
  double words = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      if (raw.size() >= kMaxRequests) throw Error("more than 10000000 records");
      raw.push_back(parse_line(line, lineno, p, blocks));
      words += static_cast<double>(raw.back().item.input_words);
      if (words > kMaxSynthWords) throw Error("the prompts add up to more than 100000000 words (about 1 GB)");
    } catch (const Error& e) {
      throw Error(name + ":" + std::to_string(lineno) + ": " + e.what());
    }
  }
  if (raw.empty()) throw Error("trace " + name + " has no records");
  std::vector<std::size_t> order(raw.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return raw[a].t_s < raw[b].t_s; });
  const double t0 = raw[order.front()].t_s;
  Trace t;
  t.times_s.reserve(raw.size());
  t.items.reserve(raw.size());
  for (std::size_t i : order) {
    t.times_s.push_back((raw[i].t_s - t0) / p.speed);
    t.items.push_back(std::move(raw[i].item));
  }
  return t;
}

Trace load_trace(const std::string& path, const TraceParams& params) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open trace " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_trace(ss.str(), path, params);
}

}  // namespace hotpath::llm
