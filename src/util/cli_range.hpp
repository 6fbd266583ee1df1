// CLI11 validators for numeric flags. CLI::Range lets NaN through (every comparison with NaN is false),
// so floating-point flags use finite_range.
#pragma once
#include <CLI/CLI.hpp>

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

// An integer in [lo, hi] (CLI::Range, with the message in the same words as finite_range).
template <class T>
CLI::Validator int_range(T lo, T hi) {
  return CLI::Validator(
      [lo, hi](std::string& input) -> std::string {
        T v{};
        if (!CLI::detail::lexical_cast(input, v) || v < lo || v > hi)
          return "value " + input + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return {};
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

}  // namespace hotpath::util
