#include "llm/text.hpp"

#include <algorithm>
#include <cctype>

namespace hotpath::llm {

std::size_t count_words(std::string_view text) {
  std::size_t n = 0;
  bool in = false;
  for (char c : text) {
    if (is_space(c)) {
      in = false;
    } else if (!in) {
      in = true;
      ++n;
    }
  }
  return n;
}

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const std::size_t b = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > b) out.push_back(text.substr(b, i - b));
  }
  return out;
}

void WordClock::close_word() {
  in_word_ = false;
  if (words_ == 0) {
    first_ = open_stamp_;
    distinct_ = 1;
  } else if (open_stamp_ != last_) {
    ++distinct_;
  }
  last_ = open_stamp_;
  ++words_;
}

void WordClock::feed(std::string_view text, double t) {
  for (char c : text) {
    if (is_space(c)) {
      if (in_word_) close_word();
    } else {
      in_word_ = true;
      open_stamp_ = t;
    }
  }
}

void WordClock::finish() {
  if (in_word_) close_word();
}

namespace {
std::vector<std::string> normalized_words(std::string_view text, std::size_t max_words) {
  std::vector<std::string> out;
  for (std::string_view w : split_words(text)) {
    if (out.size() >= max_words) break;
    std::size_t b = 0, e = w.size();
    while (b < e && std::ispunct(static_cast<unsigned char>(w[b]))) ++b;
    while (e > b && std::ispunct(static_cast<unsigned char>(w[e - 1]))) --e;
    if (b == e) continue;
    std::string s(w.substr(b, e - b));
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(std::move(s));
  }
  return out;
}
}  // namespace

double rouge_l(std::string_view candidate, std::string_view reference, std::size_t max_words) {
  const auto c = normalized_words(candidate, max_words);
  const auto r = normalized_words(reference, max_words);
  if (c.empty() || r.empty()) return 0.0;
  std::vector<std::size_t> prev(r.size() + 1, 0), cur(r.size() + 1, 0);
  for (std::size_t i = 1; i <= c.size(); ++i) {
    for (std::size_t j = 1; j <= r.size(); ++j) {
      cur[j] = (c[i - 1] == r[j - 1]) ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  const double lcs = static_cast<double>(prev[r.size()]);
  if (lcs == 0) return 0.0;
  const double p = lcs / static_cast<double>(c.size());
  const double rec = lcs / static_cast<double>(r.size());
  return 2 * p * rec / (p + rec);
}

}  // namespace hotpath::llm
