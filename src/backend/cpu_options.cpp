#include "backend/cpu_options.hpp"

#include <cstdlib>
#include <functional>
#include <string_view>
#include <vector>

#include "util/error.hpp"
#include "util/number.hpp"

namespace hotpath {
namespace {

// One key: its name, the values it accepts (for errors and help), how a value sets it, how it reads back.
struct Key {
  const char* name;
  const char* env;
  std::string accepts;
  std::function<bool(const std::string&, CpuOptions&)> set;  // false: not a value this key accepts
  std::function<std::string(const CpuOptions&)> get;
};

// A value of the key's enum, by that enum's name table (util/names.hpp).
template <class E>
bool set_choice(const std::string& v, E& out) {
  const auto e = name_table(E{}).find(v);
  if (e) out = *e;
  return e.has_value();
}

bool set_flag(const std::string& v, bool& out) {
  if (v == "1") return out = true, true;
  if (v == "0") return out = false, true;
  return false;
}

// A count of cores: auto (0) or 1..max.
Key count_key(const char* name, const char* env, int max, int CpuOptions::*field) {
  return {name, env, "auto or 1.." + std::to_string(max),
          [max, field](const std::string& v, CpuOptions& o) {
            if (v == "auto") return o.*field = 0, true;
            const auto n = util::parse_int<int>(v);
            if (!n || *n < 1 || *n > max) return false;
            o.*field = *n;
            return true;
          },
          [field](const CpuOptions& o) { return o.*field == 0 ? std::string("auto") : std::to_string(o.*field); }};
}

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      {"isa", "HOTPATH_CPU_ISA", util::names_list<CpuIsa>(),
       [](const std::string& v, CpuOptions& o) { return set_choice(v, o.isa); },
       [](const CpuOptions& o) { return std::string(cpu_isa_name(o.isa)); }},
      {"bf16", "HOTPATH_CPU_BF16", util::names_list<CpuBf16>(),
       [](const std::string& v, CpuOptions& o) { return set_choice(v, o.bf16); },
       [](const CpuOptions& o) { return std::string(cpu_bf16_name(o.bf16)); }},
      {"amx", "HOTPATH_CPU_AMX", util::names_list<CpuAmx>(),
       [](const std::string& v, CpuOptions& o) { return set_choice(v, o.amx); },
       [](const CpuOptions& o) { return std::string(cpu_amx_name(o.amx)); }},
      {"int8_act", "HOTPATH_CPU_INT8_ACT", "16 or 8",
       [](const std::string& v, CpuOptions& o) {
         if (v != "16" && v != "8") return false;
         o.int8_act_bits = v == "8" ? 8 : 16;
         return true;
       },
       [](const CpuOptions& o) { return std::to_string(o.int8_act_bits); }},
      {"prefetch", "HOTPATH_CPU_PREFETCH", "auto or bytes 0..65536",
       [](const std::string& v, CpuOptions& o) {
         if (v == "auto") return o.prefetch_bytes = -1, true;
         const auto n = util::parse_int<int>(v);
         if (!n || *n < 0 || *n > 65536) return false;
         o.prefetch_bytes = *n;
         return true;
       },
       [](const CpuOptions& o) { return o.prefetch_bytes < 0 ? std::string("auto") : std::to_string(o.prefetch_bytes); }},
      {"rewarm", "HOTPATH_CPU_REWARM", "0 or 1", [](const std::string& v, CpuOptions& o) { return set_flag(v, o.rewarm); },
       [](const CpuOptions& o) { return std::string(o.rewarm ? "1" : "0"); }},
      {"hugepages", "HOTPATH_CPU_HUGEPAGES", "0 or 1",
       [](const std::string& v, CpuOptions& o) { return set_flag(v, o.huge_pages); },
       [](const CpuOptions& o) { return std::string(o.huge_pages ? "1" : "0"); }},
      count_key("crit_cores", "HOTPATH_CPU_CRIT_CORES", kMaxCriticalCores, &CpuOptions::crit_cores),
      {"pre_split", "HOTPATH_CPU_PRE_SPLIT", util::names_list<CpuPrecomputeSplit>(),
       [](const std::string& v, CpuOptions& o) { return set_choice(v, o.pre_split); },
       [](const CpuOptions& o) { return std::string(util::name_of(o.pre_split)); }},
      count_key("pre_cores", "HOTPATH_CPU_PRE_CORES", kMaxPrecomputeCores, &CpuOptions::pre_cores),
      count_key("pre_row_cores", "HOTPATH_CPU_PRE_ROW_CORES", kMaxPrecomputeCores, &CpuOptions::pre_row_cores),
  };
  return k;
}

std::string key_list() {
  std::string s;
  for (const Key& k : keys()) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

}  // namespace

CpuOptions parse_cpu_options(const std::string& text, CpuOptions base) {
  if (text.empty()) return base;
  for (std::string_view rest = text;;) {
    const size_t comma = rest.find(',');
    const std::string pair(rest.substr(0, comma));
    if (pair.empty())
      throw Error("bad --cpu-options '" + text + "': an empty pair (expected key=value, keys: " + key_list() + ")");
    const size_t eq = pair.find('=');
    const std::string name = pair.substr(0, eq);
    const Key* key = nullptr;
    for (const Key& k : keys())
      if (name == k.name) key = &k;
    if (!key) throw Error("bad --cpu-options '" + text + "': unknown key '" + name + "' (keys: " + key_list() + ")");
    if (eq == std::string::npos)
      throw Error("bad --cpu-options '" + text + "': '" + pair + "' has no value (" + name + "=" + key->accepts + ")");
    const std::string value = pair.substr(eq + 1);
    if (!key->set(value, base))
      throw Error("bad --cpu-options '" + text + "': " + name + "=" + value + " (" + name + " takes " + key->accepts + ")");
    if (comma == std::string_view::npos) return base;
    rest.remove_prefix(comma + 1);
  }
}

CpuOptions cpu_options_over_env(const std::string& text) { return parse_cpu_options(text, cpu_options_from_env()); }

// The environment is read only when no options are given (value_or would read it always).
CpuOptions cpu_options_or_env(const std::optional<CpuOptions>& given) { return given ? *given : cpu_options_from_env(); }

CpuOptions cpu_options_from_env() {
  CpuOptions o;
  for (const Key& k : keys()) {
    const char* v = std::getenv(k.env);
    if (!v || !*v) continue;
    if (!k.set(v, o)) throw Error(std::string(k.env) + "='" + v + "': expected " + k.accepts);
  }
  return o;
}

std::string cpu_options_text(const CpuOptions& o) {
  std::string s;
  for (const Key& k : keys()) s += (s.empty() ? "" : ",") + std::string(k.name) + "=" + k.get(o);
  return s;
}

std::string cpu_options_help() {
  std::string s;
  for (const Key& k : keys()) s += (s.empty() ? "  " : "\n  ") + std::string(k.name) + ": " + k.accepts + " (environment: " + k.env + ")";
  return s;
}

}  // namespace hotpath
