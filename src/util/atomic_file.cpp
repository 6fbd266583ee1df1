#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.hpp"
#include "util/output_paths.hpp"

namespace hotpath::util {
namespace {
std::atomic<unsigned> g_serial{0};  // distinct temporary names for files written at once by one process

// The temporary files now open, for a signal handler: fixed slots (no allocation, no lock), each free (0),
// being written (1) or holding a path (2). More files open at once than slots: those are not removed.
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<int> state{0};
  char path[4096];
};
TempSlot g_temps[kTempSlots];

int register_temp(const std::string& path) {
  if (path.size() >= sizeof(TempSlot::path)) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (g_temps[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
      g_temps[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0);
}

extern "C" void remove_temps_and_die(int sig) {
  for (auto& t : g_temps)
    if (t.state.load() == 2) ::unlink(t.path);  // async-signal-safe
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
}  // namespace

void remove_temporary_files_on_signals() {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;  // ignored or handled: left alone
    struct sigaction sa {};
    sa.sa_handler = remove_temps_and_die;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  // Renaming over a link, FIFO or device would replace it by a regular file: refused instead.
  require_regular_or_absent(path_, path_);
  // Beside the target: a rename across file systems would be a copy, visible half-done.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_serial.fetch_add(1));
    slot_ = register_temp(temp_);  // before the file exists: a signal now finds nothing to remove, never a leak
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    unregister_temp(slot_);
    slot_ = -1;
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
  unregister_temp(slot_);
  slot_ = -1;
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
  unregister_temp(slot_);
  slot_ = -1;
}

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace hotpath::util
