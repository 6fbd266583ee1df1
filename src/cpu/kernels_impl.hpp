// The kernel bodies, written once over a vector-traits class T and included by each ISA's translation
// unit INSIDE that ISA's own namespace (see kernels.hpp). Nothing from the standard library is used
// here on purpose: an inline library function instantiated in the AVX-512 unit could be the copy the
// linker keeps for every unit, and then fault on an AVX2-only machine.
//
// T provides: L (lanes), kMaxCols (columns per gemm tile, bounded by the register file), V (float
// vector), VI (uint32 vector), zero set1 load loadu storeu add sub mul fma(a,b,c)=a*b+c
// fnma(a,b,c)=c-a*b min max rcp (reciprocal good to ~1 ulp) hsum loadi lo hi (the two bf16 halves of
// packed pairs, as floats); for the pair-dot path also bcast_pair, dot (acc += pairwise products)
// and cvt_pairs (fp32 -> bf16 pairs, round to nearest even, zero padded).
//
// int8 path (T::kHasVnni): also zeroi addi subi cvti (int32 -> float), dpbusd(acc, a_u8, b_s8) (4
// products of unsigned and signed bytes per 32-bit lane, exact), absmax(x, n), and quant8 / quant16
// (the activation bytes: see crit_i8).
//
// Pair-dot path (T::dot, AVX512_BF16 vdpbf16ps): both operands are bf16, so the activations (x_t, h)
// are rounded to bf16 at each matrix product; products are exact and accumulation is fp32.
#ifndef HOTPATH_CPU_KERNELS_IMPL_BODY
#error "include kernels_impl.hpp only from a kernels_<isa>.cpp, inside its namespace"
#endif

// Fast tanh: Eigen's rational minimax approximation (odd degree-13 / even degree-6 numerator and
// denominator, ptanh_float), input clamped to ±7.90531 where tanh rounds to 1 in fp32; the division
// is a reciprocal estimate refined by one Newton step. Measured against libm tanh (double) over
// [-20, 20] in steps of 2^-12 plus extra points near 0 (test FastMath.*): max abs error 3e-7
// (AVX2 rcp, generic), within 2.7e-7 near the clamp; the test asserts <= 5e-7 for tanh, sigmoid.
template <class T>
inline typename T::V tanh_v(typename T::V x) {
  using V = typename T::V;
  const V clamp = T::set1(7.90531110763549805f);
  x = T::min(T::max(x, T::sub(T::zero(), clamp)), clamp);
  const V x2 = T::mul(x, x);
  V p = T::fma(x2, T::set1(-2.76076847742355e-16f), T::set1(2.00018790482477e-13f));
  p = T::fma(x2, p, T::set1(-8.60467152213735e-11f));
  p = T::fma(x2, p, T::set1(5.12229709037114e-08f));
  p = T::fma(x2, p, T::set1(1.48572235717979e-05f));
  p = T::fma(x2, p, T::set1(6.37261928875436e-04f));
  p = T::fma(x2, p, T::set1(4.89352455891786e-03f));
  p = T::mul(x, p);
  V q = T::fma(x2, T::set1(1.19825839466702e-06f), T::set1(1.18534705686654e-04f));
  q = T::fma(x2, q, T::set1(2.26843463243900e-03f));
  q = T::fma(x2, q, T::set1(4.89352518554385e-03f));
  return T::mul(p, T::rcp(q));
}

// sigmoid(x) = (1 + tanh(x/2)) / 2: halves the tanh error.
template <class T>
inline typename T::V sigmoid_v(typename T::V x) {
  const typename T::V half = T::set1(0.5f);
  return T::fma(tanh_v<T>(T::mul(x, half)), half, half);
}

// The LSTM cell for one block of lanes: c' = f*c + i*g, h' = o*tanh(c').
template <class T>
inline void cell_v(typename T::V gi, typename T::V gf, typename T::V gg, typename T::V go, const float* c_in,
                   float* c_out, float* h_out) {
  using V = typename T::V;
  const V i = sigmoid_v<T>(gi), f = sigmoid_v<T>(gf), g = tanh_v<T>(gg), o = sigmoid_v<T>(go);
  const V c = T::fma(f, T::loadu(c_in), T::mul(i, g));
  T::storeu(c_out, c);
  T::storeu(h_out, T::mul(o, tanh_v<T>(c)));
}

// After the matrix product of block b: keep u = W·x if asked, add P, run the cell.
template <class T>
inline void finish_block(int b, typename T::V gi, typename T::V gf, typename T::V gg, typename T::V go,
                         const float* P, const float* c_in, float* h_out, float* c_out, float* u_out) {
  constexpr int L = T::L;
  const int o = b * 4 * L;
  if (u_out) {
    T::storeu(u_out + o, gi);
    T::storeu(u_out + o + L, gf);
    T::storeu(u_out + o + 2 * L, gg);
    T::storeu(u_out + o + 3 * L, go);
  }
  if (P) {
    gi = T::add(gi, T::loadu(P + o));
    gf = T::add(gf, T::loadu(P + o + L));
    gg = T::add(gg, T::loadu(P + o + 2 * L));
    go = T::add(go, T::loadu(P + o + 3 * L));
  }
  cell_v<T>(gi, gf, gg, go, c_in + b * L, c_out + b * L, h_out + b * L);
}

inline void prefetch_span(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 3);
}

// Critical step, fp32 weights. Two independent accumulator sets (even and odd k) give 8 FMA chains:
// enough to cover FMA latency with one column.
template <class T>
void crit_f32(const float* W, int kdim, int nb, const float* x, const float* P, const float* c_in, float* h_out,
              float* c_out, float* u_out, uint32_t*, int pf) {
  constexpr int L = T::L;
  using V = typename T::V;
  const long bstride = f32_block_floats(kdim, L);
  for (int b = 0; b < nb; ++b) {
    const float* w = W + b * bstride;
    V a0 = T::zero(), a1 = T::zero(), a2 = T::zero(), a3 = T::zero();
    V a4 = T::zero(), a5 = T::zero(), a6 = T::zero(), a7 = T::zero();
    int k = 0;
    for (; k + 2 <= kdim; k += 2, w += 8 * L) {
      if (pf) prefetch_span(reinterpret_cast<const char*>(w) + pf, 8 * L * 4);
      const V x0 = T::set1(x[k]), x1 = T::set1(x[k + 1]);
      a0 = T::fma(T::load(w), x0, a0);
      a1 = T::fma(T::load(w + L), x0, a1);
      a2 = T::fma(T::load(w + 2 * L), x0, a2);
      a3 = T::fma(T::load(w + 3 * L), x0, a3);
      a4 = T::fma(T::load(w + 4 * L), x1, a4);
      a5 = T::fma(T::load(w + 5 * L), x1, a5);
      a6 = T::fma(T::load(w + 6 * L), x1, a6);
      a7 = T::fma(T::load(w + 7 * L), x1, a7);
    }
    if (k < kdim) {
      const V x0 = T::set1(x[k]);
      a0 = T::fma(T::load(w), x0, a0);
      a1 = T::fma(T::load(w + L), x0, a1);
      a2 = T::fma(T::load(w + 2 * L), x0, a2);
      a3 = T::fma(T::load(w + 3 * L), x0, a3);
    }
    finish_block<T>(b, T::add(a0, a4), T::add(a1, a5), T::add(a2, a6), T::add(a3, a7), P, c_in, h_out, c_out,
                    u_out);
  }
}

// Critical step, bf16 weights, weights widened to fp32 in registers (exact) and fp32 activations.
// Low halves (even k) and high halves (odd k) go to separate accumulators: 8 chains.
template <class T>
void crit_bf16_cvt(const uint32_t* W, int kdim, int nb, const float* x, const float* P, const float* c_in,
                   float* h_out, float* c_out, float* u_out, uint32_t*, int pf) {
  constexpr int L = T::L;
  using V = typename T::V;
  using VI = typename T::VI;
  const int nkp = (kdim + 1) / 2, nfull = kdim / 2;
  const long bstride = bf16_block_words(kdim, L);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = W + b * bstride;
    V a0 = T::zero(), a1 = T::zero(), a2 = T::zero(), a3 = T::zero();
    V a4 = T::zero(), a5 = T::zero(), a6 = T::zero(), a7 = T::zero();
    for (int kp = 0; kp < nfull; ++kp, w += 4 * L) {
      if (pf) prefetch_span(reinterpret_cast<const char*>(w) + pf, 4 * L * 4);
      const V xl = T::set1(x[2 * kp]), xh = T::set1(x[2 * kp + 1]);
      const VI w0 = T::loadi(w), w1 = T::loadi(w + L), w2 = T::loadi(w + 2 * L), w3 = T::loadi(w + 3 * L);
      a0 = T::fma(T::lo(w0), xl, a0);
      a4 = T::fma(T::hi(w0), xh, a4);
      a1 = T::fma(T::lo(w1), xl, a1);
      a5 = T::fma(T::hi(w1), xh, a5);
      a2 = T::fma(T::lo(w2), xl, a2);
      a6 = T::fma(T::hi(w2), xh, a6);
      a3 = T::fma(T::lo(w3), xl, a3);
      a7 = T::fma(T::hi(w3), xh, a7);
    }
    if (nfull < nkp) {  // odd kdim: the last pair's high half is padding
      const V xl = T::set1(x[2 * nfull]);
      a0 = T::fma(T::lo(T::loadi(w)), xl, a0);
      a1 = T::fma(T::lo(T::loadi(w + L)), xl, a1);
      a2 = T::fma(T::lo(T::loadi(w + 2 * L)), xl, a2);
      a3 = T::fma(T::lo(T::loadi(w + 3 * L)), xl, a3);
    }
    finish_block<T>(b, T::add(a0, a4), T::add(a1, a5), T::add(a2, a6), T::add(a3, a7), P, c_in, h_out, c_out,
                    u_out);
  }
}

// Critical step, bf16 weights with the pair dot product: activations rounded to bf16 once (scratch),
// one broadcast per pair, even/odd pairs in separate accumulators: 8 chains.
template <class T>
void crit_bf16_dot(const uint32_t* W, int kdim, int nb, const float* x, const float* P, const float* c_in,
                   float* h_out, float* c_out, float* u_out, uint32_t* scratch, int pf) {
  if constexpr (T::kHasDot) {
    constexpr int L = T::L;
    using V = typename T::V;
    using VI = typename T::VI;
    const int nkp = (kdim + 1) / 2;
    T::cvt_pairs(x, kdim, scratch);
    const uint32_t* xp = scratch;
    const long bstride = bf16_block_words(kdim, L);
    for (int b = 0; b < nb; ++b) {
      const uint32_t* w = W + b * bstride;
      V a0 = T::zero(), a1 = T::zero(), a2 = T::zero(), a3 = T::zero();
      V a4 = T::zero(), a5 = T::zero(), a6 = T::zero(), a7 = T::zero();
      int kp = 0;
      for (; kp + 2 <= nkp; kp += 2, w += 8 * L) {
        if (pf) prefetch_span(reinterpret_cast<const char*>(w) + pf, 8 * L * 4);
        const VI x0 = T::bcast_pair(xp[kp]), x1 = T::bcast_pair(xp[kp + 1]);
        a0 = T::dot(a0, T::loadi(w), x0);
        a1 = T::dot(a1, T::loadi(w + L), x0);
        a2 = T::dot(a2, T::loadi(w + 2 * L), x0);
        a3 = T::dot(a3, T::loadi(w + 3 * L), x0);
        a4 = T::dot(a4, T::loadi(w + 4 * L), x1);
        a5 = T::dot(a5, T::loadi(w + 5 * L), x1);
        a6 = T::dot(a6, T::loadi(w + 6 * L), x1);
        a7 = T::dot(a7, T::loadi(w + 7 * L), x1);
      }
      if (kp < nkp) {
        const VI x0 = T::bcast_pair(xp[kp]);
        a0 = T::dot(a0, T::loadi(w), x0);
        a1 = T::dot(a1, T::loadi(w + L), x0);
        a2 = T::dot(a2, T::loadi(w + 2 * L), x0);
        a3 = T::dot(a3, T::loadi(w + 3 * L), x0);
      }
      finish_block<T>(b, T::add(a0, a4), T::add(a1, a5), T::add(a2, a6), T::add(a3, a7), P, c_in, h_out, c_out,
                      u_out);
    }
  } else {
    crit_bf16_cvt<T>(W, kdim, nb, x, P, c_in, h_out, c_out, u_out, scratch, pf);
  }
}

// The activation bytes of crit_i8 / head_i8 in scratch: *hi (the 8-bit bytes, or the 16-bit hi bytes)
// and *lo (16-bit only) as quads; returns the scale of one step of q.
template <class T, bool ACT16>
inline float quantize_activations(const float* x, int kdim, uint8_t* scratch, const uint32_t** hi,
                                  const uint32_t** lo) {
  const int KQ = int8_quads(kdim);
  const float amax = T::absmax(x, kdim);
  const float qmax = ACT16 ? 32767.0f : 127.0f;
  const float inv = amax > 0.0f ? qmax / amax : 0.0f;
  uint8_t* second = scratch + (kdim + 64) / 64 * 64;
  if constexpr (ACT16)
    T::quant16(x, kdim, inv, scratch, second, KQ * 4);
  else
    T::quant8(x, kdim, inv, scratch, KQ * 4);
  *hi = reinterpret_cast<const uint32_t*>(scratch);
  *lo = reinterpret_cast<const uint32_t*>(second);
  return amax / qmax;
}

// Critical step, int8 weights (kernels.hpp: layout). crit_i8 and head_i8 are instantiated only for
// vector types with the int8 operations (T::kHasVnni; make_table). The activations are quantized once per call:
// ACT16 false: xq = round(x * 127 / max|x|) + 128 as unsigned bytes (one vpdpbusd per weight vector,
// even and odd quads in separate accumulators: 8 chains); ACT16 true: q = round(x * 32767 / max|x|) =
// 256 * hi + lo, bytes hi + 128 and lo (two vpdpbusd per weight vector, hi and lo accumulators: 8
// chains). Padding columns have zero weights, so their activation bytes add nothing.
template <class T, bool ACT16>
void crit_i8(const int8_t* W8, const float* wscale, const int32_t* corr, int kdim, int nb, const float* x,
             const float* P, const float* c_in, float* h_out, float* c_out, uint8_t* scratch, int pf) {
  constexpr int L = T::L;
  using V = typename T::V;
  using VI = typename T::VI;
  const int KQ = int8_quads(kdim);
  const uint32_t* xh;
  const uint32_t* xl;
  const V xs = T::set1(quantize_activations<T, ACT16>(x, kdim, scratch, &xh, &xl));
  const uint32_t* W = reinterpret_cast<const uint32_t*>(W8);
  const long bstride = int8_block_words(kdim, L);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = W + b * bstride;
    VI a0 = T::zeroi(), a1 = T::zeroi(), a2 = T::zeroi(), a3 = T::zeroi();
    VI a4 = T::zeroi(), a5 = T::zeroi(), a6 = T::zeroi(), a7 = T::zeroi();
    if constexpr (ACT16) {
      for (int kq = 0; kq < KQ; ++kq, w += 4 * L) {
        if (pf) prefetch_span(reinterpret_cast<const char*>(w) + pf, 4 * L * 4);
        const VI h = T::bcast_pair(xh[kq]), l = T::bcast_pair(xl[kq]);
        const VI w0 = T::loadi(w), w1 = T::loadi(w + L), w2 = T::loadi(w + 2 * L), w3 = T::loadi(w + 3 * L);
        a0 = T::dpbusd(a0, h, w0);
        a4 = T::dpbusd(a4, l, w0);
        a1 = T::dpbusd(a1, h, w1);
        a5 = T::dpbusd(a5, l, w1);
        a2 = T::dpbusd(a2, h, w2);
        a6 = T::dpbusd(a6, l, w2);
        a3 = T::dpbusd(a3, h, w3);
        a7 = T::dpbusd(a7, l, w3);
      }
    } else {
      for (int kq = 0; kq < KQ; kq += 2, w += 8 * L) {
        if (pf) prefetch_span(reinterpret_cast<const char*>(w) + pf, 8 * L * 4);
        const VI x0 = T::bcast_pair(xh[kq]), x1 = T::bcast_pair(xh[kq + 1]);
        a0 = T::dpbusd(a0, x0, T::loadi(w));
        a1 = T::dpbusd(a1, x0, T::loadi(w + L));
        a2 = T::dpbusd(a2, x0, T::loadi(w + 2 * L));
        a3 = T::dpbusd(a3, x0, T::loadi(w + 3 * L));
        a4 = T::dpbusd(a4, x1, T::loadi(w + 4 * L));
        a5 = T::dpbusd(a5, x1, T::loadi(w + 5 * L));
        a6 = T::dpbusd(a6, x1, T::loadi(w + 6 * L));
        a7 = T::dpbusd(a7, x1, T::loadi(w + 7 * L));
      }
    }
    const float* sc = wscale + b * 4 * L;
    const int32_t* co = corr + b * 4 * L;
    V g[4];
    const VI hi[4] = {a0, a1, a2, a3}, lo[4] = {a4, a5, a6, a7};
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const V s = T::mul(xs, T::loadu(sc + q * L));
      if constexpr (ACT16) {
        const V v = T::fma(T::cvti(T::subi(hi[q], T::loadui(co + q * L))), T::set1(256.0f), T::cvti(lo[q]));
        g[q] = T::mul(v, s);
      } else {
        g[q] = T::mul(T::cvti(T::subi(T::addi(hi[q], lo[q]), T::loadui(co + q * L))), s);
      }
    }
    finish_block<T>(b, g[0], g[1], g[2], g[3], P, c_in, h_out, c_out, nullptr);
  }
}

// The int8 head (kernels.hpp): outputs in lanes, two accumulator chains (even and odd quads).
template <class T, bool ACT16>
void head_i8(const int8_t* W8, const float* wscale, const int32_t* corr, const float* bias, int O, int kdim,
             const float* h, float* z, uint8_t* scratch) {
  constexpr int L = T::L;
  using V = typename T::V;
  using VI = typename T::VI;
  const int KQ = int8_quads(kdim);
  const uint32_t* xh;
  const uint32_t* xl;
  const V xs = T::set1(quantize_activations<T, ACT16>(h, kdim, scratch, &xh, &xl));
  const uint32_t* W = reinterpret_cast<const uint32_t*>(W8);
  for (int ob = 0; ob < (O + L - 1) / L; ++ob) {
    const uint32_t* w = W + long(ob) * KQ * L;
    VI h0 = T::zeroi(), h1 = T::zeroi(), l0 = T::zeroi(), l1 = T::zeroi();
    for (int kq = 0; kq < KQ; kq += 2, w += 2 * L) {
      const VI w0 = T::loadi(w), w1 = T::loadi(w + L);
      h0 = T::dpbusd(h0, T::bcast_pair(xh[kq]), w0);
      h1 = T::dpbusd(h1, T::bcast_pair(xh[kq + 1]), w1);
      if constexpr (ACT16) {
        l0 = T::dpbusd(l0, T::bcast_pair(xl[kq]), w0);
        l1 = T::dpbusd(l1, T::bcast_pair(xl[kq + 1]), w1);
      }
    }
    const V s = T::mul(xs, T::loadu(wscale + ob * L));
    const VI hi = T::subi(T::addi(h0, h1), T::loadui(corr + ob * L));
    V v = ACT16 ? T::fma(T::cvti(hi), T::set1(256.0f), T::cvti(T::addi(l0, l1))) : T::cvti(hi);
    v = T::mul(v, s);
    if (bias) v = T::add(v, T::loadu(bias + ob * L));
    T::storeu(z + ob * L, v);
  }
}

// Store a tile's accumulators: out = acc + add.
template <class T, int NC>
inline void store_tile(int b, typename T::V (&acc)[NC][4], const float* const* add, float* const* out) {
  constexpr int L = T::L;
  const int o = b * 4 * L;
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      typename T::V v = acc[c][g];
      if (add[c]) v = T::add(v, T::loadu(add[c] + o + g * L));
      T::storeu(out[c] + o + g * L, v);
    }
  }
}

// Precompute matrix products over NC columns at once: each weight vector is loaded once and used NC times.
template <class T, int NC>
void gemm_f32_tile(const float* W, int kdim, int b0, int b1, const float* const* X, const float* const* add,
                   float* const* out) {
  constexpr int L = T::L;
  using V = typename T::V;
  const long bstride = f32_block_floats(kdim, L);
  for (int b = b0; b < b1; ++b) {
    const float* w = W + b * bstride;
    V acc[NC][4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) acc[c][g] = T::zero();
    for (int k = 0; k < kdim; ++k, w += 4 * L) {
      const V w0 = T::load(w), w1 = T::load(w + L), w2 = T::load(w + 2 * L), w3 = T::load(w + 3 * L);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const V xc = T::set1(X[c][k]);
        acc[c][0] = T::fma(w0, xc, acc[c][0]);
        acc[c][1] = T::fma(w1, xc, acc[c][1]);
        acc[c][2] = T::fma(w2, xc, acc[c][2]);
        acc[c][3] = T::fma(w3, xc, acc[c][3]);
      }
    }
    store_tile<T, NC>(b, acc, add, out);
  }
}

template <class T, int NC, bool kDot>
void gemm_bf16_tile(const uint32_t* W, int kdim, int b0, int b1, const float* const* X, const float* const* add,
                    float* const* out, uint32_t* scratch) {
  constexpr int L = T::L;
  using V = typename T::V;
  using VI = typename T::VI;
  const int nkp = (kdim + 1) / 2, nfull = kdim / 2;
  const long bstride = bf16_block_words(kdim, L);
  const long sstride = long(nkp + 15) / 16 * 16;
  if constexpr (kDot) {
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) T::cvt_pairs(X[c], kdim, scratch + c * sstride);
  }
  for (int b = b0; b < b1; ++b) {
    const uint32_t* w = W + b * bstride;
    V acc[NC][4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) acc[c][g] = T::zero();
    if constexpr (kDot) {
      for (int kp = 0; kp < nkp; ++kp, w += 4 * L) {
        const VI w0 = T::loadi(w), w1 = T::loadi(w + L), w2 = T::loadi(w + 2 * L), w3 = T::loadi(w + 3 * L);
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
          const VI xc = T::bcast_pair(scratch[c * sstride + kp]);
          acc[c][0] = T::dot(acc[c][0], w0, xc);
          acc[c][1] = T::dot(acc[c][1], w1, xc);
          acc[c][2] = T::dot(acc[c][2], w2, xc);
          acc[c][3] = T::dot(acc[c][3], w3, xc);
        }
      }
    } else {
      for (int kp = 0; kp < nkp; ++kp, w += 4 * L) {
        const bool pair = kp < nfull;
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const VI wg = T::loadi(w + g * L);
          const V lo = T::lo(wg);
          const V hi = T::hi(wg);
#pragma GCC unroll 4
          for (int c = 0; c < NC; ++c) {
            acc[c][g] = T::fma(lo, T::set1(X[c][2 * kp]), acc[c][g]);
            if (pair) acc[c][g] = T::fma(hi, T::set1(X[c][2 * kp + 1]), acc[c][g]);
          }
        }
      }
    }
    store_tile<T, NC>(b, acc, add, out);
  }
}

// The blocks of a product a chunk at a time (kGemmChunkBytes of weights), every group of kMaxCols columns
// over one chunk before the next: a chunk comes from memory once and from the core's own caches for the
// other groups, where the whole matrix, passed once a group, was streamed again for each (lstm_m's fp32
// backtest on the 2-core VM, 16 sequences a tile: 1,063 -> 1,801 windows/s; BENCHMARKS.md).
inline int gemm_chunk_blocks(long block_bytes) {
  const long n = kGemmChunkBytes / (block_bytes > 0 ? block_bytes : 1);
  return n > 1 ? int(n) : 1;
}

template <class T>
void gemm_f32(const float* W, int kdim, int b0, int b1, int ncols, const float* const* X, const float* const* add,
              float* const* out, uint32_t*) {
  constexpr int M = T::kMaxCols;
  const int chunk = gemm_chunk_blocks(f32_block_floats(kdim, T::L) * 4);
  for (int e0 = b0; e0 < b1; e0 += chunk) {
    const int e1 = b1 - e0 > chunk ? e0 + chunk : b1;
    int c = 0;
    for (; c + M <= ncols; c += M) gemm_f32_tile<T, M>(W, kdim, e0, e1, X + c, add + c, out + c);
    switch (ncols - c) {
      case 1: gemm_f32_tile<T, 1>(W, kdim, e0, e1, X + c, add + c, out + c); break;
      case 2: if constexpr (M > 2) gemm_f32_tile<T, 2>(W, kdim, e0, e1, X + c, add + c, out + c); break;
      case 3: if constexpr (M > 3) gemm_f32_tile<T, 3>(W, kdim, e0, e1, X + c, add + c, out + c); break;
      default: break;
    }
  }
}

template <class T, bool kDot>
void gemm_bf16(const uint32_t* W, int kdim, int b0, int b1, int ncols, const float* const* X,
               const float* const* add, float* const* out, uint32_t* scratch) {
  constexpr int M = T::kMaxCols;
  const int chunk = gemm_chunk_blocks(bf16_block_words(kdim, T::L) * 4);
  for (int e0 = b0; e0 < b1; e0 += chunk) {
    const int e1 = b1 - e0 > chunk ? e0 + chunk : b1;
    int c = 0;
    for (; c + M <= ncols; c += M) gemm_bf16_tile<T, M, kDot>(W, kdim, e0, e1, X + c, add + c, out + c, scratch);
    switch (ncols - c) {
      case 1: gemm_bf16_tile<T, 1, kDot>(W, kdim, e0, e1, X + c, add + c, out + c, scratch); break;
      case 2:
        if constexpr (M > 2) gemm_bf16_tile<T, 2, kDot>(W, kdim, e0, e1, X + c, add + c, out + c, scratch);
        break;
      case 3:
        if constexpr (M > 3) gemm_bf16_tile<T, 3, kDot>(W, kdim, e0, e1, X + c, add + c, out + c, scratch);
        break;
      default: break;
    }
  }
}

template <class T>
void cell(const float* gates, const float* add, float* c, float* h, int b0, int b1) {
  constexpr int L = T::L;
  for (int b = b0; b < b1; ++b) {
    const float* g = gates + b * 4 * L;
    typename T::V gi = T::loadu(g), gf = T::loadu(g + L), gg = T::loadu(g + 2 * L), go = T::loadu(g + 3 * L);
    if (add) {
      const float* a = add + b * 4 * L;
      gi = T::add(gi, T::loadu(a));
      gf = T::add(gf, T::loadu(a + L));
      gg = T::add(gg, T::loadu(a + 2 * L));
      go = T::add(go, T::loadu(a + 3 * L));
    }
    cell_v<T>(gi, gf, gg, go, c + b * L, c + b * L, h + b * L);
  }
}

template <class T>
void head(const float* Wh, const float* bh, int O, int Hp, const float* h, float* z) {
  constexpr int L = T::L;
  using V = typename T::V;
  if (O <= kHeadRowMajorMax) {  // a dot product per output: no lanes wasted on a single output
    for (int o = 0; o < O; ++o) {
      const float* w = Wh + long(o) * Hp;
      V a0 = T::zero(), a1 = T::zero();
      int k = 0;
      for (; k + 2 * L <= Hp; k += 2 * L) {
        a0 = T::fma(T::loadu(w + k), T::loadu(h + k), a0);
        a1 = T::fma(T::loadu(w + k + L), T::loadu(h + k + L), a1);
      }
      if (k < Hp) a0 = T::fma(T::loadu(w + k), T::loadu(h + k), a0);
      z[o] = T::hsum(T::add(a0, a1)) + (bh ? bh[o] : 0.0f);
    }
    return;
  }
  const int nob = (O + L - 1) / L;
  for (int ob = 0; ob < nob; ++ob) {  // outputs in lanes; 4 chains over k (Hp is a multiple of 8)
    const float* w = Wh + long(ob) * Hp * L;
    V a0 = T::zero(), a1 = T::zero(), a2 = T::zero(), a3 = T::zero();
    for (int k = 0; k < Hp; k += 4, w += 4 * L) {
      a0 = T::fma(T::load(w), T::set1(h[k]), a0);
      a1 = T::fma(T::load(w + L), T::set1(h[k + 1]), a1);
      a2 = T::fma(T::load(w + 2 * L), T::set1(h[k + 2]), a2);
      a3 = T::fma(T::load(w + 3 * L), T::set1(h[k + 3]), a3);
    }
    V s = T::add(T::add(a0, a1), T::add(a2, a3));
    if (bh) s = T::add(s, T::loadu(bh + ob * L));
    T::storeu(z + ob * L, s);
  }
}

template <class T, bool kSigmoid>
void activation_array(const float* x, float* y, size_t n) {
  constexpr int L = T::L;
  size_t i = 0;
  for (; i + L <= n; i += L) {
    const typename T::V v = T::loadu(x + i);
    T::storeu(y + i, kSigmoid ? sigmoid_v<T>(v) : tanh_v<T>(v));
  }
  if (i < n) {
    float in[L] = {}, out[L];
    for (size_t j = 0; j < n - i; ++j) in[j] = x[i + j];
    T::storeu(out, kSigmoid ? sigmoid_v<T>(T::loadu(in)) : tanh_v<T>(T::loadu(in)));
    for (size_t j = 0; j < n - i; ++j) y[i + j] = out[j];
  }
}

template <class T, bool kDot>
KernelTable make_table(const char* isa) {
  KernelTable t{};
  t.isa = isa;
  t.lanes = T::L;
  t.bf16_dot = kDot;
  t.crit_f32 = &crit_f32<T>;
  if constexpr (kDot) {
    t.crit_bf16 = &crit_bf16_dot<T>;
  } else {
    t.crit_bf16 = &crit_bf16_cvt<T>;
  }
  t.gemm_f32 = &gemm_f32<T>;
  t.gemm_bf16 = &gemm_bf16<T, kDot>;
  if constexpr (T::kHasVnni) {
    t.crit_i8[0] = &crit_i8<T, false>;
    t.crit_i8[1] = &crit_i8<T, true>;
    t.head_i8[0] = &head_i8<T, false>;
    t.head_i8[1] = &head_i8<T, true>;
  }
  t.cell = &cell<T>;
  t.head = &head<T>;
  t.tanh = &activation_array<T, false>;
  t.sigmoid = &activation_array<T, true>;
  return t;
}
