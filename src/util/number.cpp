#include "util/number.hpp"

#include <cmath>
#include <cstdio>

namespace hotpath::util {

namespace {

std::size_t digits(std::string_view s, std::size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}

}  // namespace

std::optional<double> parse_float(std::string_view s) {
  // The grammar is checked by hand: from_chars alone would also take "inf" and "nan", strtod "0x10"
  // and leading spaces.
  std::size_t i = !s.empty() && (s.front() == '+' || s.front() == '-') ? 1 : 0;
  const std::size_t int_end = digits(s, i);
  bool any = int_end > i;
  i = int_end;
  if (i < s.size() && s[i] == '.') {
    const std::size_t frac_end = digits(s, i + 1);
    any = any || frac_end > i + 1;
    i = frac_end;
  }
  if (!any) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const std::size_t exp_end = digits(s, j);
    if (exp_end == j) return std::nullopt;
    i = exp_end;
  }
  if (i != s.size()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);  // from_chars takes '-' only
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  // result_out_of_range: past DBL_MAX, or below the smallest subnormal; neither is a value to run with.
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  for (;;) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    const std::size_t b = item.find_first_not_of(" \t");
    item = b == std::string_view::npos ? std::string_view() : item.substr(b, item.find_last_not_of(" \t") - b + 1);
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace hotpath::util
