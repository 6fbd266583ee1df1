// What only the cpu backend reads (BackendOptions::cpu): its kernel path and its memory habits, defined
// once. Every front end parses into it here: the CLI (--cpu-options), the C ABI
// (hotpath_engine_options::cpu_options), Python (Engine(cpu_options=...)), all as the same text, and the
// environment (HOTPATH_CPU_*), the override layer under them (cpu_options_from_env). The text form is
// comma-separated key=value pairs, e.g. "isa=avx2,prefetch=0"; a key it does not name keeps its value.
#pragma once
#include <optional>
#include <string>

#include "util/names.hpp"

namespace hotpath {

enum class CpuIsa { automatic, avx512, avx2, neon, sve, generic };
enum class CpuBf16 { automatic, dot, cvt };
enum class CpuAmx { automatic, on, off };
enum class CpuPrecomputeSplit { automatic, windows, rows };

constexpr auto name_table(CpuIsa) {
  return util::make_names<CpuIsa>("cpu isa", {{CpuIsa::automatic, "auto"}, {CpuIsa::avx512, "avx512"},
                                              {CpuIsa::avx2, "avx2"}, {CpuIsa::neon, "neon"}, {CpuIsa::sve, "sve"},
                                              {CpuIsa::generic, "generic"}});
}
constexpr auto name_table(CpuBf16) {
  return util::make_names<CpuBf16>("cpu bf16 path", {{CpuBf16::automatic, "auto"}, {CpuBf16::dot, "dot"},
                                                     {CpuBf16::cvt, "cvt"}});
}
constexpr auto name_table(CpuPrecomputeSplit) {
  return util::make_names<CpuPrecomputeSplit>("cpu precompute split", {{CpuPrecomputeSplit::automatic, "auto"},
                                                                       {CpuPrecomputeSplit::windows, "windows"},
                                                                       {CpuPrecomputeSplit::rows, "rows"}});
}
constexpr auto name_table(CpuAmx) {
  return util::make_names<CpuAmx>("cpu amx choice", {{CpuAmx::automatic, "auto"}, {CpuAmx::on, "on"}, {CpuAmx::off, "off"}});
}

struct CpuOptions {
  // isa=auto|avx512|avx2|neon|sve|generic: the kernel table. auto: AVX-512 where the CPU has it, else
  // AVX2 (x86-64); on aarch64 SVE where its vectors are 256 or 512 bits (with SVE's BF16 and I8MM), else
  // NEON; else the portable table. int8 takes AVX-512 only with AVX512_VNNI, NEON only with FEAT_I8MM
  // (else the portable table: correct, slow).
  CpuIsa isa = CpuIsa::automatic;
  // bf16=auto|dot|cvt: bf16 weights by pair dot products (AVX512_BF16, or FEAT_BF16's BFDOT on Arm;
  // auto where the CPU has them) or widened to fp32 then FMA.
  CpuBf16 bf16 = CpuBf16::automatic;
  // amx=auto|on|off: bf16's matrix products of several columns (the window precompute, backtests, batches)
  // on AMX tiles (TDPBF16PS, the activations rounded to bf16 as by the pair-dot path). auto: where the CPU
  // has AMX-BF16 and the bf16 path is the pair dot; on refuses where it cannot run. The critical step is
  // one column a tick and stays on the vector kernels.
  CpuAmx amx = CpuAmx::automatic;
  // int8_act=16|8: the int8 critical step's activations. 16 keeps the error at the weights' own rounding
  // (ratio 1.00 on the golden cases); 8 is faster and adds up to 1.44x, past the 1.5x bound on random shapes.
  int int8_act_bits = 16;
  // prefetch=auto|0..65536: software prefetch distance (bytes) ahead of the critical step's weight stream.
  // auto (-1): 1,024 on AVX-512 (lent Xeon, lstm_s window fp32: 3.85 / 5.9 us p50 / p99 with it, 4.90 /
  // 13.6 without), 0 elsewhere (not measured).
  int prefetch_bytes = -1;
  // rewarm=1|0: touch the critical step's weights between ticks, so a tick after a pause finds them in cache.
  bool rewarm = true;
  // hugepages=1|0: the critical weights and window state madvise'd onto transparent huge pages.
  bool huge_pages = true;
  // crit_cores=auto|1..kMaxCriticalCores: the cores the critical step is split over, by blocks of hidden
  // units (each core all four gates of its units), one barrier per layer; the first crit_cores cores of
  // the cpuset (without one: unpinned helper threads), the precompute on the rest. auto (0): one core
  // while the critical weights fit half a core's L2, else as many as spread them so (at most the
  // cpuset's cores less one, kept for the precompute); 1 without a cpuset of three or more cores.
  int crit_cores = 0;
  // pre_split=auto|windows|rows: how window mode's precompute is shared among its cores. windows: each
  // core advances its own open windows through every layer, reading all of the weights. rows: each core
  // owns blocks of hidden units and advances every open window through its rows, one barrier a layer
  // (the next layer needs all of h): its weights stay in its own L2, and a product takes every window
  // as a column (an AMX tile takes 16). auto: rows where the precompute's weights overflow half a core's
  // L2 or its products run on AMX, and more than one core shares it.
  CpuPrecomputeSplit pre_split = CpuPrecomputeSplit::automatic;
  // pre_row_cores=auto|1..kMaxPrecomputeCores: with the rows split, the cores that share one group of
  // open windows. The precompute's cores form groups of this many; each group advances its own windows
  // (by slot, so their state stays in that group's caches), each core of a group its blocks of units, the
  // barrier a layer among the group alone (a barrier over fewer cores, fewer columns to round to bf16 a
  // core, the blocks shared out over fewer cores). auto (0): as few as keep each core's share of the
  // precompute's weights within half its L2 (all the cores, one group, where the L2 size is unknown).
  int pre_row_cores = 0;
  // pre_cores=auto|1..kMaxPrecomputeCores: the precompute's worker threads. auto (0): one per cpuset core
  // after the critical ones, none without a cpuset (the precompute then runs on the critical thread
  // between ticks). A number: the first that many of those cores (refused past them), or without a
  // cpuset that many unpinned workers.
  int pre_cores = 0;
};
inline constexpr int kMaxPrecomputeCores = 256;
inline constexpr int kMaxCriticalCores = 8;

inline const char* cpu_isa_name(CpuIsa isa) { return util::name_of(isa); }
inline const char* cpu_bf16_name(CpuBf16 bf16) { return util::name_of(bf16); }
inline const char* cpu_amx_name(CpuAmx amx) { return util::name_of(amx); }

// `text` over `base`: only the keys it names change. Throws hotpath::Error naming the bad pair and what
// the key accepts.
CpuOptions parse_cpu_options(const std::string& text, CpuOptions base = {});
// The defaults under HOTPATH_CPU_ISA, HOTPATH_CPU_BF16, HOTPATH_CPU_AMX, HOTPATH_CPU_INT8_ACT, HOTPATH_CPU_PREFETCH,
// HOTPATH_CPU_REWARM, HOTPATH_CPU_HUGEPAGES, HOTPATH_CPU_CRIT_CORES, HOTPATH_CPU_PRE_SPLIT and HOTPATH_CPU_PRE_CORES (each the same values as its key): the one place that reads
// them. Throws hotpath::Error naming the variable.
CpuOptions cpu_options_from_env();
// What a front end's text (--cpu-options, the C ABI's field, Python's keyword) means: its keys over the
// environment's.
CpuOptions cpu_options_over_env(const std::string& text);
// The options given, or (none given) the environment's: what a cpu backend is made with.
CpuOptions cpu_options_or_env(const std::optional<CpuOptions>& given);
// Every key's value in the text form (parse_cpu_options(cpu_options_text(o)) == o).
std::string cpu_options_text(const CpuOptions& o);
// The keys and their values, one line each, for --help.
std::string cpu_options_help();

}  // namespace hotpath
