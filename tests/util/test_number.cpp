// The number grammar of flags and specs (util/number.hpp) and the CLI11 options built on it
// (util/cli_number.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/cli_number.hpp"
#include "util/number.hpp"

namespace hotpath::util {
namespace {

TEST(Number, IntegersAreDecimal) {
  EXPECT_EQ(parse_int<int>("010"), 10);  // not octal 8
  EXPECT_EQ(parse_int<int>("0"), 0);
  EXPECT_EQ(parse_int<int>("+7"), 7);
  EXPECT_EQ(parse_int<int>("-7"), -7);
  EXPECT_EQ(parse_int<std::uint64_t>("-0"), 0u);
  EXPECT_EQ(parse_int<std::uint64_t>("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_int<std::int64_t>("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(parse_int<std::int64_t>("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_int<std::int8_t>("-128"), -128);
  EXPECT_EQ(parse_int<std::uint16_t>("65535"), 65535);
  for (const char* bad : {"", "+", "-", "0x10", "0X10", "0b1", "0o7", "1e3", "1.0", "1.", " 1", "1 ", "\t1", "+-1", "-+1",
                          "--1", "++1", "1_000", "1'000", "1,000", "one", "0x", "10k"})
    EXPECT_FALSE(parse_int<int>(bad)) << "'" << bad << "'";
  // A value that does not fit is refused, never clamped or wrapped.
  EXPECT_FALSE(parse_int<std::uint64_t>("18446744073709551616"));
  EXPECT_FALSE(parse_int<std::uint64_t>("99999999999999999999999"));
  EXPECT_FALSE(parse_int<std::uint64_t>("-1"));
  EXPECT_FALSE(parse_int<std::int64_t>("-9223372036854775809"));
  EXPECT_FALSE(parse_int<std::int64_t>("9223372036854775808"));
  EXPECT_FALSE(parse_int<std::int8_t>("128"));
  EXPECT_FALSE(parse_int<std::int8_t>("-129"));
  EXPECT_FALSE(parse_int<std::uint16_t>("65536"));
  EXPECT_FALSE(parse_int<int>("2147483648"));
}

TEST(Number, FloatsAreDecimalAndFinite) {
  EXPECT_EQ(parse_float("1"), 1.0);
  EXPECT_EQ(parse_float("010"), 10.0);
  EXPECT_EQ(parse_float("0.1"), 0.1);  // correctly rounded: the same double as the literal
  EXPECT_EQ(parse_float(".5"), 0.5);
  EXPECT_EQ(parse_float("5."), 5.0);
  EXPECT_EQ(parse_float("+1.5"), 1.5);
  EXPECT_EQ(parse_float("-0.25"), -0.25);
  EXPECT_EQ(parse_float("2e-3"), 2e-3);
  EXPECT_EQ(parse_float("1E+3"), 1000.0);
  EXPECT_EQ(parse_float("1.7976931348623157e308"), 1.7976931348623157e308);
  for (const char* bad : {"", ".", "+", "-", "e3", ".e3", "1e", "1e+", "1e-", "0x10", "0X1P4", "0x1p4", "inf", "-inf",
                          "infinity", "nan", "NaN", "nan(1)", " 1", "1 ", "1.2.3", "1,5", "++1", "+-1", "1f", "1d",
                          "1_0", "1e1.5", "1ee3"})
    EXPECT_FALSE(parse_float(bad)) << "'" << bad << "'";
  EXPECT_FALSE(parse_float("1e309"));   // past DBL_MAX
  EXPECT_FALSE(parse_float("1e-400"));  // below the smallest subnormal
}

TEST(Number, ListsKeepTheirEmptyItems) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_list(""), V{""});
  EXPECT_EQ(split_list("1"), V{"1"});
  EXPECT_EQ(split_list(" 1 ,\t2 "), (V{"1", "2"}));
  EXPECT_EQ(split_list("1,,2"), (V{"1", "", "2"}));
  EXPECT_EQ(split_list("1,"), (V{"1", ""}));
  EXPECT_EQ(split_list(","), (V{"", ""}));
  EXPECT_EQ(split_list(" , "), (V{"", ""}));
}

// A parse of `args` (program name first) into a fresh app with one integer, one unsigned and one
// float option; returns the error text, empty when it parsed.
struct Flags {
  int n = 0;
  std::uint64_t seed = 0;
  double s = 0, open = 1;
};
std::string parse(Flags& f, std::vector<std::string> args) {
  CLI::App app;
  add_int_option(&app, "--n", f.n, "n", -5, 100);
  add_int_option(&app, "--seed", f.seed, "seed", 0, UINT64_MAX);
  add_float_option(&app, "--s", f.s, "s", 0, 1e6);
  add_float_option(&app, "--open", f.open, "open", 0, 1, true);
  std::vector<const char*> argv{"prog"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(CliNumber, ValuesReachTheVariableAsDecimal) {
  Flags f;
  ASSERT_EQ(parse(f, {"--n", "010", "--seed", "010", "--s", "010", "--open", "1"}), "");
  EXPECT_EQ(f.n, 10);  // CLI11 alone read octal 8
  EXPECT_EQ(f.seed, 10u);
  EXPECT_EQ(f.s, 10.0);
  ASSERT_EQ(parse(f, {"--n", "-5", "--seed", "18446744073709551615", "--s", "1e3", "--open", "1e-300"}), "");
  EXPECT_EQ(f.n, -5);
  EXPECT_EQ(f.seed, UINT64_MAX);
  EXPECT_EQ(f.s, 1000.0);
  EXPECT_EQ(f.open, 1e-300);
  ASSERT_EQ(parse(f, {"--s", "0.1"}), "");
  EXPECT_EQ(f.s, 0.1);  // the exact double, through CLI11's own conversion of the canonical text
}

TEST(CliNumber, BadValuesNameTheFlagTheRangeAndTheValue) {
  Flags f;
  EXPECT_EQ(parse(f, {"--n", "0x10"}), "--n: must be a decimal integer in [-5, 100] (got '0x10')");
  EXPECT_EQ(parse(f, {"--s", "0x10"}), "--s: must be a decimal number in [0, 1000000] (got '0x10')");
  EXPECT_EQ(parse(f, {"--open", "0"}), "--open: must be a decimal number in (0, 1] (got '0')");
  for (const char* v : {"", "0x10", "010.", "1e3", "-6", "101", "0b1", " 1"})
    EXPECT_NE(parse(f, {"--n", v}).find("--n: must be a decimal integer"), std::string::npos) << "'" << v << "'";
  for (const char* v : {"", "-1", "18446744073709551616", "99999999999999999999999", "0x10"})
    EXPECT_NE(parse(f, {"--seed", v}).find("--seed: must be a decimal integer"), std::string::npos) << "'" << v << "'";
  for (const char* v : {"", "0x10", "0x1p4", "inf", "nan", "-1", "1e7", "1,5"})
    EXPECT_NE(parse(f, {"--s", v}).find("--s: must be a decimal number"), std::string::npos) << "'" << v << "'";
}

TEST(CliNumber, HelpShowsTheRange) {
  CLI::App app;
  int n = 0;
  double s = 0;
  auto* a = add_int_option(&app, "--n", n, "n", 1, 10);
  auto* b = add_float_option(&app, "--s", s, "s", 0.001, 1e6, true);
  EXPECT_EQ(a->get_type_name(), "INT in [1, 10]");
  EXPECT_EQ(b->get_type_name(), "FLOAT in (0.001, 1000000]");
  // A transform: CLI11 drops a check's rewrite and would read the raw text itself.
  ASSERT_NE(a->get_validator(kNumberValidator), nullptr);
  EXPECT_TRUE(a->get_validator(kNumberValidator)->get_modifying());
}

}  // namespace
}  // namespace hotpath::util
