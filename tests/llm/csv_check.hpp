// Shared by the llm tests that feed hostile server text into the per-request CSV.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llm/report/report.hpp"

namespace hotpath::llm {

// The CSV write_csv() makes of `records`, checked to be one line per record with no NUL and no
// raw byte >= 0x80 (the inputs of these tests are ASCII but for their invalid bytes).
inline std::string clean_csv_of(const std::vector<RequestRecord>& records) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("hotpath_llm_csv_" + std::to_string(getpid()) + ".csv");
  write_csv(records, p.string());
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove(p);
  const std::string csv = ss.str();
  EXPECT_EQ(csv.find('\0'), std::string::npos) << csv;
  EXPECT_EQ(std::count_if(csv.begin(), csv.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }), 0)
      << csv;
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), records.size() + 1) << csv;
  return csv;
}

}  // namespace hotpath::llm
