// The float64 lockstep states' kernels (lockstep_kernels.hpp; the states themselves: cuda/lockstep_f64.cpp).
// Every product and sum is an explicit __dmul_rn / __dadd_rn in FastF64's order (the bias, then k = 0, 1, ...
// over the input's columns, then the recurrent ones: nvcc never fuses intrinsics into a multiply-add), so a
// gate row's value is the host reference's bit for bit; the activations are CUDA's double exp and tanh
// (within an ulp or two of libm's). Throughput is not the aim beyond the check keeping pace with a run: a
// tile of (states, gate rows) a block, up to 64 x 64 (4 x 4 a thread), smaller where few states would leave
// SMs idle.
#include "cuda/kernels/check/lockstep_kernels.hpp"

#include "cuda/cuda_check.hpp"

namespace hotpath::cuda {
namespace {

constexpr int kTileK = 16, kSide = 16, kThreads = kSide * kSide;

// gates[s][r] = bias[r] + sum over k in order of x[s][k] * w[r][k] (x: [S][K], w: [R][K], row-major). A
// block takes a tile of 16 MS states x 16 MR gate rows, a thread MS x MR of them (16 x 16 threads).
template <int MS, int MR>
__global__ void __launch_bounds__(kThreads) gates_f64(const double* __restrict__ x, int S, int K,
                                                      const double* __restrict__ w, const double* __restrict__ bias,
                                                      int R, double* __restrict__ gates) {
  constexpr int TS = kSide * MS, TR = kSide * MR;
  constexpr int XL = TS * kTileK / kThreads, WL = TR * kTileK / kThreads;  // a thread's loads of a k tile
  static_assert(XL * kThreads == TS * kTileK && WL * kThreads == TR * kTileK, "whole loads a thread");
  __shared__ double xs[kTileK][TS + 1];
  __shared__ double ws[kTileK][TR + 1];
  const int tx = int(threadIdx.x) % kSide, ty = int(threadIdx.x) / kSide;
  const int s0 = int(blockIdx.y) * TS, r0 = int(blockIdx.x) * TR;
  double acc[MS][MR];
#pragma unroll
  for (int i = 0; i < MS; ++i)
#pragma unroll
    for (int j = 0; j < MR; ++j) {
      const int r = r0 + tx + kSide * j;
      acc[i][j] = r < R ? bias[r] : 0.0;
    }
  // the next k tile's values in registers while the current one is multiplied (element e = threadIdx.x +
  // kThreads * q of a tile: row e / kTileK, column e % kTileK)
  double xr[XL], wr[WL];
  auto load = [&](int k0) {
#pragma unroll
    for (int q = 0; q < XL; ++q) {
      const int e = int(threadIdx.x) + kThreads * q, s = s0 + e / kTileK, k = k0 + e % kTileK;
      xr[q] = s < S && k < K ? x[size_t(s) * K + k] : 0.0;
    }
#pragma unroll
    for (int q = 0; q < WL; ++q) {
      const int e = int(threadIdx.x) + kThreads * q, r = r0 + e / kTileK, k = k0 + e % kTileK;
      wr[q] = r < R && k < K ? w[size_t(r) * K + k] : 0.0;
    }
  };
  load(0);
  for (int k0 = 0; k0 < K; k0 += kTileK) {
#pragma unroll
    for (int q = 0; q < XL; ++q) {
      const int e = int(threadIdx.x) + kThreads * q;
      xs[e % kTileK][e / kTileK] = xr[q];
    }
#pragma unroll
    for (int q = 0; q < WL; ++q) {
      const int e = int(threadIdx.x) + kThreads * q;
      ws[e % kTileK][e / kTileK] = wr[q];
    }
    __syncthreads();
    if (k0 + kTileK < K) load(k0 + kTileK);
    const int kn = min(kTileK, K - k0);  // the columns that exist: no extra (+0) term in any sum
    for (int kk = 0; kk < kn; ++kk) {
      double a[MS], b[MR];
#pragma unroll
      for (int i = 0; i < MS; ++i) a[i] = xs[kk][ty + kSide * i];
#pragma unroll
      for (int j = 0; j < MR; ++j) b[j] = ws[kk][tx + kSide * j];
#pragma unroll
      for (int i = 0; i < MS; ++i)
#pragma unroll
        for (int j = 0; j < MR; ++j) acc[i][j] = __dadd_rn(acc[i][j], __dmul_rn(a[i], b[j]));
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < MS; ++i)
#pragma unroll
    for (int j = 0; j < MR; ++j) {
      const int s = s0 + ty + kSide * i, r = r0 + tx + kSide * j;
      if (s < S && r < R) gates[size_t(s) * R + r] = acc[i][j];
    }
}

__device__ __forceinline__ double sigmoid_f64(double v) { return __ddiv_rn(1.0, __dadd_rn(1.0, exp(-v))); }

// The cells of one layer, thread (s, j): gates [S][4H] (i, f, g, o), c [S][H]; the new h goes into this
// layer's own input columns [n_in, n_in + H) of x_self [S][k_self] (its next step's recurrent input) and,
// below the last layer, into the next layer's input columns [0, H) of x_next [S][k_next].
__global__ void cells_f64(const double* __restrict__ gates, int S, int H, double* __restrict__ c, double* x_self,
                          int k_self, int n_in, double* x_next, int k_next) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)S * H) return;
  const int s = int(idx / H), j = int(idx % H);
  const double* g = gates + size_t(s) * 4 * H;
  const double ig = sigmoid_f64(g[j]), fg = sigmoid_f64(g[H + j]), gg = tanh(g[2 * H + j]), og = sigmoid_f64(g[3 * H + j]);
  double& cs = c[size_t(s) * H + j];
  const double cn = __dadd_rn(__dmul_rn(fg, cs), __dmul_rn(ig, gg));
  cs = cn;
  const double h = __dmul_rn(og, tanh(cn));
  x_self[size_t(s) * k_self + n_in + j] = h;
  if (x_next) x_next[size_t(s) * k_next + j] = h;
}

// z[s][o] = b[o] + sum over k in order of w[o][k] * h[s][k], h at x_last + s * k_last + n_in (thread (s, o)).
__global__ void head_f64(const double* __restrict__ x_last, int S, int k_last, int n_in, int H,
                         const double* __restrict__ w, const double* __restrict__ b, int O, double* __restrict__ z) {
  const int idx = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (idx >= S * O) return;
  const int s = idx / O, o = idx % O;
  const double* h = x_last + size_t(s) * k_last + n_in;
  const double* wo = w + size_t(o) * H;
  double acc = b[o];
  for (int k = 0; k < H; ++k) acc = __dadd_rn(acc, __dmul_rn(wo[k], h[k]));
  z[idx] = acc;
}

}  // namespace

void launch_gates_f64(const double* x, int S, int K, const double* w, const double* bias, int R, double* gates, int sms,
                      cudaStream_t stream) {
  // the largest tile that still gives every SM a block (a few states must not leave most SMs idle); each
  // output's sum is the same whatever the tile
  auto blocks = [&](int ms, int mr) { return ((R + kSide * mr - 1) / (kSide * mr)) * ((S + kSide * ms - 1) / (kSide * ms)); };
  auto launch = [&](auto kernel, int ms, int mr) {
    const dim3 grid(unsigned((R + kSide * mr - 1) / (kSide * mr)), unsigned((S + kSide * ms - 1) / (kSide * ms)));
    kernel<<<grid, kThreads, 0, stream>>>(x, S, K, w, bias, R, gates);
  };
  if (blocks(4, 4) >= sms) launch(gates_f64<4, 4>, 4, 4);
  else if (blocks(2, 4) >= sms) launch(gates_f64<2, 4>, 2, 4);
  else if (blocks(2, 2) >= sms) launch(gates_f64<2, 2>, 2, 2);
  else launch(gates_f64<1, 2>, 1, 2);
  HOTPATH_CUDA_CHECK(cudaGetLastError());
}

void launch_cells_f64(const double* gates, int S, int H, double* c, double* x_self, int k_self, int n_in, double* x_next,
                      int k_next, cudaStream_t stream) {
  const long long n = (long long)S * H;
  cells_f64<<<unsigned((n + 255) / 256), 256, 0, stream>>>(gates, S, H, c, x_self, k_self, n_in, x_next, k_next);
  HOTPATH_CUDA_CHECK(cudaGetLastError());
}

void launch_head_f64(const double* x_last, int S, int k_last, int n_in, int H, const double* w, const double* b, int O,
                     double* z, cudaStream_t stream) {
  head_f64<<<unsigned((S * O + 127) / 128), 128, 0, stream>>>(x_last, S, k_last, n_in, H, w, b, O, z);
  HOTPATH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hotpath::cuda
