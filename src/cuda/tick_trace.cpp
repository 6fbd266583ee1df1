#include "cuda/tick_trace.hpp"

#include <algorithm>

namespace hotpath::cuda {

TickTraceSplit split_tick_trace(const unsigned long long* ring, long long ring_ticks, const long long* send_ns,
                                const long long* recv_ns, long long ticks, double ns_per_cycle, size_t stretch) {
  TickTraceSplit r;
  std::vector<double> in_raw;
  const long long n = std::min(ticks, ring_ticks), first = ticks - n;
  for (long long t = first; t < ticks; ++t) {
    const size_t k = size_t(t) & size_t(ring_ticks - 1);
    const unsigned long long* e = ring + 3 * k;
    if (e[0] != (unsigned long long)t + 1 || recv_ns[k] <= send_ns[k]) continue;
    const double span = double(e[2]) * ns_per_cycle, stamp = double(e[1]);
    r.total.push_back(double(recv_ns[k] - send_ns[k]) * 1e-3);
    r.kernel.push_back(span * 1e-3);
    in_raw.push_back((stamp - span - double(send_ns[k])) * 1e-3);
  }
  // The input side's floor: the fastest input of each stretch, at the tick it came, and a straight line
  // between those (and beyond the first and the last): a drift of the clocks' offset is followed, not
  // mistaken for delay.
  const size_t m = in_raw.size();
  stretch = std::max<size_t>(stretch, 1);
  std::vector<size_t> at;
  for (size_t b = 0; b < m; b += stretch) {
    const auto lo = std::min_element(in_raw.begin() + long(b), in_raw.begin() + long(std::min(m, b + stretch)));
    at.push_back(size_t(lo - in_raw.begin()));
  }
  r.input_excess.resize(m);
  r.output_and_floors.resize(m);
  size_t seg = 0;  // the floor between at[seg] and at[seg + 1]
  for (size_t i = 0; i < m; ++i) {
    while (seg + 2 < at.size() && i > at[seg + 1]) ++seg;
    double floor = in_raw[at[seg]];
    if (at.size() > 1) {
      const size_t a = at[seg], b = at[seg + 1];
      floor = in_raw[a] + (in_raw[b] - in_raw[a]) * (double(i) - double(a)) / double(b - a);
    }
    r.input_excess[i] = in_raw[i] - floor;
    r.output_and_floors[i] = r.total[i] - r.kernel[i] - r.input_excess[i];
  }
  return r;
}

}  // namespace hotpath::cuda
