// Words: the one unit of output the harness counts. A word is a maximal run of characters that are
// not ASCII whitespace (space, \t, \n, \v, \f, \r). No tokenizer is involved, so the count is the
// same for every server and model; token counts come only from the server's `usage`.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hotpath::llm {

constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::size_t count_words(std::string_view text);

// ASCII lower case (header names, URL schemes and hosts).
std::string ascii_lower(std::string s);
// `v` with `prec` digits after the point ("%.*f"): how reports, tables and charts print numbers.
std::string fixed(double v, int prec);
std::vector<std::string_view> split_words(std::string_view text);

// Stamps each word with the arrival time of the chunk that completes it, i.e. the chunk that
// delivers its last character. A word split across chunks ("hel" + "lo world") is stamped with
// the second chunk; a word whose end is only known when the next chunk starts with a space is
// still stamped with the chunk that carried its last character, so a tokenizer that puts the space
// in front of tokens (" world") does not delay every stamp by one token.
// Times are doubles in any unit the caller chooses (the client uses seconds since the run's start).
class WordClock {
 public:
  void feed(std::string_view text, double t);
  // Ends the stream: a word still open is complete.
  void finish();

  std::size_t words() const { return words_; }
  // Number of distinct stamps among the words (stamps never decrease, so this counts changes).
  std::size_t distinct_stamps() const { return distinct_; }
  double first_stamp() const { return first_; }
  double last_stamp() const { return last_; }
  // (words - 1) / (last - first): words per second seen by this user, in words per time unit.
  // Only defined when distinct_stamps() >= 2.
  bool has_rate() const { return distinct_ >= 2; }
  double rate() const { return static_cast<double>(words_ - 1) / (last_ - first_); }

 private:
  void close_word();
  bool in_word_ = false;
  double open_stamp_ = 0;
  std::size_t words_ = 0;
  std::size_t distinct_ = 0;
  double first_ = 0, last_ = 0;
};

// Bytes from a server or a user made safe for one line of a CSV cell, a log or an error message:
// valid UTF-8 is kept, a backslash becomes "\\", and control characters (NUL, newlines, DEL) and
// bytes that are not valid UTF-8 become "\xNN". The result is valid UTF-8 without control bytes.
std::string escape_bytes(std::string_view bytes);

// ROUGE-L F1 (beta = 1) between a candidate and a reference, over lower-cased words with ASCII
// punctuation stripped from both ends. Longest common subsequence in O(n*m) time and O(m) memory;
// texts are cut to their first `max_words` words to bound the cost.
double rouge_l(std::string_view candidate, std::string_view reference, std::size_t max_words = 4096);

}  // namespace hotpath::llm
