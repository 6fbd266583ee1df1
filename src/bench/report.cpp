#include "bench/report.hpp"

#include <fstream>

#include "bench/machine.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace hotpath::bench {

nlohmann::json report_header(const std::string& command_line, const std::vector<int>& cpuset) {
  return {{"schema_version", kSchemaVersion},
          {"hotpath_version", git_version()},
          {"date", utc_now()},
          {"command", command_line},
          {"machine", machine_json(cpuset)}};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write '" + path + "'");
  f << text;
  if (!f.flush()) throw Error("cannot write '" + path + "'");
}

void finish_report(nlohmann::json& report, const std::string& failure, std::ostream& out, const std::string& json_path) {
  report["pin_failures"] = nlohmann::json::array();
  for (const auto& f : util::pin_failures()) {
    report["pin_failures"].push_back({{"thread", f.thread}, {"cores", f.cores}, {"reason", f.reason}});
    out << "warning: " << f.thread << " could not be pinned to " << util::cores_text(f.cores) << ": " << f.reason << "\n";
  }
  report["pass"] = failure.empty();
  report["failure"] = failure;
  if (!failure.empty()) out << "FAIL: " << failure << "\n";
  if (!json_path.empty()) write_text(json_path, report.dump(2) + "\n");
}

}  // namespace hotpath::bench
