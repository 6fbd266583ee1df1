// Timestamped request traces, replayed open-loop at their own arrival times (`--trace`).
//
// JSONL, one request per line, in either of two forms:
//   Mooncake (the public trace format): {"timestamp": MS, "input_length": N, "output_length": M,
//     "hash_ids": [h1, h2, ...]}. The prompt is N synthetic words built from blocks of
//     `block_words` words, one block per hash id: the same id gives the same text, so requests
//     that share a prefix in the trace share it on the wire and a server's prefix cache sees it.
//   hotpath: {"t": SECONDS, ...a data set record (prompt | messages, output_tokens)...} or
//     {"t": SECONDS, "input_words": N, "output_tokens": M}.
// Arrival times are shifted so the earliest is 0, divided by `speed`, and sorted (stable).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "llm/workloads/dataset.hpp"

namespace hotpath::llm {

struct TraceParams {
  double speed = 1;              // > 1 replays faster
  std::size_t block_words = 512;  // words per hash-id block (Mooncake's blocks are 512 tokens)
};

struct Trace {
  std::vector<double> times_s;      // sorted, first = 0
  std::vector<DatasetItem> items;   // items[i] is sent at times_s[i]
};

// Throws hotpath::Error naming the file and line of the first bad record.
Trace load_trace(const std::string& path, const TraceParams& params);
Trace parse_trace(const std::string& text, const std::string& name, const TraceParams& params);

}  // namespace hotpath::llm
