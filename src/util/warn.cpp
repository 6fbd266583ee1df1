#include "util/warn.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

namespace hotpath::util {
namespace {
std::mutex g_mutex;
std::set<std::string> g_shown;
std::atomic<bool> g_stderr{true};
}  // namespace

bool warn_once(const std::string& text) {
  if (!g_stderr.load()) return false;
  {
    std::lock_guard lock(g_mutex);
    if (!g_shown.insert(text).second) return false;
  }
  std::fprintf(stderr, "hotpath: warning: %s\n", text.c_str());
  return true;
}

void set_stderr_warnings(bool on) { g_stderr.store(on); }

void forget_warnings() {
  std::lock_guard lock(g_mutex);
  g_shown.clear();
}
}  // namespace hotpath::util
