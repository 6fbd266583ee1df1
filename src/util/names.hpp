// One name table per option enum: the text each value is written as, used alike for parsing a flag, the
// C ABI's and Python's strings, --help, error messages and JSON reports. An enum E declares its table
// with a `name_table(E)` function found by argument-dependent lookup, so the generic helpers below
// (name_of, parse_name, names_list) work for every option enum.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace hotpath::util {

template <class E>
struct Named {
  E value;
  const char* name;
};

template <class E, size_t N>
struct NameTable {
  const char* what;  // what a value names, for errors: "backend", "cuda kernel"
  std::array<Named<E>, N> entries;  // the first is the default

  constexpr const char* name(E v) const {
    for (const auto& e : entries)
      if (e.value == v) return e.name;
    return "?";
  }
  constexpr std::optional<E> find(std::string_view s) const {
    for (const auto& e : entries)
      if (s == e.name) return e.value;
    return std::nullopt;
  }
  // "a, b or c"
  std::string list() const {
    std::string s;
    for (size_t k = 0; k < N; ++k) s += (k == 0 ? "" : k + 1 == N ? " or " : ", ") + std::string(entries[k].name);
    return s;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& e : entries) v.emplace_back(e.name);
    return v;
  }
  // Throws hotpath::Error "unknown <what> 's' (valid: a, b or c)".
  E parse(std::string_view s) const {
    if (const auto v = find(s)) return *v;
    throw Error("unknown " + std::string(what) + " '" + std::string(s) + "' (valid: " + list() + ")");
  }
};

// make_names<E>("what", {{E::a, "a"}, {E::b, "b"}}): the default first.
template <class E, size_t N>
constexpr NameTable<E, N> make_names(const char* what, const Named<E> (&entries)[N]) {
  NameTable<E, N> t{what, {}};
  for (size_t k = 0; k < N; ++k) t.entries[k] = entries[k];
  return t;
}

template <class E>
const char* name_of(E v) {
  return name_table(v).name(v);
}
template <class E>
E parse_name(std::string_view s) {
  return name_table(E{}).parse(s);
}
template <class E>
std::string names_list() {
  return name_table(E{}).list();
}

}  // namespace hotpath::util
