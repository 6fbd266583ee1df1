#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "util/arch.hpp"

namespace hotpath {
// The vectorised CPU backend (AVX-512 with an AVX2 fallback on x86-64, NEON on aarch64, chosen at run time). int8 on the portable
// kernels (no AVX512_VNNI, or the cpu option isa=generic) warns once on stderr (util/warn.hpp) and says
// so in facts()["cpu_int8"]. Its own options: options.cpu, or the environment's (backend/cpu_options.hpp).
std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& options);
namespace cpu {
struct CriticalStateLayout;
class WindowStateFeed;
}  // namespace cpu
// The cpu backend's critical step with each tick's window state from a feed (cpu/window_feed.hpp) instead
// of its own precompute: no precompute workers; `make_feed` is called once with the step's state layout.
// `name` is what name() reports (the hybrid backend's "hybrid"). Window and streaming modes only.
std::unique_ptr<Backend> make_cpu_backend_fed(
    const Model& model, const BackendOptions& options, const std::string& name,
    const std::function<std::unique_ptr<cpu::WindowStateFeed>(const cpu::CriticalStateLayout&)>& make_feed);

namespace cpu {
// What the backend's kernel choice looks at. Detected on this CPU, unless override_cpu_features()
// gave other answers (tests, so that both sides of a choice are tested on any machine; a table this
// CPU cannot run must not be made to run).
using CpuFeatures = arch::IsaFlags;
CpuFeatures cpu_features();
void override_cpu_features(std::optional<CpuFeatures> features);  // nullopt: detect again
// Why int8 would run on the portable kernels with `features` and `options` (the environment's when not
// given), many times slower than fp32; empty when it runs on AVX512_VNNI. Throws as the backend would for
// an impossible ISA.
std::string int8_slow_note(const CpuFeatures& features, const CpuOptions& options = cpu_options_from_env());
// The cores the critical step is split over (CpuOptions::crit_cores): `asked` (0: auto), for critical
// weights of `critical_bytes` in `blocks` blocks of hidden units, one core's L2 of `l2_bytes` (0:
// unknown), a cpuset of `cpuset_cores` (0: none) and `usable_cores` this process may run on. Throws
// hotpath::Error, naming why, for an ask that cannot be served: more parts than blocks, than the cpuset
// has, or (without one) than the process has cores (each part spins on a core of its own: two on one
// core would wait for the scheduler at every barrier). `precompute_beside`: auto leaves a cpuset core for the
// precompute (false: a fed backend, whose precompute runs elsewhere, may take them all).
int choose_critical_cores(int asked, size_t critical_bytes, size_t l2_bytes, size_t cpuset_cores, int blocks,
                          size_t usable_cores, bool precompute_beside = true);
// One core's L2 as the C library reports it; 0 when it does not.
size_t core_l2_bytes();
}  // namespace cpu
}  // namespace hotpath
