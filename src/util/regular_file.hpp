// The check before a reader opens a file it sizes first (.npy, safetensors): only a regular file
// has a size to trust, and opening a FIFO with no writer would block.
#pragma once
#include <filesystem>
#include <string>

#include "util/error.hpp"

namespace hotpath::util {

// Throws hotpath::Error naming `path` unless it is a regular file (or a link to one): "no such
// file", "is a directory, not <what>", or "is a FIFO (named pipe), not a regular file" and the like.
inline void require_regular_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(path + ": no such file");
  if (fs::is_directory(st)) throw Error(path + ": is a directory, not " + what);
  if (fs::is_regular_file(st)) return;
  const char* kind = st.type() == fs::file_type::fifo        ? "a FIFO (named pipe)"
                     : st.type() == fs::file_type::socket    ? "a socket"
                     : st.type() == fs::file_type::character ? "a character device"
                     : st.type() == fs::file_type::block     ? "a block device"
                                                             : "something";
  throw Error(path + ": is " + kind + ", not a regular file (" + what + " must be one)");
}

}  // namespace hotpath::util
