// The report every benchmark writes (hotpath bench: latency, instances, throughput): one header, one end.
// Its fields: bench/SCHEMA.md.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotpath::bench {

inline constexpr int kSchemaVersion = 1;

// The header a report starts with: schema, version, date, the command line, the machine (with its cpuset).
nlohmann::json report_header(const std::string& command_line, const std::vector<int>& cpuset);

// `text` into `path`; hotpath::Error naming the path when it cannot be written.
void write_text(const std::string& path, const std::string& text);

// A report's end: the placements that were only preferences and failed (said, not fatal), the verdict
// (`pass`, and `failure` in one line, empty when it passes; FAIL printed), and the JSON file when asked.
void finish_report(nlohmann::json& report, const std::string& failure, std::ostream& out, const std::string& json_path);

}  // namespace hotpath::bench
