// Hardware event counts of the calling thread, user mode only, over the spans between start() and
// stop() (perf_event_open, one group read at the end): what a critical step costs in cycles, L1D and
// L2 misses and dTLB misses. Where the machine or its VM exposes no PMU (or perf_event_paranoid forbids
// it), available() is false and why() says why; the benchmark then reports that instead of numbers.
#pragma once
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace hotpath::bench {

class PerfCounters {
 public:
  struct Event {
    std::string name;
    uint32_t type;
    uint64_t config;
  };

  // cycles, instructions, L1D load misses, dTLB load misses, last-level-cache misses and, on Intel
  // family 6 (Ice Lake server and later), L2 misses as the raw event L2_RQSTS.MISS (0x24, umask 0x3f).
  static std::vector<Event> default_events() {
    auto cache = [](uint64_t c, uint64_t op, uint64_t res) { return c | (op << 8) | (res << 16); };
    std::vector<Event> e = {
        {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
        {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
        {"l1d_misses", PERF_TYPE_HW_CACHE,
         cache(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)},
        {"dtlb_misses", PERF_TYPE_HW_CACHE,
         cache(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)},
        {"llc_misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
    };
    if (intel_family6()) e.push_back({"l2_misses", PERF_TYPE_RAW, 0x3f24});
    return e;
  }

  explicit PerfCounters(const std::vector<Event>& events = default_events()) {
    for (const Event& ev : events) {
      perf_event_attr a;
      std::memset(&a, 0, sizeof a);
      a.size = sizeof a;
      a.type = ev.type;
      a.config = ev.config;
      a.disabled = fds_.empty() ? 1 : 0;  // the leader starts disabled; members follow it
      a.exclude_kernel = 1;
      a.exclude_hv = 1;
      a.read_format = PERF_FORMAT_GROUP;
      const int fd = int(syscall(SYS_perf_event_open, &a, 0, -1, fds_.empty() ? -1 : fds_[0], 0));
      if (fd < 0) {
        // An event the PMU lacks is skipped; no leader at all means no counters here.
        skipped_ += (skipped_.empty() ? "" : ", ") + ev.name + " (" + std::strerror(errno) + ")";
        continue;
      }
      fds_.push_back(fd);
      names_.push_back(ev.name);
    }
    if (fds_.empty()) why_ = "perf_event_open failed for every event: " + skipped_;
  }
  ~PerfCounters() {
    for (int fd : fds_) close(fd);
  }
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;

  bool available() const { return !fds_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& skipped() const { return skipped_; }
  void start() {
    if (available()) ioctl(fds_[0], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP);
  }
  void stop() {
    if (available()) ioctl(fds_[0], PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP);
  }
  // name -> count summed over every start()/stop() span so far.
  std::vector<std::pair<std::string, uint64_t>> read() const {
    std::vector<std::pair<std::string, uint64_t>> out;
    if (!available()) return out;
    std::vector<uint64_t> buf(1 + fds_.size());
    if (::read(fds_[0], buf.data(), buf.size() * sizeof(uint64_t)) < ssize_t(sizeof(uint64_t))) return out;
    for (size_t k = 0; k < names_.size() && k < buf[0]; ++k) out.emplace_back(names_[k], buf[1 + k]);
    return out;
  }

 private:
  static bool intel_family6() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    bool intel = false, fam6 = false;
    while (std::getline(f, line) && !(intel && fam6)) {
      if (line.rfind("vendor_id", 0) == 0) intel = line.find("GenuineIntel") != std::string::npos;
      if (line.rfind("cpu family", 0) == 0) fam6 = line.find(": 6") != std::string::npos;
    }
    return intel && fam6;
  }
  std::vector<int> fds_;
  std::vector<std::string> names_;
  std::string why_, skipped_;
};

}  // namespace hotpath::bench
