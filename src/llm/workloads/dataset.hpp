// Benchmark data sets: JSONL, one request per line.
//   {"prompt": "...", "output_tokens": 128, "reference": "..."}          (reference optional)
//   {"messages": [{"role": "user", "content": "..."}], "output_tokens": 128}
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::llm {

enum class Api { chat, completions };

struct DatasetItem {
  std::optional<std::string> prompt;      // text prompt
  std::optional<nlohmann::json> messages;  // chat message list
  int output_tokens = 0;                   // requested output length, sent as max_tokens
  std::optional<std::string> reference;   // an answer to compare the output with
  std::size_t input_words = 0;            // words in the prompt (or in all message contents)
};

// Words in the string contents of a chat message list (what `input_words` counts for `messages`).
std::size_t message_words(const nlohmann::json& messages);

// Throws hotpath::Error naming the file and line of the first bad record.
std::vector<DatasetItem> load_dataset(const std::string& path);
DatasetItem parse_dataset_line(const std::string& line);  // throws hotpath::Error

struct SynthParams {
  std::size_t requests = 100;
  double input_mean = 512, input_stdev = 0;    // words
  double output_mean = 128, output_stdev = 0;  // tokens
  std::uint64_t seed = 0;
};

// Input lengths (words) and requested output lengths (tokens) drawn from normal distributions,
// rounded and clamped to >= 1; the same params give the same bytes on every platform.
std::vector<DatasetItem> synth_dataset(const SynthParams& p);
// `words` vocabulary words drawn from `seed`: the text of synthetic prompts and trace blocks.
std::string synth_text(std::uint64_t seed, std::size_t words);
std::string to_jsonl_line(const DatasetItem& item);
void write_jsonl(const std::vector<DatasetItem>& items, const std::string& path);

// The JSON body of one streaming request. The prompt of a chat item sent to /completions is its
// message contents joined by blank lines; a prompt item sent to /chat/completions becomes one user
// message.
std::string build_request_body(const DatasetItem& item, Api api, const std::string& model,
                               bool ignore_eos);

}  // namespace hotpath::llm
