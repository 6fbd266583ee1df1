#include "bench/machine.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <set>

#include "util/error.hpp"

namespace hotpath::bench {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

int cores_online() { return int(sysconf(_SC_NPROCESSORS_ONLN)); }

std::string git_version() { return std::string(HOTPATH_VERSION) + "+" + HOTPATH_GIT_COMMIT; }

long long rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long long pages = 0, resident = -1;
  if (!(f >> pages >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

nlohmann::json machine_json(const std::vector<int>& cpuset) {
  utsname u{};
  uname(&u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"cpu_model", cpu_model()}, {"cores_online", cores_online()}, {"cpuset", cpuset},
          {"cpu_pinning", cpuset.empty() ? "none" : "critical step on first core of cpuset"},
          {"kernel", std::string(u.sysname) + " " + u.release}, {"hostname", host}};
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace hotpath::bench
