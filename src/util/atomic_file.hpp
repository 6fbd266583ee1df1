// A file that appears complete or not at all. It is written under a temporary name in the target's own
// folder (so that the final rename stays on one file system and is atomic), flushed to disk, and renamed
// over the target only by commit(); destroyed uncommitted (an error, an exception unwinding), it
// removes the temporary file. A reader never sees a partial file under the target's name, and a failed
// run leaves the target as it was.
#pragma once
#include <cstddef>
#include <span>
#include <string>

namespace hotpath::util {

class AtomicFile {
 public:
  // Creates the temporary file now, so that a folder that cannot take the file is named before any long
  // work; throws hotpath::Error naming `path` and the reason.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; throws hotpath::Error naming the target (a full disk, an I/O error).
  void write(std::span<const std::byte> bytes);
  void write(const void* data, size_t size) { write({static_cast<const std::byte*>(data), size}); }
  // Flushes, closes and renames over the target; throws hotpath::Error (the temporary file is then removed).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void discard() noexcept;
  std::string path_, temp_;
  int fd_ = -1;
  int slot_ = -1;  // its entry in the table a signal handler reads (remove_temporary_files_on_signals)
};

// A program (the CLI, not the library) calls this once: a SIGINT, SIGTERM or SIGHUP that would end the
// process (no handler of its own) first removes the temporary files of the AtomicFiles still open, then
// ends it as before. SIGKILL cannot be caught: it can leave `TARGET.tmp-PID-N` behind.
void remove_temporary_files_on_signals();

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::span<const std::byte> bytes);

}  // namespace hotpath::util
