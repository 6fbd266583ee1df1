// util::check_output_files: an output that is an input, another output, a link, a FIFO or a device is
// refused before any work, naming the flags; and an interrupted CLI run leaves no temporary file behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"
#include "util/output_paths.hpp"

namespace fs = std::filesystem;

namespace hotpath::util {
namespace {

class OutputPaths : public test_support::TempDirTest {
 protected:
  OutputPaths() : TempDirTest("hotpath_outputs_") {}
  void touch(const std::string& n, const std::string& text = "data") const { std::ofstream(path(n)) << text; }
  // The message of the refusal, "" when none.
  static std::string refusal(std::vector<FileArg> ins, std::vector<FileArg> outs) {
    try {
      check_output_files(ins, outs);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(OutputPaths, DistinctRegularFilesPassAndLeaveNothingBehind) {
  touch("in.npy");
  touch("old.json");
  EXPECT_EQ(refusal({{"--inputs", path("in.npy")}}, {{"--out", path("out.npy")}, {"--json", path("old.json")}, {"--csv", ""}}), "");
  EXPECT_EQ(files(), (std::vector<std::string>{"in.npy", "old.json"}));
}

TEST_F(OutputPaths, AnOutputThatIsAnInputIsRefusedHoweverItIsSpelled) {
  touch("x.npy");
  const std::string same = refusal({{"--inputs", path("x.npy")}}, {{"--out", path("x.npy")}});
  EXPECT_NE(same.find("--out '" + path("x.npy") + "' is the same file as --inputs"), std::string::npos) << same;
  EXPECT_NE(same.find("destroy that input"), std::string::npos) << same;
  fs::create_directories(dir_ / "sub");
  EXPECT_NE(refusal({{"--inputs", path("x.npy")}}, {{"--out", path("sub/../x.npy")}}), "");
  fs::create_hard_link(path("x.npy"), path("hard.npy"));
  EXPECT_NE(refusal({{"--dataset", path("x.npy")}}, {{"--csv", path("hard.npy")}}).find("same file as --dataset"),
            std::string::npos);
  const std::string cwd = fs::current_path().string();
  fs::current_path(dir_);
  const std::string relative = refusal({{"--inputs", "x.npy"}}, {{"--out", path("x.npy")}});
  fs::current_path(cwd);
  EXPECT_NE(relative, "");
  EXPECT_EQ(files(), (std::vector<std::string>{"hard.npy", "sub", "x.npy"}));
}

TEST_F(OutputPaths, TwoOutputsOfOneFileAreRefusedExistingOrNot) {
  const std::string absent = refusal({}, {{"--json", path("r.json")}, {"--csv", path("r.json")}});
  EXPECT_NE(absent.find("--csv '" + path("r.json") + "' is the same file as --json"), std::string::npos) << absent;
  EXPECT_NE(absent.find("one output would overwrite the other"), std::string::npos) << absent;
  touch("r.json");
  EXPECT_NE(refusal({}, {{"--json", path("r.json")}, {"--report", path("./r.json")}}), "");
}

TEST_F(OutputPaths, LinksFifosDevicesAndFoldersAreRefusedAndLeftAsTheyWere) {
  touch("target", "keep");
  fs::create_symlink(path("target"), path("link"));
  const std::string link = refusal({}, {{"--out", path("link")}});
  EXPECT_NE(link.find("--out '" + path("link") + "': is a symbolic link; hotpath writes only regular files"),
            std::string::npos)
      << link;
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_NE(refusal({}, {{"--out", path("fifo")}}).find("is a FIFO"), std::string::npos);
  EXPECT_NE(refusal({}, {{"--out", "/dev/null"}}).find("is a device"), std::string::npos);
  EXPECT_NE(refusal({}, {{"--out", dir_.string()}}).find("is a directory"), std::string::npos);
  // AtomicFile itself refuses them too (every writer goes through it)
  EXPECT_THROW(AtomicFile a(path("link")), Error);
  EXPECT_THROW(AtomicFile a(path("fifo")), Error);
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  std::ifstream t(path("target"));
  std::string kept;
  t >> kept;
  EXPECT_EQ(kept, "keep");
}

TEST_F(OutputPaths, AFolderThatCannotTakeTheFileIsNamedFirst) {
  const std::string missing = refusal({}, {{"--json", path("nope/x.json")}});
  EXPECT_NE(missing.find("cannot create a file there"), std::string::npos) << missing;
}

// A CLI process (remove_temporary_files_on_signals) killed by SIGTERM, SIGINT or SIGHUP mid-write removes
// its temporary file and still dies of the signal; a process with its own handler is left alone.
TEST_F(OutputPaths, ASignalRemovesTheTemporaryFilesOfAnInterruptedRun) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      remove_temporary_files_on_signals();
      AtomicFile a(path("out.npy")), b(path("other.json"));
      a.write("partial", 7);
      std::raise(sig);
      ::_exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig << ", status " << status;
    EXPECT_TRUE(files().empty()) << "left behind: " << (files().empty() ? "" : files().front());
  }
}

}  // namespace
}  // namespace hotpath::util
