// Which kernel table the CPU backend runs (cpu_backend.hpp: cpu_features, int8_slow_note): the ISA and the
// bf16 path from the CPU's features and the asked CpuOptions, with the reason when int8 falls back to the
// portable kernels.
#pragma once
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"

namespace hotpath::cpu {

struct IsaChoice {
  const KernelTable* table = nullptr;
  std::string variant;
  std::string int8_slow;  // int8 on the portable table: why, else empty
  std::string unbuilt;    // table is null: the ISA asked for is another architecture's (why), else empty
  CpuOptions options;     // as asked (CpuOptions), for the rest of the backend
};

// The kernel table for `precision` on `cpu` as `o` asks (CpuOptions: isa, bf16). int8 needs AVX512_VNNI;
// without it (or with isa=generic) it runs on the portable table, which emulates vpdpbusd (correct, slow).
// Throws UnsupportedError naming what the CPU lacks for an ISA asked for.
IsaChoice choose_isa(Precision precision, const CpuFeatures& cpu, const CpuOptions& o);

// Whether `cpu` can run NEON's extension table (FEAT_DotProd + FEAT_I8MM + FEAT_BF16 together, as its
// unit is built) and an SVE table (256- or 512-bit vectors with SVE's BF16 and I8MM; 128-bit SVE, Grace's,
// is NEON's width and takes the NEON tables).
inline bool neon_ext_usable(const CpuFeatures& cpu) { return cpu.neon && cpu.neon_dot && cpu.neon_i8mm && cpu.neon_bf16; }
inline bool sve_usable(const CpuFeatures& cpu) {
  return cpu.neon && cpu.sve && cpu.sve_i8mm && cpu.sve_bf16 && (cpu.sve_bits == 256 || cpu.sve_bits == 512);
}

}  // namespace hotpath::cpu
