#include "util/output_paths.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace hotpath::util {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

// What makes two paths the same file: device and inode where the file exists (links and other names
// of it included), else the absolute path with `.`, `..` and the existing folders' links resolved.
struct Identity {
  std::optional<std::pair<dev_t, ino_t>> node;
  std::string path;
  bool operator==(const Identity& o) const { return node ? node == o.node : (!o.node && path == o.path); }
};

Identity identity(const std::string& path) {
  Identity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.node = std::make_pair(st.st_dev, st.st_ino);
    return id;
  }
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  id.path = ec ? path : p.string();
  return id;
}

}  // namespace

void require_regular_or_absent(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw Error(what + ": cannot inspect it (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode))
    throw Error(what + ": is " + kind_of(st.st_mode) + "; hotpath writes only regular files (give a file path)");
}

void check_output_files(std::span<const FileArg> inputs, std::span<const FileArg> outputs) {
  auto named = [](const FileArg& a) { return a.flag + " '" + a.path + "'"; };
  std::vector<std::pair<const FileArg*, Identity>> seen;
  for (const FileArg& in : inputs)
    if (!in.path.empty()) seen.emplace_back(&in, identity(in.path));
  const size_t n_inputs = seen.size();
  for (const FileArg& out : outputs) {
    if (out.path.empty()) continue;
    require_regular_or_absent(out.path, named(out));
    const Identity id = identity(out.path);
    for (size_t k = 0; k < seen.size(); ++k)
      if (seen[k].second == id)
        throw Error(named(out) + " is the same file as " + named(*seen[k].first) +
                    (k < n_inputs ? ": writing it would destroy that input" : ": one output would overwrite the other"));
    seen.emplace_back(&out, id);
    // The folder can take the file: made and removed now, not found out after the run.
    try {
      AtomicFile probe(out.path);
    } catch (const Error& e) {
      const std::string why = e.what();  // "PATH: reason"
      throw Error(named(out) + (why.rfind(out.path, 0) == 0 ? why.substr(out.path.size()) : ": " + why));
    }
  }
}

}  // namespace hotpath::util
