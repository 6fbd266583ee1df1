#include "llm/common/text.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace hotpath::llm {

namespace {
// Length of the valid UTF-8 sequence of 2-4 bytes at the start of `s` (no overlongs, surrogates or
// code points past U+10FFFF), or 0.
std::size_t utf8_len(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) return 0;
    return 4;
  }
  return 0;
}
}  // namespace

std::string escape_bytes(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (const std::size_t n = c >= 0x80 ? utf8_len(bytes.substr(i)) : 0; n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    }
  }
  return out;
}

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
    out.push_back(ascii_lower(std::string(w.substr(b, e - b))));
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

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string fixed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

}  // namespace hotpath::llm
