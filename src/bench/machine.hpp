// What machine a benchmark ran on, read at run time.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::bench {

std::string cpu_model();          // /proc/cpuinfo "model name", or "unknown"
int cores_online();
std::string git_version();        // "0.1.0+<commit>"
// Pins the calling thread to `core`; throws hotpath::Error naming the core when it is not allowed.
void pin_current_thread(int core);
// The cores the calling thread may run on, and setting them (for threads that must avoid some cores).
std::vector<int> thread_cores();
void set_thread_cores(const std::vector<int>& cores);  // throws hotpath::Error when none is allowed
// "0-3,8" -> {0,1,2,3,8}; throws hotpath::Error naming the bad part.
std::vector<int> parse_cpuset(const std::string& text);
nlohmann::json machine_json(const std::vector<int>& cpuset);

}  // namespace hotpath::bench
