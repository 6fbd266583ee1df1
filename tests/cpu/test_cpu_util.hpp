// Helpers shared by the cpu backend's tests.
#pragma once
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/random_model.hpp"
#include "model/model.hpp"
#include "cpu/isa_choice.hpp"
#include "util/arch.hpp"

namespace hotpath::cputest {

// What this CPU really has (not cpu_features(), which a test may override).
inline bool cpu_has_avx2() { return arch::detect_isa().avx2_fma; }
inline bool cpu_has_avx512() { return cpu_has_avx2() && arch::detect_isa().avx512; }
inline bool cpu_has_avx512bf16() { return cpu_has_avx512() && arch::detect_isa().avx512_bf16; }
inline bool cpu_has_avx512vnni() { return cpu_has_avx512() && arch::detect_isa().avx512_vnni; }
// AMX tiles with bf16 products, the tile data granted (the pair-dot table's AMX products need both).
inline bool cpu_has_amx() { return cpu_has_avx512bf16() && arch::detect_isa().amx_bf16; }
// AMX tiles with int8 products, the tile data granted, beside the int8 table's AVX512_VNNI.
inline bool cpu_has_amx_int8() { return cpu_has_avx512vnni() && arch::detect_isa().amx_int8; }
inline bool cpu_has_neon() { return arch::detect_isa().neon; }
// NEON's extension table (BFDOT, USDOT): FEAT_DotProd, FEAT_I8MM and FEAT_BF16 together.
inline bool cpu_has_neon_ext() { return cpu::neon_ext_usable(arch::detect_isa()); }
// An SVE table: 256- or 512-bit vectors with SVE's BF16 and I8MM.
inline bool cpu_has_sve_table() { return cpu::sve_usable(arch::detect_isa()); }

// One kernel path, forced through HOTPATH_CPU_ISA / HOTPATH_CPU_BF16 / HOTPATH_CPU_AMX.
struct Variant {
  std::string isa, bf16, label;
  std::string amx = "off";  // HOTPATH_CPU_AMX: off, or auto for the AMX variant (bf16 and int8 products on tiles)
};

// Every path this CPU can run: the portable 16-lane ones (mirroring AVX-512, with and without the
// bf16 pair dot) always, AVX2 and AVX-512 (and its AMX products) where present, NEON (and its bf16 pair dot) and SVE on aarch64.
inline std::vector<Variant> available_variants() {
  std::vector<Variant> v = {{"generic", "dot", "generic_dot"}, {"generic", "cvt", "generic_cvt"}};
  if (cpu_has_avx2()) v.push_back({"avx2", "", "avx2"});
  if (cpu_has_avx512()) v.push_back({"avx512", "cvt", "avx512_cvt"});
  if (cpu_has_avx512bf16()) v.push_back({"avx512", "dot", "avx512_dot"});
  if (cpu_has_amx()) v.push_back({"avx512", "dot", "avx512_amx", "auto"});
  if (cpu_has_neon()) v.push_back({"neon", "cvt", "neon_cvt"});
  if (cpu_has_neon_ext()) v.push_back({"neon", "dot", "neon_dot"});
  if (cpu_has_sve_table()) {
    v.push_back({"sve", "cvt", "sve_cvt"});
    v.push_back({"sve", "dot", "sve_dot"});
  }
  return v;
}

class IsaScope {
 public:
  explicit IsaScope(const Variant& v) {
    save("HOTPATH_CPU_ISA", isa_);
    save("HOTPATH_CPU_BF16", bf16_);
    save("HOTPATH_CPU_AMX", amx_);
    set("HOTPATH_CPU_ISA", v.isa);
    set("HOTPATH_CPU_BF16", v.bf16);
    set("HOTPATH_CPU_AMX", v.amx);
  }
  ~IsaScope() {
    restore("HOTPATH_CPU_ISA", isa_);
    restore("HOTPATH_CPU_BF16", bf16_);
    restore("HOTPATH_CPU_AMX", amx_);
  }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  struct Saved {
    bool had = false;
    std::string value;
  };
  static void save(const char* n, Saved& s) {
    const char* v = std::getenv(n);
    s.had = v != nullptr;
    if (v) s.value = v;
  }
  static void set(const char* n, const std::string& v) {
    if (v.empty())
      unsetenv(n);
    else
      setenv(n, v.c_str(), 1);
  }
  static void restore(const char* n, const Saved& s) {
    if (s.had)
      setenv(n, s.value.c_str(), 1);
    else
      unsetenv(n);
  }
  Saved isa_, bf16_, amx_;
};

// One environment variable set for a scope (the cpu backend's override layer, HOTPATH_CPU_*), restored after.
class EnvScope {
 public:
  EnvScope(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) had_ = true, old_ = v;
    setenv(name, value.c_str(), 1);
  }
  ~EnvScope() { had_ ? (void)setenv(name_, old_.c_str(), 1) : (void)unsetenv(name_); }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

using test_support::random_model;

// [T, I] standard normal inputs, different every tick.
inline std::vector<float> random_inputs(size_t T, int I, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(T * I);
  for (auto& v : x) v = n(rng);
  return x;
}

// process() every tick; [T, O] outputs.
inline std::vector<double> run_ticks(Backend& b, const std::vector<float>& x, size_t T) {
  const int I = b.config().input_size, O = b.config().output_size;
  std::vector<float> out(O);
  std::vector<double> z;
  z.reserve(T * O);
  for (size_t t = 0; t < T; ++t) {
    b.process(std::span<const float>(x.data() + t * I, I), out);
    z.insert(z.end(), out.begin(), out.end());
  }
  return z;
}

// Two cores this process may run on (one when it may run on only one).
inline std::vector<int> two_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && cores.size() < 2; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
  if (cores.empty()) cores.push_back(0);
  return cores;
}

}  // namespace hotpath::cputest
