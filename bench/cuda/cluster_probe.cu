// What one exchange inside a thread-block cluster costs on this GPU, and what disturbs it: the
// measurement behind the cluster kernel's design (docs/cuda.md, "The cluster kernel"). Not a test.
//
//   cluster_probe [--rounds N] [--trips N] [--cpu C]
//
// Part 1, rounds inside the GPU: N blocks of one cluster each send `bytes` to every block (itself too)
// and wait until all N slices have arrived, R rounds in a row; block 0 reports SM cycles and ns per
// round. Mechanisms:
//   async-try   st.async into the peers' shared memory, completing bytes on their mbarrier; every warp
//               waits with mbarrier.try_wait (the cluster kernel before this measurement)
//   async-test  the same, waiting with mbarrier.test_wait (a pure poll, no suspension)
//   barrier     plain remote stores, then the hardware cluster barrier (arrive.release / wait.acquire)
//   tagged      each 8-byte word carries the round number beside a 4-byte value (st.relaxed.cluster);
//               each warp spins on the words it reads, no barrier and no mbarrier
// Disturbances: none; `pcie` (one more warp per block keeps 16-byte loads of mapped host memory in
// flight, as the old cluster kernel's pollers did); `l2` (more clusters hammer one L2 line with atomics
// and acquire loads and stream a large buffer, as the precompute's barriers and loads do).
//
// Part 2, round trips from the host: the host raises a word in mapped memory; block 0 polls it,
// forwards it to every peer (the mechanism), every peer answers block 0, block 0 answers the host.
// Beside it, N = 1: block 0 alone (the bare ping-pong). Latency on the host's clock, percentiles.
#include <cuda_runtime.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels/common/mbarrier.cuh"
#include "probe_check.hpp"

namespace {

enum Mech : int { kAsyncTry = 0, kAsyncTest = 1, kBarrier = 2, kTagged = 3 };
const char* kMechName[] = {"async-try", "async-test", "barrier", "tagged"};
enum Disturb : int { kNone = 0, kPcie = 1, kL2 = 2 };
const char* kDisturbName[] = {"none", "pcie", "l2"};

constexpr int kWarps = 16;        // compute warps of a block
constexpr int kMaxBlocks = 16;
constexpr int kMaxSliceBytes = 256;

struct Args {
  int mech, disturb, bytes;  // bytes each block sends each peer per round (multiple of 16)
  long long rounds;
  unsigned long long* out;    // [0] cycles, [1] ns (block 0)
  const uint4* host_words;    // pcie disturbance target (mapped host memory)
  unsigned long long* l2_counter;
  const uint4* l2_stream;     // large device buffer
  size_t l2_stream_n;
  volatile unsigned* stop;    // device word: disturbers leave when set
  // part 2
  volatile unsigned* host_in;   // mapped: the host's sequence word
  volatile unsigned* host_out;  // mapped: the answer
  long long trips;
};

// the kernels' own: shared-memory addresses, the cluster's ranks, the mbarrier and st.async
using hotpath::cuda::dev::cluster_rank;
using hotpath::cuda::dev::mbar_expect_tx;
using hotpath::cuda::dev::mbar_init;
using hotpath::cuda::dev::mbar_try_wait;
using hotpath::cuda::dev::peer_smem;
using hotpath::cuda::dev::smem_u32;
using hotpath::cuda::dev::st_async_v4;
__device__ __forceinline__ unsigned cluster_blocks() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ bool mbar_test(uint64_t* b, unsigned par) {
  uint32_t ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0,1,0,p;\n}"
               : "=r"(ok) : "r"(smem_u32(b)), "r"(par) : "memory");
  return ok;
}
__device__ __forceinline__ void st_remote_v4(uint32_t a, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ void st_remote_tag(uint32_t a, unsigned long long v) {
  asm volatile("st.relaxed.cluster.shared::cluster.u64 [%0], %1;" ::"r"(a), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_local_tag(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.cluster.shared::cta.u64 %0, [%1];" : "=l"(v) : "r"(smem_u32(p)) : "memory");
  return v;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint4 ld_volatile_v4(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

struct Shared {
  alignas(16) unsigned char buf[2][kMaxBlocks * kMaxSliceBytes];              // [parity][sender slice]
  alignas(16) unsigned long long tags[2][kMaxBlocks * kMaxSliceBytes / 4];   // tagged: one word a 4-byte value
  alignas(8) uint64_t bar[2];
  unsigned sink;
};

// One round: every block sends its slice to every block, then waits for all slices (parity r & 1).
// Returns a value read from the received data (keeps the loads alive).
__device__ __forceinline__ unsigned exchange(Shared& s, int mech, int bytes, long long r, unsigned n) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const unsigned me = cluster_rank();
  const int par = int(r & 1);
  const unsigned vec = unsigned(bytes / 16);  // v4 per slice
  unsigned got = 0;
  if (mech == kAsyncTry || mech == kAsyncTest) {
    if (tid == 0) mbar_expect_tx(&s.bar[par], n * unsigned(bytes));
    if (warp == 0) {
      for (unsigned i = lane; i < n * vec; i += 32) {
        const unsigned peer = i / vec, v = i % vec;
        const uint32_t dst = peer_smem(smem_u32(&s.buf[par][me * bytes + v * 16]), peer);
        st_async_v4(dst, make_uint4(unsigned(r), me, v, 7u), peer_smem(smem_u32(&s.bar[par]), peer));
      }
    }
    const unsigned phase = unsigned(r >> 1) & 1u;
    if (mech == kAsyncTry) {
      while (!mbar_try_wait(&s.bar[par], phase)) {
      }
    } else {
      while (!mbar_test(&s.bar[par], phase)) {
      }
    }
    got = reinterpret_cast<const unsigned*>(s.buf[par])[(warp * 4) % (n * vec * 4)];
  } else if (mech == kBarrier) {
    if (warp == 0) {
      for (unsigned i = lane; i < n * vec; i += 32) {
        const unsigned peer = i / vec, v = i % vec;
        st_remote_v4(peer_smem(smem_u32(&s.buf[par][me * bytes + v * 16]), peer), make_uint4(unsigned(r), me, v, 7u));
      }
    }
    cluster_arrive();
    cluster_wait();
    got = reinterpret_cast<const unsigned*>(s.buf[par])[(warp * 4) % (n * vec * 4)];
  } else {
    // tagged: word = (round + 1) << 32 | value; a slice of `bytes` carries bytes / 4 values
    const unsigned words = unsigned(bytes / 4);
    if (warp == 0) {
      for (unsigned i = lane; i < n * words; i += 32) {
        const unsigned peer = i / words, w = i % words;
        st_remote_tag(peer_smem(smem_u32(&s.tags[par][me * words + w]), peer),
                      ((unsigned long long)(r + 1) << 32) | (me * 131u + w));
      }
    }
    // each warp waits for its share of the words (as a consumer warp reads only its k-tiles)
    const unsigned total = n * words, per = (total + kWarps - 1) / kWarps;
    const unsigned lo = warp * per, hi = min(total, lo + per);
    const unsigned want = unsigned(r + 1);
    for (;;) {
      bool ok = true;
      for (unsigned i = lo + lane; i < hi; i += 32) {
        const unsigned long long v = ld_local_tag(&s.tags[par][i]);
        ok &= int(unsigned(v >> 32) - want) >= 0;  // reached: a peer's later round may already be there
        got ^= unsigned(v);
      }
      if (__all_sync(0xffffffffu, ok)) break;
    }
  }
  return got;
}

// Every block of the cluster: tags cleared, both mbarriers made, and every block initialised before any
// peer stores into it.
__device__ void init_shared(Shared& s) {
  for (int i = int(threadIdx.x); i < int(sizeof s.tags / 8); i += blockDim.x) (&s.tags[0][0])[i] = 0;
  if (threadIdx.x == 0) {
    mbar_init(&s.bar[0], 1);
    mbar_init(&s.bar[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  cluster_arrive();
  cluster_wait();
}

__device__ void disturb_pcie(const Args& a) {
  unsigned x = 0;
  const int lane = threadIdx.x & 31;
  while (!*a.stop) {
    const uint4 v = ld_volatile_v4(a.host_words + lane);
    x ^= v.x;
  }
  if (x == 0xdeadbeefu) *(volatile unsigned*)a.stop = 2;
}

__device__ void disturb_l2(const Args& a) {
  const int tid = threadIdx.x;
  unsigned x = 0;
  size_t i = (size_t(blockIdx.x) * blockDim.x + tid) % a.l2_stream_n;
  while (!*a.stop) {
    if (tid == 0) {
      atomicAdd(a.l2_counter, 1ull);
      unsigned long long v;
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(a.l2_counter) : "memory");
      x ^= unsigned(v);
    }
    for (int k = 0; k < 8; ++k) {
      const uint4 v = __ldcg(a.l2_stream + i);
      x ^= v.x;
      i = (i + size_t(gridDim.x) * blockDim.x) % a.l2_stream_n;
    }
  }
  if (x == 0xdeadbeefu) *(volatile unsigned*)a.stop = 2;
}

__global__ void __launch_bounds__(32 * (kWarps + 1), 1) rounds_kernel(const __grid_constant__ Args a) {
  __shared__ Shared s;
  const int tid = threadIdx.x, warp = tid >> 5;
  const unsigned n = cluster_blocks();
  const bool probe_cluster = blockIdx.x < n;  // the first cluster measures; the others disturb (l2)
  if (!probe_cluster) {
    if (a.disturb == kL2 && warp < kWarps) disturb_l2(a);
    return;
  }
  init_shared(s);
  if (warp == kWarps) {  // the extra warp, launched only for the pcie disturbance
    disturb_pcie(a);
    return;
  }
  unsigned got = 0;
  long long t0 = 0;
  unsigned long long g0 = 0;
  const long long warm = 64;
  for (long long r = 0; r < a.rounds + warm; ++r) {
    if (r == warm) {
      t0 = clock64();
      g0 = gtimer();
    }
    got ^= exchange(s, a.mech, a.bytes, r, n);
  }
  const long long t1 = clock64();
  const unsigned long long g1 = gtimer();
  if (cluster_rank() == 0 && tid == 0) {
    a.out[0] = (unsigned long long)(t1 - t0);
    a.out[1] = g1 - g0;
    *(volatile unsigned*)a.stop = 1;  // the disturbers may leave
  }
  s.sink = got;
  // no block leaves while a peer may still store into its shared memory
  __syncwarp();
  asm volatile("bar.sync 1, %0;" ::"r"(kWarps * 32));
  cluster_arrive();
  cluster_wait();
}

// Part 2: the host's word -> block 0 -> every peer -> block 0 -> the host.
__global__ void __launch_bounds__(32 * kWarps, 1) trips_kernel(const __grid_constant__ Args a) {
  __shared__ Shared s;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const unsigned n = cluster_blocks(), me = cluster_rank();
  init_shared(s);
  const bool tagged = a.mech == kTagged;
  for (long long t = 0; t < a.trips; ++t) {
    const unsigned seq = unsigned(t + 1);
    // bar[0]: the forward (peers), bar[1]: the answers (block 0)
    const unsigned phase = unsigned(t) & 1u;
    if (tid == 0 && !tagged) {
      if (me != 0) mbar_expect_tx(&s.bar[0], 16);
      else if (n > 1) mbar_expect_tx(&s.bar[1], 16 * (n - 1));
    }
    if (me == 0) {
      if (warp == 0) {
        if (lane == 0)
          while (*a.host_in != seq) {
          }
        __syncwarp();
        // forward to every peer: lane p -> peer p
        if (lane >= 1 && unsigned(lane) < n) {
          if (tagged) st_remote_tag(peer_smem(smem_u32(&s.tags[0][0]), lane), ((unsigned long long)seq << 32) | 5u);
          else st_async_v4(peer_smem(smem_u32(&s.buf[0][0]), lane), make_uint4(seq, 1, 2, 3), peer_smem(smem_u32(&s.bar[0]), lane));
        }
        // gather the answers
        if (n > 1) {
          if (tagged) {
            for (;;) {
              bool ok = true;
              if (lane >= 1 && unsigned(lane) < n) ok = unsigned(ld_local_tag(&s.tags[1][lane]) >> 32) == seq;
              if (__all_sync(0xffffffffu, ok)) break;
            }
          } else {
            while (!mbar_try_wait(&s.bar[1], phase)) {
            }
          }
        }
        if (lane == 0) *a.host_out = seq;
      }
    } else if (warp == 0) {
      if (tagged) {
        if (lane == 0)
          while (unsigned(ld_local_tag(&s.tags[0][0]) >> 32) != seq) {
          }
        __syncwarp();
        if (lane == 0) st_remote_tag(peer_smem(smem_u32(&s.tags[1][me]), 0), ((unsigned long long)seq << 32) | me);
      } else {
        while (!(a.mech == kAsyncTest ? mbar_test(&s.bar[0], phase) : mbar_try_wait(&s.bar[0], phase))) {
        }
        if (lane == 0) st_async_v4(peer_smem(smem_u32(&s.buf[1][me * 16]), 0), make_uint4(seq, me, 0, 0), peer_smem(smem_u32(&s.bar[1]), 0));
      }
    }
    __syncthreads();
  }
  cluster_arrive();
  cluster_wait();
}

struct Pct {
  double p50, p99, p999, max;
};
Pct pct(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
  return {at(0.5), at(0.99), at(0.999), v.back()};
}

void launch(const void* fn, int blocks, int cluster, int threads, Args& a) {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(unsigned(blocks));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {&a};
  CHECK(cudaLaunchKernelExC(&cfg, fn, args));
}

}  // namespace

int main(int argc, char** argv) {
  long long rounds = 20000, trips = 100000;
  int cpu = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--rounds" && i + 1 < argc) rounds = std::atoll(argv[++i]);
    else if (k == "--trips" && i + 1 < argc) trips = std::atoll(argv[++i]);
    else if (k == "--cpu" && i + 1 < argc) cpu = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: cluster_probe [--rounds N] [--trips N] [--cpu C]\n");
      return 2;
    }
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  CHECK(cudaFuncSetAttribute((const void*)rounds_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CHECK(cudaFuncSetAttribute((const void*)trips_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("cluster_probe: %d SMs, clock %d MHz (attribute)\n", sms, clock_khz / 1000);

  unsigned long long* out = nullptr;
  unsigned long long* counter = nullptr;
  unsigned* stop = nullptr;
  uint4* stream = nullptr;
  const size_t stream_n = (size_t(256) << 20) / sizeof(uint4);
  CHECK(cudaMalloc(&out, 16));
  CHECK(cudaMalloc(&counter, 8));
  CHECK(cudaMalloc(&stop, 4));
  CHECK(cudaMalloc(&stream, stream_n * sizeof(uint4)));
  CHECK(cudaMemset(stream, 1, stream_n * sizeof(uint4)));
  uint4* host_words = nullptr;
  CHECK(cudaHostAlloc(&host_words, 32 * sizeof(uint4), cudaHostAllocMapped));
  std::memset(host_words, 0, 32 * sizeof(uint4));
  uint4* host_words_dev = nullptr;
  CHECK(cudaHostGetDevicePointer((void**)&host_words_dev, host_words, 0));

  std::printf("\n== part 1: one exchange inside a cluster (block 0's cycles per round, %lld rounds)\n", rounds);
  std::printf("%-11s %-7s %3s %5s %10s %9s\n", "mechanism", "disturb", "N", "bytes", "cycles", "ns");
  for (int n : {2, 4, 8, 16}) {
    for (int bytes : {32, 128}) {
      for (int mech : {kAsyncTry, kAsyncTest, kBarrier, kTagged}) {
        for (int dist : {kNone, kPcie, kL2}) {
          if (bytes == 32 && dist != kNone) continue;
          if (mech == kBarrier && dist == kPcie) continue;  // the disturbing warp cannot join the cluster barrier
          Args a{};
          a.mech = mech;
          a.disturb = dist;
          a.bytes = bytes;
          a.rounds = rounds;
          a.out = out;
          a.host_words = host_words_dev;
          a.l2_counter = counter;
          a.l2_stream = stream;
          a.l2_stream_n = stream_n;
          a.stop = stop;
          CHECK(cudaMemset(stop, 0, 4));
          CHECK(cudaMemset(out, 0, 16));
          int blocks = n;
          if (dist == kL2) blocks = std::max(n, (sms / n - 1) * n);  // every other cluster that fits disturbs
          launch((const void*)rounds_kernel, blocks, n, 32 * (kWarps + (dist == kPcie ? 1 : 0)), a);
          // a hang is a result, not a stuck run: give up after 10 s (the process's exit ends the kernel)
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          cudaError_t e;
          while ((e = cudaStreamQuery(nullptr)) == cudaErrorNotReady && std::chrono::steady_clock::now() < until) {
          }
          if (e == cudaErrorNotReady) {
            std::printf("%-11s %-7s %3d %5d HUNG (no end within 10 s)\n", kMechName[mech], kDisturbName[dist], n, bytes);
            std::fflush(stdout);
            std::_Exit(1);
          }
          if (e != cudaSuccess) {
            std::printf("%-11s %-7s %3d %5d FAILED: %s\n", kMechName[mech], kDisturbName[dist], n, bytes, cudaGetErrorString(e));
            return 1;
          }
          unsigned long long h[2];
          CHECK(cudaMemcpy(h, out, 16, cudaMemcpyDeviceToHost));
          std::printf("%-11s %-7s %3d %5d %10.1f %9.1f\n", kMechName[mech], kDisturbName[dist], n, bytes,
                      double(h[0]) / double(rounds), double(h[1]) / double(rounds));
          std::fflush(stdout);
        }
      }
    }
  }

  std::printf("\n== part 2: host -> block 0 -> every peer -> block 0 -> host (us, %lld trips each)\n", trips);
  std::printf("%-11s %3s %8s %8s %8s %8s\n", "mechanism", "N", "p50", "p99", "p99.9", "max");
  unsigned* io = nullptr;
  CHECK(cudaHostAlloc(&io, 256, cudaHostAllocMapped));
  std::memset(io, 0, 256);
  unsigned* io_dev = nullptr;
  CHECK(cudaHostGetDevicePointer((void**)&io_dev, io, 0));
  volatile unsigned* hin = io;
  volatile unsigned* hout = io + 32;  // another 128-byte line
  for (int n : {1, 2, 4, 8, 16}) {
    for (int mech : {kAsyncTry, kAsyncTest, kTagged}) {
      if (n == 1 && mech != kAsyncTry) continue;
      *hin = 0;
      *hout = 0;
      Args a{};
      a.mech = mech;
      a.host_in = io_dev;
      a.host_out = io_dev + 32;
      a.trips = trips + 1000;
      launch((const void*)trips_kernel, n, n, 32 * kWarps, a);
      std::vector<double> us;
      us.reserve(size_t(trips));
      bool lost = false;
      for (long long t = 0; t < trips + 1000; ++t) {
        const unsigned seq = unsigned(t + 1);
        const auto t0 = std::chrono::steady_clock::now();
        *hin = seq;
        const auto deadline = t0 + std::chrono::seconds(2);
        while (*hout != seq) {
          if (std::chrono::steady_clock::now() > deadline) {
            lost = true;
            break;
          }
        }
        if (lost) break;
        const auto t1 = std::chrono::steady_clock::now();
        if (t >= 1000) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      if (lost) {
        std::printf("%-11s %3d  no answer within 2 s: stopping\n", kMechName[mech], n);
        return 1;
      }
      CHECK(cudaDeviceSynchronize());
      const Pct p = pct(us);
      std::printf("%-11s %3d %8.2f %8.2f %8.2f %8.1f\n", n == 1 ? "alone" : kMechName[mech], n, p.p50, p.p99, p.p999, p.max);
      std::fflush(stdout);
    }
  }
  return 0;
}
