// Inline SVG charts for the reports a person reads (the sweep plot, the HTML report): axes with
// ticks, markers, dense dot clouds, step lines and polylines. Plain strings, no dependencies, so the
// same drawing serves a standalone .svg file and an SVG inside HTML.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotpath::llm::svg {

// Text from servers or users made safe inside markup (HTML or SVG text and attribute values):
// escape_bytes() first (valid UTF-8 without control bytes), then & < > " ' as entities.
std::string escape(std::string_view text);
// A coordinate or value, fixed with `prec` decimals ("nan" never appears: callers skip non-finite).
std::string num(double v, int prec = 1);

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;  // log10 scale
  std::string label;
  std::vector<double> ticks;
  // Position of v along the axis, 0 at lo and 1 at hi (not clamped).
  double frac(double v) const;
  // Whether v can be placed on this axis (finite, and > 0 on a log axis).
  bool fits(double v) const;
};
// Linear axis over [lo, hi] widened to multiples of a 1-2-5 step giving about `n` intervals.
Axis linear_axis(double lo, double hi, std::string label, int n = 5);
// Log axis over the decades that hold [lo, hi] (lo > 0); ticks at each decade, and at 2x and 5x
// when it spans at most two decades. The label gets " (log scale)".
Axis log_axis(double lo, double hi, std::string label);
// The axis a latency needs: log when every value is > 0 and max/min >= 20 (a range a linear axis
// would squash into a corner), else linear (from 0 when `from_zero`).
Axis auto_axis(double lo, double hi, std::string label, bool from_zero = false);

struct Box {
  double x = 0, y = 0, w = 0, h = 0;
};

// One plotting area: data coordinates mapped into `box` of the enclosing SVG.
class Chart {
 public:
  Chart(Box box, Axis x, Axis y);
  double px(double v) const;
  double py(double v) const;
  const Axis& x_axis() const { return x_; }
  const Axis& y_axis() const { return y_; }

  // Frame, grid lines, tick labels and both axis labels.
  void axes(std::string& out) const;
  // Circles, each filled (or white inside when `filled` says false), with an optional tooltip
  // <title> and a small text label beside it.
  void markers(std::string& out, const std::vector<double>& x, const std::vector<double>& y, const std::string& color,
               const std::vector<bool>& filled = {}, const std::vector<std::string>& titles = {},
               const std::vector<std::string>& labels = {}) const;
  // Many points as one <path> of zero-length round-capped segments: about 15 bytes a point.
  void dots(std::string& out, const std::vector<double>& x, const std::vector<double>& y, const std::string& color,
            double size = 3) const;
  // Short vertical ticks along the bottom edge at each x (a rug: events without a y value).
  void rug(std::string& out, const std::vector<double>& x, const std::string& color) const;
  // A step line (an empirical CDF): from each point horizontally to the next x, then vertically.
  void steps(std::string& out, const std::vector<double>& x, const std::vector<double>& y, const std::string& color) const;
  void polyline(std::string& out, const std::vector<double>& x, const std::vector<double>& y, const std::string& color,
                double width = 2) const;
  // A dashed horizontal reference line at y with a label at its right end.
  void hline(std::string& out, double y, std::string_view label) const;

 private:
  Box b_;
  Axis x_, y_;
};

// "<svg ...>" of the given size (with viewBox, so it scales) and a white background; close with "</svg>\n".
std::string open(double w, double h);
// A <text> element; `s` is escaped.
std::string text(double x, double y, std::string_view s, int size, const char* anchor = "middle",
                 const char* fill = nullptr);
// A column of colour swatches and labels (escaped) starting at (x, y).
void legend(std::string& out, double x, double y, const std::vector<std::pair<std::string, std::string>>& entries);
// Colour i of a ten-colour palette that stays distinct on white (cycles).
const char* color(std::size_t i);

}  // namespace hotpath::llm::svg
