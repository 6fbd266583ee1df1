#include "bench/machine.hpp"

#include <sys/utsname.h>
#include <unistd.h>

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

std::vector<int> parse_cpuset(const std::string& text) {
  std::set<int> cores;
  std::vector<int> order;
  size_t pos = 0;
  auto bad = [&](const std::string& part) {
    return Error("bad --cpuset '" + text + "': '" + part + "' is not a core number or range like 2-5");
  };
  auto number = [&](const std::string& s, const std::string& part) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) throw bad(part);
    return std::stoi(s);
  };
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string part = text.substr(pos, comma - pos);
    const size_t dash = part.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      lo = hi = number(part, part);
    } else {
      lo = number(part.substr(0, dash), part);
      hi = number(part.substr(dash + 1), part);
      if (hi < lo) throw bad(part);
    }
    for (int c = lo; c <= hi; ++c)
      if (cores.insert(c).second) order.push_back(c);  // first listed core stays first
    pos = comma + 1;
  }
  return order;
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

}  // namespace hotpath::bench
