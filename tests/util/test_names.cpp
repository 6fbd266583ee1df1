// util/names.hpp: an enum's one name table, and the CLI11 option that parses by it.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "util/cli_names.hpp"
#include "util/names.hpp"

namespace hotpath {
namespace {

enum class Colour { red, green, blue };
constexpr auto name_table(Colour) {
  return util::make_names<Colour>("colour", {{Colour::red, "red"}, {Colour::green, "green"}, {Colour::blue, "blue"}});
}
enum class One { only };
constexpr auto name_table(One) { return util::make_names<One>("one", {{One::only, "only"}}); }

TEST(NameTable, NamesParseBackAndTheRestAreRefusedListingTheValidOnes) {
  for (const Colour c : {Colour::red, Colour::green, Colour::blue})
    EXPECT_EQ(util::parse_name<Colour>(util::name_of(c)), c);
  EXPECT_EQ(util::names_list<Colour>(), "red, green or blue");
  EXPECT_EQ(util::names_list<One>(), "only");
  EXPECT_EQ(name_table(Colour{}).names(), (std::vector<std::string>{"red", "green", "blue"}));
  for (const char* bad : {"", "Red", "red ", "gren", "0"}) {
    try {
      (void)util::parse_name<Colour>(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "unknown colour '" + std::string(bad) + "' (valid: red, green or blue)");
    }
  }
}

TEST(NameTable, TheCliOptionParsesByTheTableAndNamesTheFlag) {
  auto parse = [](std::vector<std::string> args, Colour* plain, std::optional<Colour>* maybe) {
    CLI::App app;
    util::add_name_option<Colour>(&app, "--colour", *plain, "a colour");
    util::add_name_option<Colour>(&app, "--tint", *maybe, "an optional colour");
    std::reverse(args.begin(), args.end());
    app.parse(args);
  };
  Colour c = Colour::red;
  std::optional<Colour> t;
  parse({}, &c, &t);
  EXPECT_EQ(c, Colour::red);
  EXPECT_FALSE(t.has_value());  // unset unless given
  parse({"--colour", "blue", "--tint", "green"}, &c, &t);
  EXPECT_EQ(c, Colour::blue);
  EXPECT_EQ(t, Colour::green);
  try {
    parse({"--colour", "mauve"}, &c, &t);
    ADD_FAILURE() << "accepted mauve";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("--colour: unknown colour 'mauve' (valid: red, green or blue)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c, Colour::blue);  // a refused value changes nothing
}

}  // namespace
}  // namespace hotpath
