#pragma once
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.hpp"

namespace hotpath {
// The vectorised CPU backend (AVX-512 with an AVX2 fallback chosen at run time). int8 on the portable
// kernels (no AVX512_VNNI, or the cpu option isa=generic) warns once on stderr (util/warn.hpp) and says
// so in facts()["cpu_int8"]. Its own options: options.cpu, or the environment's (backend/cpu_options.hpp).
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options);

namespace cpu {
// What the backend's kernel choice looks at. Detected on this CPU, unless override_cpu_features()
// gave other answers (tests, so that both sides of a choice are tested on any machine; a table this
// CPU cannot run must not be made to run).
struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, DQ and VL
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
};
CpuFeatures cpu_features();
void override_cpu_features(std::optional<CpuFeatures> features);  // nullopt: detect again
// Why int8 would run on the portable kernels with `features` and `options` (the environment's when not
// given), many times slower than fp32; empty when it runs on AVX512_VNNI. Throws as the backend would for
// an impossible ISA.
std::string int8_slow_note(const CpuFeatures& features, const CpuOptions& options = cpu_options_from_env());
}  // namespace cpu
}  // namespace hotpath
