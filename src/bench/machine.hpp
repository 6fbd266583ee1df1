// What machine a benchmark ran on, read at run time.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::bench {

std::string cpu_model();          // /proc/cpuinfo "model name", or "unknown"
int cores_online();
std::string git_version();        // "0.1.0+<commit>"
// Resident memory of this process in bytes (/proc/self/statm), or -1 when unknown.
long long rss_bytes();
nlohmann::json machine_json(const std::vector<int>& cpuset);
std::string utc_now();  // "2026-12-02T06:40:00Z"

}  // namespace hotpath::bench
