// The CPU backend's kernel choice (isa_choice.hpp) and the CPU feature detection it reads.
#include "cpu/isa_choice.hpp"

#include "util/error.hpp"

namespace hotpath::cpu {
namespace {

std::optional<CpuFeatures>& features_override() {
  static std::optional<CpuFeatures> f;
  return f;
}

}  // namespace

IsaChoice choose_isa(Precision precision, const CpuFeatures& cpu, const CpuOptions& o) {
  const bool bf16 = precision == Precision::bf16, int8 = precision == Precision::int8;
  const bool has_avx2 = cpu.avx2_fma;
  const bool has_avx512 = has_avx2 && cpu.avx512;
  const bool has_bf16dot = has_avx512 && cpu.avx512_bf16;
  const bool has_vnni = has_avx512 && cpu.avx512_vnni;
  const bool chose = o.isa != CpuIsa::automatic;
  const CpuIsa isa = chose ? o.isa
                     : int8 ? (has_vnni ? CpuIsa::avx512 : CpuIsa::generic)
                     : has_avx512 ? CpuIsa::avx512
                     : has_avx2   ? CpuIsa::avx2
                                  : CpuIsa::generic;
  IsaChoice c;
  c.options = o;
  if (isa == CpuIsa::avx512) {
    if (!has_avx512) throw UnsupportedError("cpu option isa=avx512: this CPU lacks AVX-512 F/BW/DQ/VL");
    if (int8 && !has_vnni) throw UnsupportedError("--precision int8 with cpu option isa=avx512: this CPU lacks AVX512_VNNI");
    if (o.bf16 == CpuBf16::dot && !has_bf16dot) throw UnsupportedError("cpu option bf16=dot: this CPU lacks AVX512_BF16");
    c.table = kernels_avx512(o.bf16 != CpuBf16::cvt && has_bf16dot);
  } else if (isa == CpuIsa::avx2) {
    if (!has_avx2) throw UnsupportedError("cpu option isa=avx2: this CPU lacks AVX2/FMA");
    if (o.bf16 == CpuBf16::dot) throw UnsupportedError("cpu option bf16=dot needs AVX512_BF16 (or isa=generic)");
    if (int8) throw UnsupportedError("--precision int8 needs AVX512_VNNI or cpu option isa=generic, not avx2");
    c.table = kernels_avx2();
  } else {
    c.table = kernels_generic(o.bf16 != CpuBf16::cvt);
  }
  c.variant = std::string(c.table->isa) +
              (int8 ? "-int8" : bf16 ? (c.table->bf16_dot || isa == CpuIsa::avx2 ? "-bf16" : "-bf16cvt") : "-fp32");
  if (int8 && isa == CpuIsa::generic)
    c.int8_slow = std::string("int8 runs on the portable kernels here (") +
                  (chose ? "cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA"
                         : "this CPU lacks AVX512_VNNI, which the int8 kernels need") +
                  "), many times slower than fp32 (lstm_s: ~15x): use fp32 or bf16 on this machine";
  return c;
}

CpuFeatures cpu_features() {
  if (features_override()) return *features_override();
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  return f;
}

void override_cpu_features(std::optional<CpuFeatures> features) { features_override() = features; }

std::string int8_slow_note(const CpuFeatures& features, const CpuOptions& options) {
  return choose_isa(Precision::int8, features, options).int8_slow;
}

}  // namespace hotpath::cpu
