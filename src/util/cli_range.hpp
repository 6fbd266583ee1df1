// CLI11 validators for numeric flags. CLI::Range lets NaN through (every comparison with NaN is false),
// so floating-point flags use finite_range.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <sstream>
#include <string>

namespace hotpath::util {

// A finite number in [lo, hi]; --help shows "FLOAT in [lo - hi]".
inline CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream desc;
  desc << "FLOAT in [" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& input) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(input, v) || !std::isfinite(v) || v < lo || v > hi) {
          std::ostringstream msg;
          msg << "value " << input << " is not a finite number in [" << lo << ", " << hi << "]";
          return msg.str();
        }
        return {};
      },
      desc.str());
}

// An integer in [lo, hi], written in plain decimal (an optional sign, then digits): CLI11's own
// conversion reads "010" as octal, "0x20" as hex and saturates an overflow, all silent rewrites. The
// value is rewritten to its canonical form before CLI11 converts it. Same words as finite_range.
template <class T>
CLI::Validator int_range(T lo, T hi) {
  return CLI::Validator(
      [lo, hi](std::string& input) -> std::string {
        T v{};
        const char* b = input.data();
        const char* e = b + input.size();
        if (b != e && *b == '+') ++b;
        const auto [ptr, ec] = std::from_chars(b, e, v);
        if (b == e || ptr != e || ec != std::errc() || v < lo || v > hi)
          return "value " + input + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        input = std::to_string(v);
        return {};
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

}  // namespace hotpath::util
