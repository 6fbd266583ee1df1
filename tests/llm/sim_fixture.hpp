// What the client tests against serve-sim share: a data set, a config aimed at a server, a timing.
#pragma once
#include <cstddef>
#include <vector>

#include "llm/client/client.hpp"
#include "llm/sim/sim_server.hpp"

namespace hotpath::llm::test {

// `n` three-word prompts asking for `out_tokens` tokens each.
inline std::vector<DatasetItem> items(std::size_t n, int out_tokens) {
  std::vector<DatasetItem> v(n);
  for (auto& it : v) {
    it.prompt = "summarize the filing";
    it.input_words = 3;
    it.output_tokens = out_tokens;
  }
  return v;
}

inline BenchConfig config_for(const SimServer& s) {
  BenchConfig c;
  c.endpoint = s.base_url();
  c.model = "sim";
  c.timeout_s = 20;
  return c;
}

inline SimConfig sim(double ttft_ms, double tpot_ms) {
  SimConfig c;
  c.ttft_ms = ttft_ms;
  c.tpot_ms = tpot_ms;
  return c;
}

}  // namespace hotpath::llm::test
