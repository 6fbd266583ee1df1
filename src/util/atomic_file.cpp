#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.hpp"

namespace hotpath::util {
namespace {
std::atomic<unsigned> g_serial{0};  // distinct temporary names for files written at once by one process
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) throw Error(path_ + ": is a directory, not a file to write");
  // Beside the target: a rename across file systems would be a copy, visible half-done.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_serial.fetch_add(1));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int err = errno;
  temp_.clear();
  throw Error(path_ + ": cannot create a file there (" + std::strerror(err) + ")");
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw Error(path_ + ": write after the file was committed or discarded");
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      discard();
      throw Error(path_ + ": write failed (" + std::strerror(err) + ")");
    }
    p += n;
    left -= size_t(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(path_ + ": commit after the file was committed or discarded");
  // On disk before the rename: after a power loss the target is the old file or the whole new one.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    discard();
    throw Error(path_ + ": write failed (" + std::strerror(err) + ")");
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    discard();
    throw Error(path_ + ": write failed (" + std::strerror(err) + ")");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    discard();
    throw Error(path_ + ": cannot rename the finished file into place (" + std::strerror(err) + ")");
  }
  temp_.clear();
}

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace hotpath::util
