// Host entry points of the float64 lockstep states' kernels (lockstep_f64.cu), for cuda/lockstep_f64.cpp.
// Plain C++ with the CUDA runtime's types. Layouts: a layer's weights [4H][K] row-major, K = its input
// size n_in + H (w_ih | w_hh of each gate row); its states' inputs x [S][K] (the layer's input, then its own
// h from the last step); gates [S][4H]; c [S][H]; head weights [O][H].
#pragma once
#include <cuda_runtime.h>

namespace hotpath::cuda {

// gates[s][r] = bias[r] + sum over k of x[s][k] * w[r][k], k in order, a multiply and an add each; `sms`:
// the device's SMs, which the tiles are sized to keep busy.
void launch_gates_f64(const double* x, int S, int K, const double* w, const double* bias, int R, double* gates, int sms,
                      cudaStream_t stream);
// One layer's cells on its gates: c updated; the new h into x_self's columns [n_in, n_in + H) and, when
// x_next is given, into x_next's columns [0, H).
void launch_cells_f64(const double* gates, int S, int H, double* c, double* x_self, int k_self, int n_in, double* x_next,
                      int k_next, cudaStream_t stream);
// z[s][o] = b[o] + sum over k of w[o][k] * h_s[k], h_s at x_last + s * k_last + n_in.
void launch_head_f64(const double* x_last, int S, int k_last, int n_in, int H, const double* w, const double* b, int O,
                     double* z, cudaStream_t stream);

}  // namespace hotpath::cuda
