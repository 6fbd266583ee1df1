// The files a command will write, checked before it does any work: each is a regular file or does not
// exist yet, its folder can take a new file, and none is the same file as one of the command's inputs or
// as another of its outputs (compared by device and inode where the file exists, by absolute path where it
// does not yet), so a run never overwrites its own data set, never writes through a link, a FIFO or a
// device, and never finds out at the end that its results cannot be saved.
#pragma once
#include <span>
#include <string>

namespace hotpath::util {

// A command-line file argument: the flag that named it (for the message) and the path. An empty path is
// an option not given, and skipped.
struct FileArg {
  std::string flag;
  std::string path;
};

// Throws hotpath::Error with one line naming the flag, the path and the problem.
void check_output_files(std::span<const FileArg> inputs, std::span<const FileArg> outputs);

// The part of the check for one output: a regular file or absent (a symbolic link, FIFO, socket, device
// or directory is refused). AtomicFile applies it too.
void require_regular_or_absent(const std::string& path, const std::string& what);

}  // namespace hotpath::util
