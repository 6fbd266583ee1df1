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

}  // namespace hotpath::cpu
