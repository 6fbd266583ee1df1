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
  const bool has_neon = cpu.neon;
  const bool has_neon_ext = neon_ext_usable(cpu);
  const bool has_sve = sve_usable(cpu);
  const bool chose = o.isa != CpuIsa::automatic;
  const CpuIsa isa = chose ? o.isa
                     : int8 ? (has_vnni       ? CpuIsa::avx512
                               : has_sve      ? CpuIsa::sve
                               : has_neon_ext ? CpuIsa::neon
                                              : CpuIsa::generic)
                     : has_avx512 ? CpuIsa::avx512
                     : has_avx2   ? CpuIsa::avx2
                     : has_sve    ? CpuIsa::sve
                     : has_neon   ? CpuIsa::neon
                                  : CpuIsa::generic;
  IsaChoice c;
  c.options = o;
  bool dot = false;  // bf16 by pair dot products
  if (isa == CpuIsa::avx512) {
    if (!has_avx512) throw UnsupportedError("cpu option isa=avx512: this CPU lacks AVX-512 F/BW/DQ/VL");
    if (int8 && !has_vnni) throw UnsupportedError("--precision int8 with cpu option isa=avx512: this CPU lacks AVX512_VNNI");
    if (o.bf16 == CpuBf16::dot && !has_bf16dot) throw UnsupportedError("cpu option bf16=dot: this CPU lacks AVX512_BF16");
    dot = o.bf16 != CpuBf16::cvt && has_bf16dot;
    c.table = kernels_avx512(dot);
    if (o.amx == CpuAmx::on) {
      if (!bf16 && !int8)
        throw UnsupportedError("cpu option amx=on: AMX runs the bf16 and int8 products only (--precision bf16 or int8)");
      if (bf16 && !dot) throw UnsupportedError("cpu option amx=on needs the bf16 pair-dot path (bf16=auto or dot, AVX512_BF16)");
      if (bf16 && !cpu.amx_bf16)
        throw UnsupportedError("cpu option amx=on: this CPU lacks AMX-BF16, or the kernel refused its tile state");
      if (int8 && !cpu.amx_int8)
        throw UnsupportedError("cpu option amx=on: this CPU lacks AMX-INT8, or the kernel refused its tile state");
    }
    if (bf16 && dot && cpu.amx_bf16 && o.amx != CpuAmx::off) c.table = kernels_avx512_amx();
    if (int8 && cpu.amx_int8 && o.amx != CpuAmx::off) c.table = kernels_avx512_amx_i8(dot);
  } else if (o.amx == CpuAmx::on) {
    throw UnsupportedError(std::string("cpu option amx=on needs isa=avx512 (asked or chosen: ") + cpu_isa_name(isa) + ")");
  } else if (isa == CpuIsa::avx2) {
    if (!has_avx2) throw UnsupportedError("cpu option isa=avx2: this CPU lacks AVX2/FMA");
    if (o.bf16 == CpuBf16::dot) throw UnsupportedError("cpu option bf16=dot needs AVX512_BF16 (or isa=generic)");
    if (int8) throw UnsupportedError("--precision int8 needs AVX512_VNNI or cpu option isa=generic, not avx2");
    c.table = kernels_avx2();
  } else if (isa == CpuIsa::neon) {
    if (!has_neon) throw UnsupportedError("cpu option isa=neon: this CPU is not an aarch64 one");
    if (int8 && !has_neon_ext)
      throw UnsupportedError("--precision int8 with cpu option isa=neon: this CPU lacks FEAT_I8MM/FEAT_BF16/FEAT_DotProd");
    if (o.bf16 == CpuBf16::dot && !has_neon_ext)
      throw UnsupportedError("cpu option bf16=dot with isa=neon: this CPU lacks FEAT_BF16/FEAT_I8MM/FEAT_DotProd");
    dot = has_neon_ext && o.bf16 != CpuBf16::cvt;
    c.table = has_neon_ext ? kernels_neon_ext(dot) : kernels_neon_base();
  } else if (isa == CpuIsa::sve) {
    if (!has_sve)
      throw UnsupportedError("cpu option isa=sve: this CPU lacks SVE with 256- or 512-bit vectors and SVE's BF16 and I8MM "
                             "(SVE vectors here: " + std::to_string(cpu.sve_bits) + " bits)");
    dot = o.bf16 != CpuBf16::cvt;
    c.table = cpu.sve_bits == 512 ? kernels_sve512(dot) : kernels_sve256(dot);
  } else {
    dot = o.bf16 != CpuBf16::cvt;
    c.table = kernels_generic(dot);
  }
  // Features given by override_cpu_features() may name the other architecture's ISA: not built here
  // (make_cpu_backend refuses it; the choice itself, and int8_slow_note, still answer).
  if (!c.table) c.unbuilt = std::string("cpu option isa=") + cpu_isa_name(isa) + ": its kernels are not built for " + arch::kName;
  c.variant = std::string(c.table ? c.table->isa : cpu_isa_name(isa)) + (int8   ? (c.table && c.table->amx ? "-int8-amx" : "-int8")
                                           : bf16 ? (c.table && c.table->amx         ? "-bf16-amx"
                                                     : dot || isa == CpuIsa::avx2 ? "-bf16"
                                                                                  : "-bf16cvt")
                                                  : "-fp32");
  if (int8 && isa == CpuIsa::generic)
    c.int8_slow = std::string("int8 runs on the portable kernels here (") +
                  (chose ? "cpu option isa=generic: --cpu-options or HOTPATH_CPU_ISA"
                   : has_neon ? "this CPU lacks FEAT_I8MM, which the NEON int8 kernels need"
                              : "this CPU lacks AVX512_VNNI, which the int8 kernels need") +
                  "), many times slower than fp32 (lstm_s: ~15x): use fp32 or bf16 on this machine";
  return c;
}

CpuFeatures cpu_features() {
  if (features_override()) return *features_override();
  return arch::detect_isa();
}

void override_cpu_features(std::optional<CpuFeatures> features) { features_override() = features; }

std::string int8_slow_note(const CpuFeatures& features, const CpuOptions& options) {
  return choose_isa(Precision::int8, features, options).int8_slow;
}

}  // namespace hotpath::cpu
