// Reading integers from JSON that a user or a server wrote, without silent wraps: nlohmann stores
// non-negative numbers as unsigned, and get<long long>() of 2^63 or 2^64-1 comes back negative.
#pragma once
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace hotpath::llm {

// obj[key] when it is an integer in [lo, hi]; nullopt when absent, not an integer or out of range.
inline std::optional<std::int64_t> json_int_in(const nlohmann::json& obj, const char* key, std::int64_t lo,
                                               std::int64_t hi) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const std::uint64_t u = it->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  }
  const std::int64_t v = it->get<std::int64_t>();
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace hotpath::llm
