// What one exchange across the whole GPU costs, without any model around it: the floor under the grid
// kernel's ~2.5 us a hidden layer (docs/cuda.md, "The grid kernel"). Not a test.
//
//   grid_probe [--rounds N] [--look]
//
// nc blocks (one an SM) each hold 8 values (a grid block's 8 hidden units); a round is one layer's
// exchange with no arithmetic: every block publishes its 8 values, then waits until it holds all 8 nc.
// Block 0 reports SM cycles and ns a round (mean over N rounds). Mechanisms:
//   counter      the values as plain words, then red.release.gpu on one arrival counter; warp 0 polls
//                the counter, fences, and the block copies every value (the grid's `counters` exchange)
//   tagged-all   tagged words (tag = round, value); every thread spins on its share of all the words,
//                then a block barrier (the grid's first tagged exchange)
//   tagged-warp  every warp spins on its own 1/16 of the words, then a block barrier (the grid kernel
//                now: a warp's MMAs need its k range only; the barrier stands for the gate sums' meeting)
//   tagged-one   warp 0 alone spins on every word, then a block barrier (fewest pollers)
//   tagged-nap   tagged-warp with a 64 ns nap between polls (less L2 traffic, later detection)
// The tagged words are the kernel's own (kernels/common/tagged_words.cuh). Each also with `work`: 1,000 cycles of spinning after the exchange, as a layer's arithmetic, so the
// blocks' skew shows.
//
// --look: what one look at words already in L2 costs a warp (one ld.relaxed.gpu.v2.u64 a lane, as a compute
// warp's first look at its words), alone and beside the tile loads of a layer held in registers (16 LDS.128
// a lane in each of 8 warps: 64 KiB a block), on every block at once. The grid kernel's warps wait ~1,440
// cycles for their words with the tiles in registers and ~760 with them in shared memory, finding them at
// the first look either way (docs/cuda.md, "The grid kernel, sixth round"); this says whether the tile
// loads alone make the look that much slower, whichever goes first, and whether loads by other warps do
// (they do: "seventh round").
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/kernels/common/tagged_words.cuh"
#include "probe_check.hpp"

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32, kPerBlock = 8;
enum Mech { kCounter, kTaggedAll, kTaggedWarp, kTaggedOne, kTaggedNap, kMechs };
const char* kNames[kMechs] = {"counter", "tagged-all", "tagged-warp", "tagged-one", "tagged-nap"};

struct Result {
  unsigned long long cycles, ns;
};

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Threads first, first + step, ... spin on their pairs of words [from, to) until round r.
__device__ __forceinline__ float spin_pairs(const unsigned long long* w, int from, int to, unsigned r, int first, int step,
                                            int nap_ns) {
  float sum = 0.f;
  for (int i = from / 2 + first; 2 * i < to; i += step) {
    unsigned long long a, b;
    for (;;) {
      hotpath::cuda::dev::ld_words2_gpu(w + 2 * i, a, b);
      if (hotpath::cuda::dev::reached(hotpath::cuda::dev::tag_of(a), r) &&
          hotpath::cuda::dev::reached(hotpath::cuda::dev::tag_of(b), r))
        break;
      if (nap_ns) __nanosleep(nap_ns);
    }
    sum += __uint_as_float(unsigned(a)) + __uint_as_float(unsigned(b));
  }
  return sum;
}

__global__ void __launch_bounds__(kThreads, 1)
probe(int mech, int rounds, int work, unsigned long long* words, unsigned* counter, float* plain, Result* out) {
  extern __shared__ float copy[];
  const int b = int(blockIdx.x), nc = int(gridDim.x), tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int n = nc * kPerBlock;
  float keep = 0.f;
  unsigned long long c0 = 0, g0 = 0;
  for (int r = 1; r <= rounds + 1; ++r) {
    if (r == 2 && b == 0 && tid == 0) {  // round 1 warms up
      c0 = clock64();
      g0 = gtime();
    }
    // publish
    if (mech == kCounter) {
      if (tid < kPerBlock) __stcg(plain + size_t(r & 1) * n + b * kPerBlock + tid, float(r + tid));
      __syncthreads();
      if (tid == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      if (warp == 0) {
        const unsigned want = unsigned(nc) * unsigned(r);
        while (int(*(volatile unsigned*)counter - want) < 0) {
        }
        __syncwarp();
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      }
      __syncthreads();
      for (int i = tid; i < n; i += kThreads) copy[i] = __ldcg(plain + size_t(r & 1) * n + i);
      __syncthreads();
    } else {
      if (tid < kPerBlock)
        hotpath::cuda::dev::st_word_gpu(words + b * kPerBlock + tid,
                                        hotpath::cuda::dev::tagged(unsigned(r), __float_as_uint(float(r + tid))));
      if (mech == kTaggedAll) {
        keep += spin_pairs(words, 0, n, unsigned(r), tid, kThreads, 0);
      } else if (mech == kTaggedWarp || mech == kTaggedNap) {
        const int per = (n / kWarps + 1) & ~1;
        const int from = min(n, warp * per), to = min(n, from + per);
        keep += spin_pairs(words, from, to, unsigned(r), lane, 32, mech == kTaggedNap ? 64 : 0);
        __syncwarp();
      } else if (warp == 0) {
        keep += spin_pairs(words, 0, n, unsigned(r), lane, 32, 0);
      }
      __syncthreads();
    }
    if (work) {  // a layer's arithmetic, as time
      const long long until = clock64() + work;
      while (clock64() < until) {
      }
    }
  }
  if (b == 0 && tid == 0) {
    out->cycles = (unsigned long long)(clock64()) - c0;
    out->ns = gtime() - g0;
  }
  if (keep == -1.f) out->ns = 0;  // keeps the loads
}

// --look's variants: the look alone; the warp's 16 tile loads (LDS.128) issued before its look; the same as
// generic loads (LD.E.128 of a shared-memory address, as the grid kernel's load_reg_tiles compiles today:
// its pointer may point to L2 instead); the tile loads after the look; and the block's 64 KiB loaded by 8
// other warps (16 loads a lane each) while warps 0-7 only look.
enum Look { kAlone, kTilesFirst, kGenericFirst, kLookFirst, kOthersLoad, kLooks };
const char* kLookNames[kLooks] = {"look alone", "LDS tiles, then look", "LD tiles, then look", "look, then LDS tiles",
                                  "others load tiles"};
constexpr int kLookWarps = 8, kTilesALane = 16;

__global__ void __launch_bounds__(kThreads, 1)
look_probe(int variant, int rounds, const unsigned long long* words, unsigned long long* warp_cycles) {
  extern __shared__ uint4 tiles[];  // [kLookWarps][kTilesALane][32]: 64 KiB
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < kLookWarps * kTilesALane * 32; i += kThreads) tiles[i] = make_uint4(i, i + 1, i + 2, i + 3);
  __syncthreads();
  static_assert(2 * kLookWarps <= kWarps, "8 warps look, 8 others load");
  const bool looks = warp < kLookWarps;
  const bool loads = variant == kOthersLoad ? warp >= kLookWarps && warp < 2 * kLookWarps
                                            : variant != kAlone && warp < kLookWarps;
  const uint4* mine = tiles + ((warp % kLookWarps) * kTilesALane) * 32 + lane;
  const uint4* generic = mine;
  asm("mov.b64 %0, %0;" : "+l"(generic));  // the compiler no longer sees shared memory: LD, not LDS
  unsigned long long spent = 0;
  unsigned keep = 0;
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    // the clock read waits for a load the barrier orders (BAR.SYNC.DEFER_BLOCKING lets a warp issue
    // instructions that touch no memory before the barrier completes), and for a branch on it
    if (*reinterpret_cast<volatile unsigned*>(&tiles[lane].w) == 0xffffffffu) continue;
    uint4 t[kTilesALane];
    const long long t0 = clock64();
    if (loads && variant == kGenericFirst) {
#pragma unroll
      for (int i = 0; i < kTilesALane; ++i) t[i] = generic[i * 32];
    } else if (loads && variant != kLookFirst) {
#pragma unroll
      for (int i = 0; i < kTilesALane; ++i) t[i] = mine[i * 32];
    }
    unsigned long long a = 0, b = 0;
    if (looks) hotpath::cuda::dev::ld_words2_gpu(words + 2 * (size_t(blockIdx.x) * kThreads + tid), a, b);
    if (loads && variant == kLookFirst)
#pragma unroll
      for (int i = 0; i < kTilesALane; ++i) t[i] = mine[i * 32];
    // a branch on the look (as a warp's check of its words' tags), not on the tiles, before the clock
    while (unsigned(a) == 0x9e3779b9u) asm volatile("");
    keep += unsigned(a) ^ unsigned(b);
    const long long t1 = clock64();
    spent += (unsigned long long)(t1 - t0);
    if (t1 == t0) break;  // never: a block boundary, so the tiles' uses below stay after the clock read
    if (loads)
#pragma unroll
      for (int i = 0; i < kTilesALane; ++i) keep ^= t[i].x ^ t[i].y ^ t[i].z ^ t[i].w;
  }
  if (lane == 0 && looks) warp_cycles[size_t(blockIdx.x) * kWarps + warp] = spent / unsigned(rounds);
  if (keep == 0xffffffffu) warp_cycles[0] = 0;  // keeps the looks
}

void run_looks(int sms, int rounds) {
  const int nc = 128 <= sms ? 128 : sms;
  const int smem = kLookWarps * kTilesALane * 32 * int(sizeof(uint4));
  CHECK(cudaFuncSetAttribute(look_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned long long *words = nullptr, *cycles = nullptr;
  CHECK(cudaMalloc(&words, size_t(nc) * kThreads * 16));
  CHECK(cudaMemset(words, 1, size_t(nc) * kThreads * 16));
  CHECK(cudaMallocManaged(&cycles, size_t(nc) * kWarps * 8));
  std::printf("\n--look: %d blocks, %d rounds; SM cycles from a warp's first load to holding its look (mean over the\n"
              "rounds; the mean and the largest over the looking warps of every block)\n", nc, rounds);
  std::printf("%-20s %10s %10s\n", "variant", "mean", "largest");
  for (int v = 0; v < kLooks; ++v) {
    CHECK(cudaMemset(cycles, 0, size_t(nc) * kWarps * 8));
    int v_ = v, rounds_ = rounds;
    void* args[] = {&v_, &rounds_, &words, &cycles};
    CHECK(cudaLaunchCooperativeKernel((const void*)look_probe, dim3(unsigned(nc)), dim3(kThreads), args, size_t(smem), 0));
    CHECK(cudaDeviceSynchronize());
    double sum = 0, most = 0;
    int n = 0;
    for (int i = 0; i < nc * kWarps; ++i)
      if (cycles[i]) {
        sum += double(cycles[i]);
        most = std::max(most, double(cycles[i]));
        ++n;
      }
    std::printf("%-20s %10.0f %10.0f\n", kLookNames[v], n ? sum / n : 0.0, most);
  }
  CHECK(cudaFree(words));
  CHECK(cudaFree(cycles));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20000;
  bool look = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--look")) look = true;
  int dev = 0, sms = 0, optin = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  // One block an SM: more than half an SM's shared memory each.
  const int smem = optin / 2 + 1024;
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned long long* words = nullptr;
  unsigned* counter = nullptr;
  float* plain = nullptr;
  Result* out = nullptr;
  CHECK(cudaMalloc(&words, size_t(sms) * kPerBlock * 8));
  CHECK(cudaMalloc(&counter, 256));
  CHECK(cudaMalloc(&plain, size_t(sms) * kPerBlock * 2 * 4));
  CHECK(cudaMallocManaged(&out, sizeof(Result)));
  if (look) {
    run_looks(sms, rounds);
    return 0;
  }
  std::printf("grid_probe: %d SMs, %d rounds a run, %d threads a block, %d values a block\n", sms, rounds, kThreads, kPerBlock);
  std::printf("%-12s %6s %6s %12s %10s\n", "mechanism", "blocks", "work", "cycles/round", "ns/round");
  for (int work : {0, 1000})
    for (int nc : {32, 64, 128 <= sms ? 128 : sms})
      for (int mech = 0; mech < kMechs; ++mech) {
        CHECK(cudaMemset(words, 0, size_t(sms) * kPerBlock * 8));
        CHECK(cudaMemset(counter, 0, 256));
        int mech_ = mech, rounds_ = rounds, work_ = work;
        void* args[] = {&mech_, &rounds_, &work_, &words, &counter, &plain, &out};
        CHECK(cudaLaunchCooperativeKernel((const void*)probe, dim3(unsigned(nc)), dim3(kThreads), args, size_t(smem), 0));
        CHECK(cudaDeviceSynchronize());
        std::printf("%-12s %6d %6d %12.0f %10.0f\n", kNames[mech], nc, work, double(out->cycles) / rounds,
                    double(out->ns) / rounds);
      }
  return 0;
}
