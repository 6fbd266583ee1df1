#include "cuda/batch_chunks.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace hotpath::cuda {

ChunkSource window_chunks(size_t S, size_t T, size_t W, size_t R, size_t P) {
  if (W < 1 || R < 1 || P < R + W - 1) throw Error("window_chunks: needs W >= 1 and staged >= rows + W - 1");
  size_t s = 0, t = 0;  // the next window's series and end tick
  return [=](BatchChunk& ch) mutable {
    if (s >= S || T == 0) return false;
    ch = BatchChunk{};
    ch.steps = int(W);
    ch.reset = true;
    while (s < S && size_t(ch.rows) < R) {
      // Windows a .. b-1 of series s need its input ticks ib .. b-1 (the first W-1 ticks are history).
      const size_t a = t, ib = a >= W - 1 ? a - (W - 1) : 0;
      const size_t room_rows = R - size_t(ch.rows), room_in = P - size_t(ch.n_in);
      size_t b = std::min(T, a + room_rows);
      if (b - ib > room_in) {
        if (room_in <= a - ib) break;  // not even one window's history fits: the next chunk
        b = ib + room_in;
      }
      const size_t base = size_t(ch.n_in);
      ch.in.push_back({s * T + ib, base, b - ib});
      ch.out.push_back({size_t(ch.rows), s * T + a, b - a});
      for (size_t e = a; e < b; ++e) {
        ch.row_p0.push_back(int(base + e - ib) - int(W - 1));  // the tick e-W+1, before tick 0 for e < W-1
        ch.row_first.push_back(e >= W - 1 ? 0 : int(W - 1 - e));
      }
      ch.rows += int(b - a);
      ch.n_in += int(b - ib);
      ch.done += b - a;
      t = b;
      if (t >= T) ++s, t = 0;
    }
    return true;
  };
}

StreamingShape streaming_shape(size_t S, size_t T, size_t R, size_t P) {
  StreamingShape sh;
  sh.group = std::max<size_t>(1, std::min(S, R));
  sh.slice = std::max<size_t>(1, std::min(T, P / sh.group));
  return sh;
}

ChunkSource streaming_chunks(size_t S, size_t T, size_t R, size_t P) {
  const StreamingShape sh = streaming_shape(S, T, R, P);
  size_t g0 = 0, t0 = 0;
  return [=](BatchChunk& ch) mutable {
    if (g0 >= S || T == 0) return false;
    ch = BatchChunk{};
    const size_t n = std::min(sh.group, S - g0), steps = std::min(sh.slice, T - t0);
    ch.rows = int(n);
    ch.steps = int(steps);
    ch.n_in = int(n * steps);
    ch.reset = t0 == 0;
    ch.emit_every = true;
    for (size_t r = 0; r < n; ++r) {
      ch.in.push_back({(g0 + r) * T + t0, r * steps, steps});
      ch.out.push_back({r * steps, (g0 + r) * T + t0, steps});
      ch.row_p0.push_back(int(r * steps));
    }
    ch.done = n * steps;
    t0 += steps;
    if (t0 >= T) g0 += n, t0 = 0;
    return true;
  };
}

std::vector<CopyRun> copy_runs(const std::vector<BatchChunk::Copy>& pieces) {
  std::vector<CopyRun> runs;
  for (const BatchChunk::Copy& c : pieces) {
    if (c.n == 0) continue;
    if (!runs.empty()) {
      CopyRun& r = runs.back();
      const size_t last_src = r.src + (r.count - 1) * r.src_step, last_dst = r.dst + (r.count - 1) * r.dst_step;
      if (c.n == r.n && c.src > last_src && c.dst > last_dst) {
        const size_t ds = c.src - last_src, dd = c.dst - last_dst;
        // a 2D copy's rows may not overlap (step >= n); a run of one piece takes the first step it sees
        if (r.count == 1 && ds >= r.n && dd >= r.n) {
          r.src_step = ds, r.dst_step = dd, r.count = 2;
          continue;
        }
        if (r.count > 1 && ds == r.src_step && dd == r.dst_step) {
          ++r.count;
          continue;
        }
      }
    }
    runs.push_back({c.src, c.dst, c.n, 1, c.n, c.n});
  }
  return runs;
}

ChunkSource fresh_chunks(size_t B, size_t W, size_t R) {
  if (W < 1 || R < 1) throw Error("fresh_chunks: needs W >= 1 and rows >= 1");
  size_t b0 = 0;
  return [=](BatchChunk& ch) mutable {
    if (b0 >= B) return false;
    ch = BatchChunk{};
    const size_t n = std::min(R, B - b0);
    ch.rows = int(n);
    ch.steps = int(W);
    ch.n_in = int(n * W);
    ch.reset = true;
    ch.in.push_back({b0 * W, 0, n * W});
    ch.out.push_back({0, b0, n});
    for (size_t r = 0; r < n; ++r) ch.row_p0.push_back(int(r * W));
    ch.done = n;
    b0 += n;
    return true;
  };
}

}  // namespace hotpath::cuda
