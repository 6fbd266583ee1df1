#include "model/quantize.hpp"

#include <algorithm>
#include <cmath>

namespace hotpath {

Int8Rows quantize_rows_int8(const std::vector<double>& w, int rows, int cols) {
  Int8Rows out;
  out.rows = rows;
  out.cols = cols;
  out.q.assign(size_t(rows) * cols, 0);
  out.scale.assign(rows, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const double* row = w.data() + size_t(r) * cols;
    double amax = 0;
    for (int c = 0; c < cols; ++c) amax = std::max(amax, std::abs(row[c]));
    const float scale = static_cast<float>(amax / 127.0);
    out.scale[r] = scale;
    if (scale == 0.0f) continue;  // a row of zeros (or of values below float's range): q = 0
    for (int c = 0; c < cols; ++c) {
      const double v = std::round(row[c] / double(scale));
      out.q[size_t(r) * cols + c] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
    }
  }
  return out;
}

namespace {
std::vector<double> rounded(const std::vector<double>& w, int rows, int cols) {
  const Int8Rows q = quantize_rows_int8(w, rows, cols);
  std::vector<double> out(w.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[size_t(r) * cols + c] = q.value(r, c);
  return out;
}
}  // namespace

Model int8_rounded(const Model& m) {
  Model out = m;
  const int H = m.config.hidden_size;
  for (int l = 0; l < m.config.num_layers; ++l) {
    out.layers[l].w_ih = rounded(m.layers[l].w_ih, 4 * H, m.config.layer_input_size(l));
    out.layers[l].w_hh = rounded(m.layers[l].w_hh, 4 * H, H);
  }
  out.head_w = rounded(m.head_w, m.config.output_size, H);
  return out;
}

}  // namespace hotpath
