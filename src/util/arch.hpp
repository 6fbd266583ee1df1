// What differs between CPU architectures in the host code, in this one file (docs/portability.md): the
// spin-wait hint, the 16-byte stores and loads and the store fence of the GPU mailbox, and the cycle
// counter of the micro-benchmarks. x86-64 and aarch64 each get their own instructions; any other CPU a
// portable form (std::atomic fences, std::chrono), so the host code builds there too. The per-ISA kernel
// files of the CPU backend (src/cpu/kernels_<isa>.cpp) are the only other places with intrinsics, each
// built only for its own architecture (tests/repo/arch_constructs.sh checks both rules).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>  // immintrin.h and, for clang, __rdtsc / __rdtscp
#define HOTPATH_ARCH_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__)
#include <arm_neon.h>
#if defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif
#define HOTPATH_ARCH_ARM64 1
#endif

namespace hotpath::arch {

// The architecture's name, as the benchmarks' reports and `hotpath info` print it.
#if defined(HOTPATH_ARCH_X86)
inline constexpr const char* kName = "x86_64";
#elif defined(HOTPATH_ARCH_ARM64)
inline constexpr const char* kName = "aarch64";
#else
inline constexpr const char* kName = "other";
#endif

// The line that two threads' hot words must not share. 64 bytes on every x86-64 and on the Arm cores a
// desk runs (Neoverse V1/V2, Grace); Apple's cores use 128, and std::hardware_destructive_interference_size
// would differ between compilers of one ABI (GCC warns of it), so the number is fixed per architecture.
#if defined(__APPLE__) && defined(HOTPATH_ARCH_ARM64)
inline constexpr size_t kCacheLine = 128;
#else
inline constexpr size_t kCacheLine = 64;
#endif

// The vector extensions this CPU has, as the CPU backend's kernel choice (cpu/isa_choice.cpp) reads
// them: CPUID through the compiler's builtins on x86, the kernel's HWCAP words on Linux/aarch64.
struct IsaFlags {
  // x86-64
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, DQ and VL
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  // AMX tiles with bf16 products (TDPBF16PS), and the kernel's leave to use their state: Linux grants the
  // tile data only to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM), which detect_isa() does.
  bool amx_bf16 = false;
  bool amx_int8 = false;  // AMX tiles with int8 products (TDPBSSD, TDPBUSD), the same leave
  // aarch64 (Advanced SIMD itself is part of the base architecture)
  bool neon = false;
  bool neon_dot = false;   // FEAT_DotProd: SDOT/UDOT
  bool neon_i8mm = false;  // FEAT_I8MM: USDOT, unsigned-by-signed bytes (vpdpbusd's analogue)
  bool neon_bf16 = false;  // FEAT_BF16: BFDOT/BFMMLA
  bool sve = false, sve2 = false;
  bool sve_i8mm = false, sve_bf16 = false;  // SVE's own I8MM and BF16 instructions
  int sve_bits = 0;                         // this thread's SVE vector length (0: no SVE)
};
inline IsaFlags detect_isa() {
  IsaFlags f;
#if defined(HOTPATH_ARCH_X86)
  __builtin_cpu_init();
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
#if defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && ((d >> 22 & 1) || (d >> 25 & 1))) {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // asm/prctl.h, the tile data's state
    static const bool granted = syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;  // asked once
    f.amx_bf16 = granted && (d >> 22 & 1);
    f.amx_int8 = granted && (d >> 25 & 1);
  }
#endif
#elif defined(HOTPATH_ARCH_ARM64)
  f.neon = true;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  f.neon_dot = hw & HWCAP_ASIMDDP;
  f.sve = hw & HWCAP_SVE;
  f.sve2 = hw2 & HWCAP2_SVE2;
  f.neon_i8mm = hw2 & HWCAP2_I8MM;
  f.neon_bf16 = hw2 & HWCAP2_BF16;
  f.sve_i8mm = f.sve && (hw2 & HWCAP2_SVEI8MM);
  f.sve_bf16 = f.sve && (hw2 & HWCAP2_SVEBF16);
  if (f.sve) {
    const int vl = prctl(PR_SVE_GET_VL);
    f.sve_bits = vl > 0 ? (vl & PR_SVE_VL_LEN_MASK) * 8 : 0;
  }
#endif
#endif
  return f;
}

// One turn of a spin-wait: PAUSE on x86 (frees the core's other hyperthread, ~40-140 cycles), YIELD on
// Arm (a hint; a Neoverse core treats it as a no-op), nothing elsewhere.
inline void cpu_relax() {
#if defined(HOTPATH_ARCH_X86)
  _mm_pause();
#elif defined(HOTPATH_ARCH_ARM64)
  asm volatile("yield" ::: "memory");
#endif
}

// Orders every earlier store (non-temporal ones included) before every later one, as a device reading
// the host's memory sees them: SFENCE on x86; on Arm DMB OSHST, the outer-shareable domain, which
// includes devices on PCIe and NVLink-C2C (a plain release fence is DMB ISH, the CPUs' domain only).
inline void store_fence() {
#if defined(HOTPATH_ARCH_X86)
  _mm_sfence();
#elif defined(HOTPATH_ARCH_ARM64)
  asm volatile("dmb oshst" ::: "memory");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Four 32-bit words as one 16-byte store to `dst` (16-byte aligned): a reader's 16-byte load of the line
// sees all of it or none of it (x86: MOVDQA; Arm: one Q-register STR, single-copy atomic when aligned
// on Armv8.4+ cores, Neoverse V1/V2 among them). Elsewhere two 8-byte halves, which the mailbox's
// sequence word in both halves (cuda/kernels/common/mailbox_layout.hpp) catches when torn. The words come
// in registers: built in a 16-byte array instead, the array's smaller stores and its 16-byte reload stall
// on store forwarding, ~20 cycles a store.
inline void store16(void* dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(HOTPATH_ARCH_X86)
  _mm_store_si128(static_cast<__m128i*>(dst), _mm_set_epi32(int(d), int(c), int(b), int(a)));
#elif defined(HOTPATH_ARCH_ARM64)
  const uint32x4_t v = {a, b, c, d};
  vst1q_u32(static_cast<uint32_t*>(dst), v);
#else
  const uint32_t w[4] = {a, b, c, d};
  std::memcpy(dst, w, 16);
#endif
}

// store16 that bypasses the caches where the CPU has such a store (x86 MOVNTDQ: the line leaves the
// write-combining buffer as one burst at the next store_fence()). Arm's STNP is a hint with no
// write-combining behind it, so there this is store16.
inline void stream16(void* dst, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(HOTPATH_ARCH_X86)
  _mm_stream_si128(static_cast<__m128i*>(dst), _mm_set_epi32(int(d), int(c), int(b), int(a)));
#else
  store16(dst, a, b, c, d);
#endif
}

// One 16-byte load from `src` (16-byte aligned) into w, the counterpart of store16.
inline void load16(const void* src, uint32_t (&w)[4]) {
#if defined(HOTPATH_ARCH_X86)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(w), _mm_load_si128(static_cast<const __m128i*>(src)));
#elif defined(HOTPATH_ARCH_ARM64)
  vst1q_u32(w, vld1q_u32(static_cast<const uint32_t*>(src)));
#else
  std::memcpy(w, src, 16);
#endif
}

// A word the device polls (a control or heartbeat word in host memory): the store, then store_fence().
inline void publish_word(uint32_t* word, uint32_t value) {
  std::atomic_ref<uint32_t>(*word).store(value, std::memory_order_release);
  store_fence();
}

// The micro-benchmarks' cycle counter, ordered against the timed code: x86's TSC (LFENCE; RDTSC before,
// RDTSCP; LFENCE after: ~10 ns a pair), Arm's virtual counter CNTVCT_EL0 (ISB before and after; it runs
// at CNTFRQ_EL0, 1 GHz on Armv8.6+ cores, lower on older ones: coarser than a cycle), steady_clock's
// nanoseconds elsewhere. Read counts_per_ns() once to convert.
inline uint64_t counter_begin() {
#if defined(HOTPATH_ARCH_X86)
  _mm_lfence();
  return __rdtsc();
#elif defined(HOTPATH_ARCH_ARM64)
  uint64_t t;
  asm volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(t)::"memory");
  return t;
#else
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
#endif
}
inline uint64_t counter_end() {
#if defined(HOTPATH_ARCH_X86)
  unsigned aux;
  const uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
#elif defined(HOTPATH_ARCH_ARM64)
  uint64_t t;
  asm volatile("isb\n\tmrs %0, cntvct_el0\n\tisb" : "=r"(t)::"memory");
  return t;
#else
  return counter_begin();
#endif
}

// The same counter read without a fence (a few ns where the fenced pair costs ~10): for spans of
// microseconds, where the few cycles the read may move by do not matter (telemetry/tick_clock.hpp).
// steady_clock's nanoseconds where there is no counter.
inline uint64_t counter_now() {
#if defined(HOTPATH_ARCH_X86)
  return __rdtsc();
#elif defined(HOTPATH_ARCH_ARM64)
  uint64_t t;
  asm volatile("mrs %0, cntvct_el0" : "=r"(t));
  return t;
#else
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
#endif
}
// Whether that counter runs at one rate whatever the core's clock and sleep state: x86's invariant-TSC
// bit (CPUID.80000007H:EDX[8]; a VM may hide it); Arm's generic timer always does; false elsewhere.
inline bool counter_invariant() {
#if defined(HOTPATH_ARCH_X86)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d & (1u << 8)) != 0;
#elif defined(HOTPATH_ARCH_ARM64)
  return true;
#else
  return false;
#endif
}

// Counter ticks per nanosecond, against steady_clock over `span` (Arm: CNTFRQ_EL0 says it exactly, but
// one method for every architecture keeps the calibrations the same): 200 ms for the benchmarks, a few ms
// for the telemetry's clock (its error, two clock reads over the span, is then ~1e-5).
inline double counts_per_ns(std::chrono::nanoseconds span = std::chrono::milliseconds(200)) {
  using clock = std::chrono::steady_clock;
  const auto c0 = clock::now();
  const uint64_t t0 = counter_begin();
  while (clock::now() - c0 < span) {
  }
  const uint64_t t1 = counter_end();
  const auto c1 = clock::now();
  return double(t1 - t0) / double(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count());
}

}  // namespace hotpath::arch
