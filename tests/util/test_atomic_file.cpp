// util::AtomicFile: the target appears complete or not at all, and no temporary file outlives it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;

namespace hotpath::util {
namespace {

class AtomicFileTest : public test_support::TempDirTest {
 protected:
  AtomicFileTest() : TempDirTest("hotpath_atomic_") {}
  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
};

TEST_F(AtomicFileTest, AppearsOnlyWhenCommitted) {
  AtomicFile f(path("out.bin"));
  EXPECT_EQ(f.temp_path().rfind(path("out.bin.tmp-"), 0), 0u) << "beside the target: " << f.temp_path();
  f.write("abc", 3);
  f.write("def", 3);
  EXPECT_FALSE(fs::exists(path("out.bin"))) << "visible before it is complete";
  EXPECT_EQ(files().size(), 1u);
  f.commit();
  EXPECT_EQ(slurp(path("out.bin")), "abcdef");
  EXPECT_EQ(files(), std::vector<std::string>{"out.bin"});
  EXPECT_THROW(f.write("x", 1), Error);
}

TEST_F(AtomicFileTest, AnErrorLeavesTheOldFileAndNoTemporary) {
  write_file_atomically(path("out.bin"), std::as_bytes(std::span<const char>("old", 3)));
  try {
    AtomicFile f(path("out.bin"));
    f.write("new, half", 9);
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(path("out.bin")), "old");
  EXPECT_EQ(files(), std::vector<std::string>{"out.bin"});
  { AtomicFile never_written(path("other.bin")); }
  EXPECT_EQ(files(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, TwoAtOnceDoNotShareATemporaryName) {
  AtomicFile a(path("x")), b(path("x"));
  EXPECT_NE(a.temp_path(), b.temp_path());
  a.write("a", 1);
  b.write("b", 1);
  a.commit();
  b.commit();
  EXPECT_EQ(slurp(path("x")), "b");
  EXPECT_EQ(files(), std::vector<std::string>{"x"});
}

TEST_F(AtomicFileTest, UnwritablePlacesAreNamed) {
  try {
    AtomicFile f(path("missing/out.bin"));
    FAIL() << "made";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path("missing/out.bin") + ": cannot create a file there (No such file or directory)");
  }
  try {
    AtomicFile f(dir_.string());
    FAIL() << "made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(AtomicFile(path("ro/out.bin")), Error);
    fs::permissions(path("ro"), fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace hotpath::util
