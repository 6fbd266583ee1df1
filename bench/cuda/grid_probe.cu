// What one exchange across the whole GPU costs, without any model around it: the floor under the grid
// kernel's ~2.5 us a hidden layer (docs/cuda.md, "The grid kernel"). Not a test.
//
//   grid_probe [--rounds N]
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
#include <cuda_runtime.h>

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

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20000;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[++i]);
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
