// The int8 weight rounding of `--precision int8`, defined once: the cpu backend packs these
// values, and the error bound is measured with a float64 model holding exactly them.
//
// Symmetric, per output row: scale = max|w_row| / 127 (a float), q = round(w / scale) in [-127, 127]
// (ties away from zero), so the dequantized weight is q * scale. A row of zeros has scale 0 and q 0.
// Every weight matrix is rounded (W_ih and W_hh of every layer, the head); biases stay as they are.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace hotpath {

struct Int8Rows {
  int rows = 0, cols = 0;
  std::vector<int8_t> q;     // [rows, cols] row-major
  std::vector<float> scale;  // [rows]
  double value(int r, int c) const { return double(q[size_t(r) * cols + c]) * double(scale[r]); }
};

// w [rows, cols] row-major (finite).
Int8Rows quantize_rows_int8(const std::vector<double>& w, int rows, int cols);

// `m` with every weight matrix replaced by its int8-rounded value (biases and config unchanged): float64
// arithmetic on it gives "the error of int8-rounded weights alone", the base of the int8 error bound.
Model int8_rounded(const Model& m);

}  // namespace hotpath
