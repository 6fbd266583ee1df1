#include "llm/report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "llm/common/text.hpp"

namespace hotpath::llm::svg {

namespace {
bool finite(double v) { return std::isfinite(v); }

// A tick's text with as many decimals as the spacing of the ticks needs; k / M past 100000.
std::string tick_text(double v, double step) {
  if (v == 0) return "0";
  const char* suffix = "";
  if (std::fabs(v) >= 1e5) {
    const double div = std::fabs(v) >= 1e8 ? 1e6 : 1e3;
    suffix = div == 1e6 ? "M" : "k";
    v /= div;
    step /= div;
  }
  const int decimals = step >= 1 ? 0 : std::min(9, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return num(v, decimals) + suffix;
}
}  // namespace

std::string escape(std::string_view text) {
  const std::string s = escape_bytes(text);
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, int prec) {
  std::string s = fixed(v, prec);
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);  // no "-0.0"
  return s;
}

double Axis::frac(double v) const {
  if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  return (v - lo) / (hi - lo);
}

bool Axis::fits(double v) const { return finite(v) && (!log || v > 0); }

Axis linear_axis(double lo, double hi, std::string label, int n) {
  Axis a;
  a.label = std::move(label);
  if (!finite(lo) || !finite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    hi += pad;
    lo = lo >= 0 && lo - pad < 0 ? 0 : lo - pad;
  }
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw * (1 - 1e-12)) {
      step = m * mag;
      break;
    }
  const double k0 = std::floor(lo / step + 1e-9), k1 = std::ceil(hi / step - 1e-9);
  a.lo = k0 * step;
  a.hi = k1 * step;
  for (double k = k0; k <= k1 + 0.5; ++k) a.ticks.push_back(k * step == 0 ? 0.0 : k * step);
  return a;
}

Axis log_axis(double lo, double hi, std::string label) {
  Axis a;
  a.log = true;
  a.label = std::move(label) + " (log scale)";
  if (!(lo > 0) || !finite(lo)) lo = 1;
  if (!finite(hi) || hi < lo) hi = lo;
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-12));
  int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-12));
  if (e1 <= e0) e1 = e0 + 1;
  a.lo = std::pow(10.0, e0);
  a.hi = std::pow(10.0, e1);
  for (int e = e0; e <= e1; ++e) {
    const double d = std::pow(10.0, e);
    a.ticks.push_back(d);
    if (e1 - e0 <= 2 && e < e1) {
      a.ticks.push_back(2 * d);
      a.ticks.push_back(5 * d);
    }
  }
  return a;
}

Axis auto_axis(double lo, double hi, std::string label, bool from_zero) {
  if (finite(lo) && finite(hi) && lo > 0 && hi / lo >= 20) return log_axis(lo, hi, std::move(label));
  if (from_zero && finite(lo)) lo = std::min(lo, 0.0);
  return linear_axis(lo, hi, std::move(label));
}

Chart::Chart(Box box, Axis x, Axis y) : b_(box), x_(std::move(x)), y_(std::move(y)) {}

double Chart::px(double v) const { return b_.x + x_.frac(v) * b_.w; }
double Chart::py(double v) const { return b_.y + b_.h - y_.frac(v) * b_.h; }

void Chart::axes(std::string& out) const {
  out += "<rect x=\"" + num(b_.x) + "\" y=\"" + num(b_.y) + "\" width=\"" + num(b_.w) + "\" height=\"" + num(b_.h) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (std::size_t i = 0; i < x_.ticks.size(); ++i) {
    const double v = x_.ticks[i];
    const double step = x_.log ? v : (x_.ticks.size() > 1 ? x_.ticks[1] - x_.ticks[0] : 1);
    const std::string x = num(px(v));
    out += "<line x1=\"" + x + "\" y1=\"" + num(b_.y + b_.h) + "\" x2=\"" + x + "\" y2=\"" + num(b_.y) +
           "\" stroke=\"#ddd\"/>\n";
    out += text(px(v), b_.y + b_.h + 16, tick_text(v, step), 11);
  }
  for (std::size_t i = 0; i < y_.ticks.size(); ++i) {
    const double v = y_.ticks[i];
    const double step = y_.log ? v : (y_.ticks.size() > 1 ? y_.ticks[1] - y_.ticks[0] : 1);
    const std::string y = num(py(v));
    out += "<line x1=\"" + num(b_.x) + "\" y1=\"" + y + "\" x2=\"" + num(b_.x + b_.w) + "\" y2=\"" + y +
           "\" stroke=\"#ddd\"/>\n";
    out += text(b_.x - 6, py(v) + 4, tick_text(v, step), 11, "end");
  }
  out += text(b_.x + b_.w / 2, b_.y + b_.h + 34, x_.label, 12);
  const double lx = b_.x - 48, ly = b_.y + b_.h / 2;
  out += "<text x=\"" + num(lx) + "\" y=\"" + num(ly) + "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 " +
         num(lx) + ' ' + num(ly) + ")\">" + escape(y_.label) + "</text>\n";
}

void Chart::markers(std::string& out, const std::vector<double>& x, const std::vector<double>& y,
                    const std::string& color, const std::vector<bool>& filled, const std::vector<std::string>& titles,
                    const std::vector<std::string>& labels) const {
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!x_.fits(x[i]) || !y_.fits(y[i])) continue;
    const bool fill = i < filled.size() ? filled[i] : true;
    out += "<circle cx=\"" + num(px(x[i])) + "\" cy=\"" + num(py(y[i])) + "\" r=\"4\" stroke=\"" + color +
           "\" fill=\"" + (fill ? color : std::string("white")) + "\">";
    if (i < titles.size()) out += "<title>" + escape(titles[i]) + "</title>";
    out += "</circle>\n";
    if (i < labels.size()) out += text(px(x[i]) + 6, py(y[i]) - 6, labels[i], 10, "start", "#555");
  }
}

void Chart::dots(std::string& out, const std::vector<double>& x, const std::vector<double>& y,
                 const std::string& color, double size) const {
  std::string d;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!x_.fits(x[i]) || !y_.fits(y[i])) continue;
    d += 'M' + num(px(x[i])) + ' ' + num(py(y[i])) + "h0";
  }
  if (d.empty()) return;
  out += "<path fill=\"none\" stroke=\"" + color + "\" stroke-opacity=\"0.6\" stroke-width=\"" + num(size) +
         "\" stroke-linecap=\"round\" d=\"" + d + "\"/>\n";
}

void Chart::rug(std::string& out, const std::vector<double>& x, const std::string& color) const {
  std::string d;
  const std::string y0 = num(b_.y + b_.h), len = num(-6);
  for (double v : x)
    if (x_.fits(v)) d += 'M' + num(px(v)) + ' ' + y0 + 'v' + len;
  if (d.empty()) return;
  out += "<path fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1\" d=\"" + d + "\"/>\n";
}

void Chart::steps(std::string& out, const std::vector<double>& x, const std::vector<double>& y,
                  const std::string& color) const {
  std::string d;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!x_.fits(x[i]) || !y_.fits(y[i])) continue;
    if (d.empty()) d = 'M' + num(px(x[i])) + ' ' + num(py(y[i]));
    else d += 'H' + num(px(x[i])) + 'V' + num(py(y[i]));
  }
  if (d.empty()) return;
  out += "<path fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\" d=\"" + d + "\"/>\n";
}

void Chart::polyline(std::string& out, const std::vector<double>& x, const std::vector<double>& y,
                     const std::string& color, double width) const {
  std::string pts;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!x_.fits(x[i]) || !y_.fits(y[i])) continue;
    pts += num(px(x[i])) + ',' + num(py(y[i])) + ' ';
  }
  if (pts.empty()) return;
  out += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + num(width) + "\" points=\"" + pts + "\"/>\n";
}

void Chart::hline(std::string& out, double y, std::string_view label) const {
  if (!y_.fits(y)) return;
  const std::string yy = num(py(y));
  out += "<line x1=\"" + num(b_.x) + "\" y1=\"" + yy + "\" x2=\"" + num(b_.x + b_.w) + "\" y2=\"" + yy +
         "\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n";
  out += text(b_.x + b_.w - 3, py(y) - 3, label, 10, "end", "#777");
}

std::string open(double w, double h) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(w, 0) + "\" height=\"" + num(h, 0) +
         "\" viewBox=\"0 0 " + num(w, 0) + ' ' + num(h, 0) +
         "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

std::string text(double x, double y, std::string_view s, int size, const char* anchor, const char* fill) {
  std::string o = "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
                  "\" text-anchor=\"" + anchor + '"';
  if (fill) o += std::string(" fill=\"") + fill + '"';
  return o + '>' + escape(s) + "</text>\n";
}

void legend(std::string& out, double x, double y, const std::vector<std::pair<std::string, std::string>>& entries) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double yy = y + static_cast<double>(i) * 16;
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(yy - 9) + "\" width=\"10\" height=\"10\" fill=\"" +
           entries[i].second + "\"/>\n";
    out += text(x + 14, yy, entries[i].first, 11, "start");
  }
}

const char* color(std::size_t i) {
  static const char* const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[i % 10];
}

}  // namespace hotpath::llm::svg
