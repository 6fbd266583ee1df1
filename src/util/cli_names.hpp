// CLI11 options whose value is one of an enum's names (util/names.hpp): parsed by the enum's name table
// as the option is read, so --help lists the names and anything else is a ValidationError naming the
// valid ones ("--kernel: unknown cuda kernel 'warp' (valid: auto, cta, cluster or grid)", exit 2),
// before a model is read or a device opened.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "util/names.hpp"

namespace hotpath::util {

// Bound to `var`: an E, or a std::optional<E> that stays unset unless the flag is given.
template <class E, class Target>
CLI::Option* add_name_option(CLI::App* app, const std::string& flag, Target& var, const std::string& help) {
  CLI::Validator valid(
      [](std::string& in) -> std::string {
        try {
          (void)parse_name<E>(in);
        } catch (const Error& e) {
          return e.what();
        }
        return {};
      },
      "", "name");
  std::string names;
  for (const auto& n : name_table(E{}).names()) names += (names.empty() ? "" : "|") + n;
  return app->add_option_function<std::string>(flag, [&var](const std::string& v) { var = parse_name<E>(v); }, help)
      ->check(valid)
      ->type_name(names);
}

}  // namespace hotpath::util
