// The one number grammar of every flag and every number inside a flag's spec (sweep lists, SLO
// limits, core ranges, rolling:N). Integers: an optional sign, then decimal digits ("010" is ten).
// Floats: an optional sign, decimal digits with an optional fraction and exponent (1, 0.5, .5, 2e-3).
// Nothing else: no hex, octal or binary prefixes, no inf or nan, no spaces, no empty string, and a
// value that does not fit is refused, never clamped.
#pragma once
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace hotpath::util {

// The integer `s` spells, when it spells one that fits in T.
template <class T>
std::optional<T> parse_int(std::string_view s) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // from_chars would take a second sign ("+-1") for a signed type: digits only from here.
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::uint64_t magnitude = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  if (!negative) {
    if (magnitude > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(magnitude);
  }
  if (magnitude == 0) return T{0};
  if constexpr (std::is_unsigned_v<T>) {
    return std::nullopt;
  } else {
    const auto limit = static_cast<std::uint64_t>(std::numeric_limits<T>::max()) + 1;  // |min|
    if (magnitude > limit) return std::nullopt;
    if (magnitude == limit) return std::numeric_limits<T>::min();
    return static_cast<T>(-static_cast<std::int64_t>(magnitude));
  }
}

// The finite double `s` spells (correctly rounded), when it spells one.
std::optional<double> parse_float(std::string_view s);

// `text` split at every comma, empty items kept (the caller refuses them), spaces and tabs around
// each item dropped.
std::vector<std::string> split_list(std::string_view text);

// A range bound or value as the messages print it: %.15g (0.001, 1000000, 1e+09).
std::string number_text(double v);

}  // namespace hotpath::util
