// Numeric CLI11 options that read their value with the one number grammar (util/number.hpp). CLI11's
// own conversion reads "010" as octal, "0x10" as hex, "0x1p4" as a hex float, clamps an overflow
// and takes "" as 0. These options check the text and hand CLI11 only the canonical decimal form of a
// value already inside its range, so its conversion has nothing left to reinterpret. A bad value is a
// CLI11 ValidationError: "--flag: must be a decimal integer in [lo, hi] (got 'x')", exit 2.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include "util/number.hpp"

namespace hotpath::util {

// The validator's name on every numeric option (tests look it up to find a flag that skipped it).
inline constexpr const char* kNumberValidator = "decimal-number";

// The integer grammar's validator for [lo, hi], and the option's type name ("INT in [lo, hi]").
template <class T>
std::pair<CLI::Validator, std::string> int_grammar(T lo, T hi) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  CLI::Validator v(
      [lo, hi, range](std::string& in) -> std::string {
        const auto n = parse_int<T>(in);
        if (!n || *n < lo || *n > hi) return "must be a decimal integer in " + range + " (got '" + in + "')";
        in = std::to_string(*n);
        return {};
      },
      "", kNumberValidator);
  return {v, "INT in " + range};
}

// An integer option in [lo, hi] bound to `var`; --help shows "INT in [lo, hi]".
template <class T>
CLI::Option* add_int_option(CLI::App* app, const std::string& name, T& var, const std::string& help,
                            std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
  auto [v, type] = int_grammar<T>(lo, hi);
  // transform, not check: CLI11 discards a check's rewrite and would convert the raw text itself.
  return app->add_option(name, var, help)->transform(v)->type_name(type);
}
// The same, handing the value to `set` instead.
template <class T>
CLI::Option* add_int_option_function(CLI::App* app, const std::string& name, std::function<void(const T&)> set,
                                     const std::string& help, std::type_identity_t<T> lo, std::type_identity_t<T> hi) {
  auto [v, type] = int_grammar<T>(lo, hi);
  return app->add_option_function<T>(name, std::move(set), help)->transform(v)->type_name(type);
}

// A finite floating-point option in [lo, hi], or (lo, hi] when `open_lo`; --help shows the range.
inline CLI::Option* add_float_option(CLI::App* app, const std::string& name, double& var, const std::string& help,
                                     double lo, double hi, bool open_lo = false) {
  const std::string range = (open_lo ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + "]";
  CLI::Validator v(
      [lo, hi, open_lo, range](std::string& in) -> std::string {
        const auto x = parse_float(in);
        if (!x || (open_lo ? !(*x > lo) : !(*x >= lo)) || !(*x <= hi))
          return "must be a decimal number in " + range + " (got '" + in + "')";
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, *x);  // shortest text that reads back as *x
        in.assign(buf, r.ptr);
        return {};
      },
      "", kNumberValidator);
  return app->add_option(name, var, help)->transform(v)->type_name("FLOAT in " + range);
}

}  // namespace hotpath::util
