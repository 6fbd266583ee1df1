// The fresh-window server's kernel (lstm_fresh.hpp; docs/cuda.md, "Fresh windows through a persistent kernel").
//
//   block l of the cluster runs layer l; warp w owns units [8 w, 8 w + 8) (gate columns [32 w, 32 w + 32) of the
//   batch packing: two m16 tiles, gates i, f then g, o of its 8 units), so lane (g, t) ends each product with
//   all four gates of unit 8 w + g for row t (columns 2 t, 2 t + 1: that row's hi and lo halves) and runs that
//   cell, c in a register;
//   W_hh (32 columns x Hp) as A fragments in registers for the kernel's life; W_ih (all 4 Hp columns) in shared
//   memory for ldmatrix;
//   step t: acc = W_hh h_l(t-1) from the h words of step t-1 (hi | lo << 16 per unit, B columns: row, half),
//   + the group's input product (zin, bias included), the cell, h_l(t) into shared memory (and block l + 1's
//   ring as a tagged word), one block barrier;
//   every kFreshGroup steps the input products of the next group: 8 B columns = 4 steps x (hi, lo) of one row,
//   from x (block 0, fp32 in shared memory) or the ring's tagged words (spinning until their tags are the
//   steps'); block l + 1 acknowledges what it has read, so block l never overwrites a word not yet read.
//
// A request: block 0's warp 0 polls the header (and the lease), tells every block the rows and window, one
// cluster barrier; then passes of up to `rows` rows: block 0 reads their windows from mapped host memory,
// every block runs the window, the last block computes the head and stores the answer chunks; a cluster
// barrier ends each pass (the ring, the input products and the h buffers are free again).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/batch/batch_mma.cuh"
#include "cuda/kernels/batch/cluster_launch.hpp"
#include "cuda/kernels/common/device_util.cuh"
#include "cuda/kernels/common/mailbox.cuh"
#include "cuda/kernels/common/tagged_words.cuh"
#include "cuda/kernels/fresh/lstm_fresh.hpp"

namespace hotpath::cuda {
namespace {

using batch::ldmatrix_x4;
using batch::mma16816;

constexpr int G = kFreshGroup, R = kFreshRing, KT = kFreshMaxHp / 16, MR = kFreshMaxRows;
constexpr int kThreads = 4 * kFreshMaxHp;  // a warp per 8 units

__host__ __device__ constexpr size_t a16(size_t v) { return (v + 15) / 16 * 16; }
__host__ __device__ constexpr int kin(int Ip, int Hp, int l) { return l == 0 ? Ip : Hp; }
// Pitches: K + 8 16-bit values keeps ldmatrix's 8 rows on distinct banks; Hp + 8 words keeps the B loads' 4
// rows on distinct banks.
__host__ __device__ constexpr int win_pitch(int K) { return K + 8; }
__host__ __device__ constexpr int hw_pitch(int Hp) { return Hp + 8; }

// Control words in every block's shared memory: the request (written by block 0), the ack (written by block l + 1).
enum Ctl { kRows = 0, kWindow = 1, kQuit = 2, kAck = 3, kCtlWords = 4 };

struct FreshSmem {
  size_t ctl, prof, win, zin, hw, ring, raw, h32, z, total;
};
__host__ __device__ inline FreshSmem fresh_smem(int l, int Ip, int Hp, int L, int O, int rows, int max_window) {
  FreshSmem m{};
  size_t at = 0;
  m.ctl = at, at = a16(at + kCtlWords * 4);
  m.prof = at, at = a16(at + kFreshProfSlots * 8);  // thread 0's time sums (FreshProf)
  m.win = at, at = a16(at + size_t(4 * Hp) * win_pitch(kin(Ip, Hp, l)) * 2);  // W_ih,l [4 Hp][K]
  m.zin = at, at = a16(at + size_t(2) * G * rows * Hp * 16);                   // [2][G][rows][Hp] float4
  m.hw = at, at = a16(at + size_t(2) * MR * hw_pitch(Hp) * 4);                // [2][MR][pitch] h words
  m.ring = at;
  if (l > 0) at = a16(at + size_t(R) * rows * Hp * 8);  // [R][rows][Hp] tagged h_{l-1} words
  m.raw = at;
  if (l == 0) at = a16(at + size_t(rows) * max_window * Ip * 4);  // [rows][max_window][Ip] x, fp32
  m.h32 = at;
  if (l == L - 1) at = a16(at + size_t(rows) * Hp * 4);  // [rows][Hp] the last step's h, fp32
  m.z = at;
  if (l == L - 1) at = a16(at + size_t(rows) * O * 4);  // [rows][O] the answer
  m.total = at;
  return m;
}
size_t fresh_smem_max(int Ip, int Hp, int L, int O, int rows, int max_window) {
  size_t m = 0;
  for (int l = 0; l < L; ++l) m = std::max(m, fresh_smem(l, Ip, Hp, L, O, rows, max_window).total);
  return m;
}

__device__ __forceinline__ unsigned ld_ctl(const unsigned* p) { return dev::ld_volatile_u32(p); }

// KTH: the k16 tiles of W_hh a warp holds (Hp / 16), known when compiled, so that a step's h loads all issue
// before its MMAs; 0 (the form kFreshDynamicK): up to KT, counted at run time.
template <bool BF16, int KTH>
__global__ void __launch_bounds__(kThreads, 1) lstm_fresh(const __grid_constant__ FreshParams p) {
  constexpr int KA = KTH ? KTH : KT;  // the tiles held
  extern __shared__ __align__(16) unsigned char smem[];
  const int l = int(dev::cluster_rank());
  const int Ip = p.Ip, Hp = p.Hp, L = p.L, O = p.O, P = p.rows, maxW = p.max_window;
  const FreshSmem lay = fresh_smem(l, Ip, Hp, L, O, P, maxW);
  auto* ctl = reinterpret_cast<unsigned*>(smem + lay.ctl);
  // where the time goes (thread 0 of each block, in shared memory: no registers taken from the weights; FreshProf)
  auto* prof = reinterpret_cast<unsigned long long*>(smem + lay.prof);
  auto* win = reinterpret_cast<unsigned short*>(smem + lay.win);
  auto* zin = reinterpret_cast<float4*>(smem + lay.zin);
  auto* hw = reinterpret_cast<uint32_t*>(smem + lay.hw);
  auto* ring = reinterpret_cast<unsigned long long*>(smem + lay.ring);
  auto* raw = reinterpret_cast<float*>(smem + lay.raw);
  auto* h32 = reinterpret_cast<float*>(smem + lay.h32);
  auto* zo = reinterpret_cast<float*>(smem + lay.z);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int K = kin(Ip, Hp, l), kp = win_pitch(K), hp = hw_pitch(Hp), kth = Hp / 16;
  const int unit = 8 * w + g;

  // This warp's W_hh columns as A fragments (lane (g, t): rows g, g + 8 of each m16 tile, k 2t, 2t + 1, + 8, + 9).
  uint32_t a[2][KA][4];
  {
    const auto* src = static_cast<const unsigned short*>(p.w[l]);
    const int ld = l == 0 ? Hp : 2 * Hp, off = l == 0 ? 0 : Hp;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int kt = 0; kt < KA; ++kt) {
        const int c0 = 32 * w + 16 * m + g, k0 = off + 16 * kt + 2 * t;
        const bool in = KTH > 0 || kt < kth;
        auto at = [&](int c, int k) { return in ? __ldg(reinterpret_cast<const uint32_t*>(src + size_t(c) * ld + k)) : 0u; };
        a[m][kt][0] = at(c0, k0);
        a[m][kt][1] = at(c0 + 8, k0);
        a[m][kt][2] = at(c0, k0 + 8);
        a[m][kt][3] = at(c0 + 8, k0 + 8);
      }
  }
  float bq[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) bq[q] = p.bias[l] ? __ldg(p.bias[l] + 32 * w + 8 * q + g) : 0.f;
  if (l == 0)
    batch::load_slice(win, kp, static_cast<const unsigned short*>(p.w0), 2 * Ip, Ip, 0, 4 * Hp, tid, nthreads);
  else
    batch::load_slice(win, kp, static_cast<const unsigned short*>(p.w[l]), 2 * Hp, Hp, 0, 4 * Hp, tid, nthreads);
  for (int i = tid; i < 2 * MR * hp; i += nthreads) hw[i] = 0u;
  if (l > 0)
    for (int i = tid; i < R * P * Hp; i += nthreads) ring[i] = 0ull;
  if (l == 0)
    for (int i = tid; i < P * maxW * Ip; i += nthreads) raw[i] = 0.f;  // the padding columns stay zero
  if (tid < kCtlWords) ctl[tid] = 0u;
  if (tid < kFreshProfSlots) prof[tid] = 0ull;
  __syncthreads();
  dev::cluster_arrive_release();
  dev::cluster_wait_acquire();  // every block's shared memory exists before the first remote store

  // block l + 1's ring (its layout's offset: the blocks' layouts differ) and block l - 1's ack word
  const uint32_t ring_next =
      l + 1 < L ? dev::peer_smem(dev::smem_u32(smem + fresh_smem(l + 1, Ip, Hp, L, O, P, maxW).ring), unsigned(l + 1)) : 0u;
  const uint32_t ack_prev = l > 0 ? dev::peer_smem(dev::smem_u32(ctl + kAck), unsigned(l - 1)) : 0u;
  MailboxView mb;
  mb.control = p.control;
  mb.lease_ns = p.lease_ns;
  dev::LeaseWatch watch;
  if (l == 0 && tid == 0) watch.start(mb);

  unsigned tb = 0;          // tag base: the steps of every earlier pass (the same count in every block)
  unsigned read_tag = 0;    // l > 0: the last step whose ring words every warp has read
  unsigned acked = 0;
  unsigned answered = 0, quit = 0;
  const bool timer = tid == 0;
  auto now = [] { return (unsigned long long)clock64(); };
  unsigned long long t_req = 0, t_mark = 0;
  unsigned long long idle_from = tid == 0 ? dev::globaltimer_ns() : 0ull;
  for (unsigned long long req = 0;; ++req) {
    const unsigned seq = wire_seq((long long)req);
    // The step tags are 32-bit: long before they wrap, every block starts them again from zero with its ring
    // and ack word cleared (the same decision in every block: tb is the same count everywhere; no remote store
    // is in flight between requests).
    if (tb > 0x80000000u) {
      if (l > 0)
        for (int i = tid; i < R * P * Hp; i += nthreads) ring[i] = 0ull;
      if (tid == 0) ctl[kAck] = 0u;
      tb = read_tag = acked = 0u;
      __syncthreads();
    }
    if (l == 0 && tid == 0) {
      unsigned rows = 0, window = 0;
      for (unsigned n = 0;; ++n) {
        const uint4 v = dev::ld_volatile_v4(p.req);
        if (v.x == seq && v.w == seq) {
          rows = v.y, window = v.z;
          if (rows < 1 || rows > unsigned(p.max_rows) || window < 1 || window > unsigned(maxW)) quit = kStopped;
          break;
        }
        if ((n & 15u) == 15u) {
          if ((quit = watch.poll(mb))) break;
          // idle: the SMs go back to the device (a device-wide synchronize elsewhere would wait on this kernel)
          if (p.idle_ns > 0 && dev::globaltimer_ns() - idle_from > (unsigned long long)p.idle_ns) {
            quit = kIdle;
            break;
          }
        }
      }
      for (int peer = 0; peer < L; ++peer) {
        const uint32_t base = dev::peer_smem(dev::smem_u32(ctl), unsigned(peer));
        dev::st_u32_remote(base + 4 * kRows, rows);
        dev::st_u32_remote(base + 4 * kWindow, window);
        dev::st_u32_remote(base + 4 * kQuit, quit);
      }
    }
    dev::cluster_arrive_release();
    dev::cluster_wait_acquire();  // the request's rows and window (or the quit) in every block
    if (ld_ctl(ctl + kQuit)) break;
    if (timer) t_req = now();
    const int rows = int(ld_ctl(ctl + kRows)), window = int(ld_ctl(ctl + kWindow));
    const int ngroups = (window + G - 1) / G;

    for (int r0 = 0; r0 < rows; r0 += P) {
      const int rp = min(P, rows - r0);
      if (timer) t_mark = now();
      if (l == 0) {
        // this pass's windows from mapped host memory (every chunk carries the request's seq; the host wrote
        // them before the header, so they are there; a stop request ends a wait that would not). A thread's
        // chunks are loaded kInFlight at a time before any is looked at: one PCIe round trip for them, not one
        // each (a load's use waits for it; the loop's next load would wait behind that).
        const int stride = fresh_row_chunks(maxW, p.I), n = fresh_row_chunks(window, p.I), nf = window * p.I;
        constexpr int kInFlight = 2;
        const Chunk* req = p.req + 1 + size_t(r0) * stride;
        for (int i0 = tid; i0 < rp * n; i0 += kInFlight * nthreads) {
          uint4 v[kInFlight];
#pragma unroll
          for (int e = 0; e < kInFlight; ++e) {
            const int i = i0 + e * nthreads;
            if (i < rp * n) v[e] = dev::ld_volatile_v4(req + size_t(i / n) * stride + i % n);
          }
#pragma unroll
          for (int e = 0; e < kInFlight; ++e) {
            const int i = i0 + e * nthreads;
            if (i >= rp * n) break;
            const int r = i / n, c = i % n;
            for (unsigned k = 1; v[e].x != seq; ++k) {
              if ((k & 255u) == 0u && dev::ld_volatile_v4(p.control).x) {
                v[e] = make_uint4(seq, 0u, 0u, 0u);
                break;
              }
              v[e] = dev::ld_volatile_v4(req + size_t(r) * stride + c);
            }
#pragma unroll
            for (int q = 0; q < 3; ++q) {
              const int f = 3 * c + q;
              if (f < nf) raw[(size_t(r) * maxW + f / p.I) * Ip + f % p.I] = __uint_as_float(q == 0 ? v[e].y : q == 1 ? v[e].z : v[e].w);
            }
          }
        }
        __syncthreads();
        if (timer) prof[kProfInput] += now() - t_mark;
      }

      // The input products of group j (steps [G j, G j + G)), bias included, into zin[j & 1]: B column n of row
      // r's tile is step G j + n / 2, its hi (n even) or lo half.
      auto group = [&](int j) {
        const unsigned long long t0 = timer ? now() : 0ull;
        const int s0 = G * j, step = s0 + (g >> 1);
        const bool have = step < window;
        const uint32_t sel = (g & 1) ? 0x7632u : 0x5410u;
        // a row at a time (its A fragments read again for each row: the registers hold W_hh)
        for (int r = 0; r < rp; ++r) {
          float acc[2][4] = {};
          // K in steps of 32 (two k16 tiles; Ip and Hp are multiples of 32): the ring's eight words of a step
          // loaded together, then their tags checked (one look's latency, not eight), again only if one is late
          for (int kk = 0; kk < K; kk += 32) {
            uint32_t u[8] = {};  // the words of k = kk + 2t, + 1, + 8, + 9, then the same + 16
            if (have) {
              if (l == 0) {
                const float* xr = raw + (size_t(r) * maxW + step) * Ip + kk + 2 * t;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                  const float2 v = *reinterpret_cast<const float2*>(xr + 8 * q);
                  u[2 * q] = dev::hi_lo<BF16>(v.x), u[2 * q + 1] = dev::hi_lo<BF16>(v.y);
                }
              } else {
                const unsigned want = tb + unsigned(step) + 1u;
                const unsigned long long* q = ring + (size_t(step % R) * P + r) * Hp + kk + 2 * t;
                if (p.form & kFreshRingSerial) {  // the first form, kept to measure against: each pair waited for in turn
#pragma unroll
                  for (int e = 0; e < 4; ++e) {
                    unsigned long long w0, w1;
                    do dev::ld_words2(q + 8 * e, w0, w1);
                    while (dev::tag_of(w0) != want || dev::tag_of(w1) != want);
                    u[2 * e] = dev::value_of(w0), u[2 * e + 1] = dev::value_of(w1);
                  }
                } else {
                  for (;;) {
                    unsigned long long wd[8];
#pragma unroll
                    for (int e = 0; e < 4; ++e) dev::ld_words2(q + 8 * e, wd[2 * e], wd[2 * e + 1]);
                    bool all = true;
#pragma unroll
                    for (int e = 0; e < 8; ++e) all &= dev::tag_of(wd[e]) == want, u[e] = dev::value_of(wd[e]);
                    if (all) break;
                  }
                }
              }
            }
            __syncwarp();
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              uint32_t a0[4], a1[4];
              ldmatrix_x4(a0, win + (32 * w + (lane & 15)) * kp + kk + 16 * h + (lane >> 4) * 8);
              ldmatrix_x4(a1, win + (32 * w + 16 + (lane & 15)) * kp + kk + 16 * h + (lane >> 4) * 8);
              const uint32_t b0 = dev::b_pair(u[4 * h], u[4 * h + 1], sel), b1 = dev::b_pair(u[4 * h + 2], u[4 * h + 3], sel);
              mma16816<BF16>(acc[0], a0, b0, b1);
              mma16816<BF16>(acc[1], a1, b0, b1);
            }
          }
          // lane (g, t): unit 8 w + g, step s0 + t; gate 2m from registers 0, 1 (hi + lo), 2m + 1 from 2, 3
          if (s0 + t < window)
            zin[((size_t(j & 1) * G + t) * P + r) * Hp + unit] =
                make_float4(acc[0][0] + acc[0][1] + bq[0], acc[0][2] + acc[0][3] + bq[1], acc[1][0] + acc[1][1] + bq[2],
                            acc[1][2] + acc[1][3] + bq[3]);
        }
        if (l > 0) read_tag = tb + unsigned(min(s0 + G, window));
        if (timer) prof[kProfGroups] += now() - t0;
      };
      auto send_ack = [&] {  // after a block barrier: every warp has read the ring up to read_tag
        if (l > 0 && tid == 0 && read_tag != acked) {
          dev::st_u32_remote(ack_prev, read_tag);
          acked = read_tag;
        }
      };

      group(0);
      __syncthreads();
      send_ack();
      float c = 0.f;  // the cell of (row t, unit) for lanes t < rp
      for (int s = 0; s < window; ++s) {
        // the next group's input products in this group's last step: block l + 1 then trails block l by about
        // a group (it needs h_l up to step s + G), and the products are ready before the step that reads them
        if (s % G == G - 1 && s / G + 1 < ngroups) group(s / G + 1);
        if (timer) t_mark = now();
        float acc[2][2][4] = {};
        if (s > 0) {
          const uint32_t* hv = hw + size_t((s - 1) & 1) * MR * hp + (g >> 1) * hp + 2 * t;
          const uint32_t sel = (g & 1) ? 0x7632u : 0x5410u;
#pragma unroll
          for (int kt = 0; kt < KA; ++kt) {
            if (KTH == 0 && kt >= kth) break;
            const uint2 u0 = *reinterpret_cast<const uint2*>(hv + 16 * kt);
            const uint2 u1 = *reinterpret_cast<const uint2*>(hv + 16 * kt + 8);
            const uint32_t b0 = dev::b_pair(u0.x, u0.y, sel), b1 = dev::b_pair(u1.x, u1.y, sel);
            mma16816<BF16>(acc[0][kt & 1], a[0][kt], b0, b1);
            mma16816<BF16>(acc[1][kt & 1], a[1][kt], b0, b1);
          }
        }
        if (t < rp) {
          const float4 zq = zin[((size_t((s / G) & 1) * G + s % G) * P + t) * Hp + unit];
          const float gi = acc[0][0][0] + acc[0][0][1] + acc[0][1][0] + acc[0][1][1] + zq.x;
          const float gf = acc[0][0][2] + acc[0][0][3] + acc[0][1][2] + acc[0][1][3] + zq.y;
          const float gg = acc[1][0][0] + acc[1][0][1] + acc[1][1][0] + acc[1][1][1] + zq.z;
          const float go = acc[1][0][2] + acc[1][0][3] + acc[1][1][2] + acc[1][1][3] + zq.w;
          const float h = dev::lstm_cell_ftz(gi, gf, gg, go, c);
          const uint32_t word = dev::hi_lo<BF16>(h);
          hw[size_t(s & 1) * MR * hp + t * hp + unit] = word;
          if (l + 1 < L) {
            // the ring slot of step s held step s - R: wait until block l + 1 has read it
            const unsigned tag = tb + unsigned(s) + 1u;
            while (int(ld_ctl(ctl + kAck) - (tag - unsigned(R))) < 0) {
            }
            dev::st_word(ring_next + unsigned((size_t(s % R) * P + t) * Hp + unit) * 8u, dev::tagged(tag, word));
          }
          if (l == L - 1 && s == window - 1) h32[t * Hp + unit] = h;
        }
        if (timer) {
          const unsigned long long t1 = now();
          prof[kProfChain] += t1 - t_mark;
          t_mark = t1;
        }
        __syncthreads();
        if (timer) prof[kProfBarrier] += now() - t_mark, ++prof[kProfSteps];
        send_ack();
      }

      if (timer) t_mark = now();
      if (l == L - 1) {  // the head, then the answer's chunks of this pass's rows
        for (int i = w; i < rp * O; i += nwarps) {
          const int r = i / O, o = i % O;
          float z = 0.f;
          for (int u = lane; u < p.H; u += 32) z = fmaf(__ldg(p.head_w + size_t(o) * p.H + u), h32[r * Hp + u], z);
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) z += __shfl_xor_sync(0xffffffffu, z, off);
          if (lane == 0) zo[r * O + o] = z + (p.head_b ? __ldg(p.head_b + o) : 0.f);
        }
        __syncthreads();
        const int per = fresh_out_chunks(O);
        for (int i = tid; i < rp * per; i += nthreads) {
          const int r = i / per, k = 2 * (i % per);
          const float z0 = zo[r * O + k], z1 = k + 1 < O ? zo[r * O + k + 1] : 0.f;
          dev::st_volatile_v4(p.out + size_t(r0 + r) * per + i % per,
                              make_uint4(seq, __float_as_uint(z0), __float_as_uint(z1), seq));
        }
      }
      tb += unsigned(window);
      if (timer) {
        const unsigned long long t1 = now();
        prof[kProfHead] += t1 - t_mark;
        t_mark = t1;
      }
      dev::cluster_arrive_release();
      dev::cluster_wait_acquire();  // the pass is over in every block: its buffers are free
      if (timer) prof[kProfPassEnd] += now() - t_mark;
    }
    ++answered;
    if (tid == 0) idle_from = dev::globaltimer_ns();
    if (timer) {
      prof[kProfRequest] += now() - t_req;
      if (p.prof)
        for (int k = 0; k < kFreshProfSlots; ++k)
          *reinterpret_cast<volatile unsigned long long*>(p.prof + l * kFreshProfSlots + k) = prof[k];
    }
  }
  if (l == 0 && tid == 0) {
    const unsigned state = ld_ctl(ctl + kQuit);
    dev::st_volatile_v4(p.status, make_uint4(0u, answered, state, 0u));
  }
}

// Hp is a multiple of 32 up to kFreshMaxHp: 2, 4, 6 or 8 k16 tiles; 0 the form counted at run time.
template <bool BF16>
const void* fresh_kernel_k(int kth) {
  switch (kth) {
    case 2: return reinterpret_cast<const void*>(&lstm_fresh<BF16, 2>);
    case 4: return reinterpret_cast<const void*>(&lstm_fresh<BF16, 4>);
    case 6: return reinterpret_cast<const void*>(&lstm_fresh<BF16, 6>);
    case 8: return reinterpret_cast<const void*>(&lstm_fresh<BF16, 8>);
    default: return reinterpret_cast<const void*>(&lstm_fresh<BF16, 0>);
  }
}
static_assert(kFreshMaxHp == 128, "fresh_kernel_k instantiates the tile counts of Hp up to 128");
const void* fresh_kernel(bool bf16, int kth) { return bf16 ? fresh_kernel_k<true>(kth) : fresh_kernel_k<false>(kth); }
int kernel_tiles(int Hp, unsigned form) { return (form & kFreshDynamicK) ? 0 : Hp / 16; }

bool shape_fits(int Ip, int Hp, int L, int O) {
  return Hp % 32 == 0 && Hp <= kFreshMaxHp && Ip % 32 == 0 && Ip > 0 && L >= 1 && L <= kFreshMaxLayers && O >= 1;
}

void launch_config(int L, int Hp, size_t smem, cudaStream_t stream, cudaLaunchConfig_t& cfg, cudaLaunchAttribute (&attr)[1]) {
  batch::cluster_launch_config(unsigned(L), unsigned(4 * Hp), smem, L, stream, cfg, attr);
}

}  // namespace

cudaError_t prepare_fresh_kernels(int device) {
  for (const bool bf16 : {false, true})
    for (const int kth : {0, 2, 4, 6, 8})
      if (const cudaError_t e = batch::prepare_cluster_kernels(device, {fresh_kernel(bf16, kth)}); e != cudaSuccess) return e;
  return cudaSuccess;
}

FreshPlan fresh_plan(int Ip, int Hp, int L, int O, int max_window, bool bf16, int device) {
  FreshPlan plan;
  if (Hp > kFreshMaxHp) return plan.why = "its hidden size is beyond the 128 units whose recurrent weights a block keeps in registers", plan;
  if (L > kFreshMaxLayers) return plan.why = "it has more than 4 layers (a block a layer)", plan;
  if (!shape_fits(Ip, Hp, L, O) || max_window < 1) return plan.why = "its shape is not one the kernel takes", plan;
  const size_t optin = batch::cluster_smem_optin(device);
  if (!optin) return plan.why = "the device has no thread-block cluster launch", plan;
  for (int rows = kFreshMaxRows; rows >= 1; --rows) {
    const size_t smem = fresh_smem_max(Ip, Hp, L, O, rows, max_window);
    if (smem > optin) continue;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    launch_config(L, Hp, smem, nullptr, cfg, attr);
    int fits = 0;
    if (cudaOccupancyMaxActiveClusters(&fits, fresh_kernel(bf16, kernel_tiles(Hp, 0)), &cfg) != cudaSuccess || fits < 1) {
      (void)cudaGetLastError();
      return plan.why = "its cluster of a block a layer is not co-resident on the device", plan;
    }
    plan.rows = rows;
    plan.threads = 4 * Hp;
    plan.smem = smem;
    return plan;
  }
  return plan.why = "one row's window and the layer's input weights exceed a block's shared memory", plan;
}

cudaError_t launch_fresh(const FreshParams& p, cudaStream_t stream) {
  if (!shape_fits(p.Ip, p.Hp, p.L, p.O) || p.rows < 1 || p.rows > kFreshMaxRows || p.max_window < 1 || p.max_rows < 1 ||
      p.I < 1 || p.I > p.Ip || p.H < 1 || p.H > p.Hp || !p.req || !p.out || !p.status || !p.control || !p.w0 || !p.head_w)
    return cudaErrorInvalidValue;
  for (int l = 0; l < p.L; ++l)
    if (!p.w[l]) return cudaErrorInvalidValue;
  if (p.smem != fresh_smem_max(p.Ip, p.Hp, p.L, p.O, p.rows, p.max_window)) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  launch_config(p.L, p.Hp, p.smem, stream, cfg, attr);
  FreshParams arg = p;
  void* args[] = {&arg};
  return cudaLaunchKernelExC(&cfg, fresh_kernel(p.bf16, kernel_tiles(p.Hp, p.form)), args);
}

}  // namespace hotpath::cuda
