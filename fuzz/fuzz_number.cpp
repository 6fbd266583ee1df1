// libFuzzer target: the number grammar of every flag (util/number.hpp) and the spec parsers built on
// it (--sweep/--sweep-concurrency lists, --slo, --cpuset, --scaler rolling:N), on arbitrary bytes.
// Checked on every input:
//   - parse_int accepts exactly an optional sign and decimal digits whose value fits, and gives what
//     strtoll/strtoull in base 10 give; parse_float accepts only finite decimal text (no hex, inf,
//     nan, spaces) and gives strtod's correctly rounded double; an integer reads the same as a float;
//   - split_list keeps one item per comma-separated field, trimmed;
//   - the spec parsers return values inside their ranges or throw hotpath::Error, nothing else.
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/engine.hpp"
#include "llm/common/limits.hpp"
#include "llm/report/slo.hpp"
#include "llm/sweep/sweep.hpp"
#include "scaling/input_scaler.hpp"
#include "util/error.hpp"
#include "util/number.hpp"

namespace {

using hotpath::util::parse_float;
using hotpath::util::parse_int;

void check(bool ok) {
  if (!ok) std::abort();
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// An optional sign, then one or more digits.
bool integer_text(std::string_view s) {
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

void check_numbers(const std::string& s) {
  const bool has_nul = s.find('\0') != std::string::npos;  // strto* stop there; the parsers refuse it
  const auto i64 = parse_int<std::int64_t>(s);
  const auto u64 = parse_int<std::uint64_t>(s);
  const auto i32 = parse_int<int>(s);
  if (i64 || u64 || i32) check(integer_text(s));
  if (integer_text(s) && !has_nul) {
    char* end = nullptr;
    errno = 0;
    const long long a = std::strtoll(s.c_str(), &end, 10);
    check((errno == 0) == i64.has_value());
    if (i64) check(*i64 == a);
    if (i32) check(i64 && *i64 == *i32);
    check(i32.has_value() == (i64 && *i64 >= INT32_MIN && *i64 <= INT32_MAX));
    const bool negative = s.front() == '-';
    errno = 0;
    const unsigned long long b = std::strtoull(s.c_str(), &end, 10);
    if (!negative) check((errno == 0) == u64.has_value());
    if (u64) check(*u64 == b || (negative && *u64 == 0));
  }

  const auto f = parse_float(s);
  if (f) {
    check(std::isfinite(*f) && !has_nul);
    for (char c : s) check(is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E');
    // (errno is not compared: glibc sets ERANGE for a subnormal result, which is still a value.)
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    check(end == s.c_str() + s.size() && d == *f);
  }
  if (i64) check(f && *f == static_cast<double>(*i64));
  if (u64) check(f && *f == static_cast<double>(*u64));

  const auto items = hotpath::util::split_list(s);
  std::size_t commas = 0;
  for (char c : s) commas += c == ',';
  check(items.size() == commas + 1);
  for (const auto& item : items) {
    check(item.find(',') == std::string::npos);
    if (!item.empty()) {
      for (char c : {item.front(), item.back()}) check(c != ' ' && c != '\t');
    }
  }
}

template <class F>
void refused_or(F&& f) {
  try {
    f();
  } catch (const hotpath::Error&) {
  }  // anything else escapes and crashes the target
}

void check_specs(const std::string& s) {
  using namespace hotpath::llm;
  refused_or([&] {
    for (const Slo& slo : parse_slos(s)) {
      check(slo.limit > 0 && slo.limit <= 1e9);
      if (slo.percentile) check(*slo.percentile > 0 && *slo.percentile <= 100);
    }
  });
  refused_or([&] {
    const auto v = parse_sweep_values("--sweep", s, false);
    check(!v.empty() && v.size() == hotpath::util::split_list(s).size());
    for (double x : v) check(x >= kMinRate && x <= kMaxRate);
  });
  refused_or([&] {
    for (double x : parse_sweep_values("--sweep-concurrency", s, true))
      check(x >= 1 && x <= static_cast<double>(kMaxConcurrency) && x == std::floor(x));
  });
  // A range walks up to a million cores: long inputs would only time out on many of them.
  if (s.size() <= 64) {
    refused_or([&] {
      for (int c : hotpath::parse_cpuset(s)) check(c >= 0 && c <= 999999);
    });
  }
  refused_or([&] {
    const hotpath::ScalerChoice c = hotpath::parse_scaler(s);
    if (c.kind == hotpath::ScalerKind::rolling) check(c.window >= 2 && c.window <= hotpath::kMaxRollingWindow);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;  // specs are short; longer inputs only slow the search
  const std::string s(reinterpret_cast<const char*>(data), size);
  check_numbers(s);
  check_specs(s);
  return 0;
}
