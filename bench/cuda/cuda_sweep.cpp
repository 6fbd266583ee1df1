// Measures mailbox and kernel variants side by side in one process (one device call), for docs/cuda.md.
// Not a test. Usage: cuda_sweep [--ticks N] [--pp N] [--json FILE] [--cpu C] [--quick | --families | --large |
// --large-default (the grid models with the default exchange and precompute only) [--quiet-answer (each grid
// row beside the same with CudaOptions::grid_quiet_answer)] [--input-nap NS (... with grid_input_nap_ns)]
// [--model M ... (those models only)] | --pp-widths W,W,...
// (the ping-pong alone at each input width, with each mailbox knob: where a wide input's round trip goes) |
// [--trace (each grid row's ticks split into input side, kernel and output side: CudaOptions::tick_trace)]
// [--warm-l2 (... beside the same with CudaOptions::grid_warm_l2_tiles)] [--no-pollers-publish (... with
// CudaOptions::grid_pollers_publish off)] [--send-gap US (... beside the same
// with the host waiting US microseconds between "ready" and the next tick's input)]
// | --tile (the throughput path's backtests of the small zoo models on the per-step GEMMs, on the fused
// chunk kernel, CudaOptions::batch_tile, and on its cluster form, CudaOptions::batch_cluster, side by side; then
// fresh windows at B = 1 .. 512 on the GEMMs, the cluster form, the narrow cluster kernel and the fresh-window
// server, per call latency beside the ping-pong) | --fresh (those fresh windows only; --variants
// gemm,cluster,narrow1,narrow2,narrow4,server,server_serial,server_dynk and --batches 1,8,.. pick the rows)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/input_layout.hpp"
#include "cuda/kernels/common/lstm_launch.hpp"
#include "cuda/kernels/fresh/fresh_layout.hpp"
#include "model/zoo.hpp"
#include "reference/parallel_outputs.hpp"
#include "reference/reference.hpp"
#include "util/error.hpp"
#include "util/stats.hpp"

using namespace hotpath;
using Clock = std::chrono::steady_clock;

namespace {

using Pct = util::Summary;

// Index floor(q * n), as the tables in docs/cuda.md were measured.
Pct percentiles(std::vector<double> v) { return util::summarize(std::move(v), util::Percentile::index_floor); }

std::string json_pct(const Pct& p) {
  char b[256];
  std::snprintf(b, sizeof b, "{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f,\"mean\":%.3f,\"count\":%zu}",
                p.p50, p.p90, p.p99, p.p999, p.max, p.mean, p.count);
  return b;
}

void row(const std::string& name, const Pct& p, const std::string& extra = "") {
  std::printf("%-46s p50 %6.2f  p90 %6.2f  p99 %6.2f  p99.9 %6.2f  max %8.1f  (n=%zu) %s\n", name.c_str(), p.p50, p.p90,
              p.p99, p.p999, p.max, p.count, extra.c_str());
  std::fflush(stdout);
}

std::vector<std::string> json_rows;

// with_send: also the host's input write alone (PingPongOptions::send_us), in the row and the JSON.
Pct pingpong(const std::string& name, int floats, long long count, cuda::MailboxOptions mb, int cpu,
             cuda::PingPongPath path = cuda::PingPongPath::automatic, bool with_send = false) {
  std::vector<double> send;
  cuda::PingPongOptions o;
  if (with_send) o.send_us = &send;
  o.floats = floats;
  o.count = count;
  o.warmup = 5000;
  o.cpu = cpu;
  o.mailbox = mb;
  o.path = path;
  Pct p{};
  try {
    p = percentiles(cuda::pingpong_us(o));
  } catch (const std::exception& e) {  // a torn chunk is a result here, not a crash
    std::printf("%-44s FAILED: %s\n", ("pingpong " + name).c_str(), e.what());
    json_rows.push_back("{\"kind\":\"pingpong\",\"name\":\"" + name + "\",\"failed\":true}");
    return p;
  }
  std::string send_row, send_json;
  if (with_send) {
    const Pct sp = percentiles(send);
    char b[96];
    std::snprintf(b, sizeof b, "send p50 %.2f p99 %.2f", sp.p50, sp.p99);
    send_row = b;
    send_json = ",\"send_us\":" + json_pct(sp);
  }
  row("pingpong " + name, p, send_row);
  json_rows.push_back("{\"kind\":\"pingpong\",\"name\":\"" + name + "\",\"floats\":" + std::to_string(floats) +
                      ",\"path\":\"" + cuda::pingpong_path_name(o) + "\",\"latency_us\":" + json_pct(p) + send_json + "}");
  return p;
}

// budget_s > 0: stop measuring after that many seconds (ticks then says how many were measured).
void model_run(const std::string& name, const std::string& zoo, Mode mode, Precision prec, long long ticks,
               const CudaOptions& copt, int cpu, size_t check_ticks, const std::string& kernel = "", double budget_s = 0,
               double send_gap_us = 0) {
  const Model m = *zoo_model(zoo);
  const int W = m.config.window.value_or(1);
  BackendOptions o;
  o.mode = mode;
  o.window = mode == Mode::window ? W : 0;
  o.precision = prec;
  o.gpu.timeout_us = 10'000'000;  // the big models' window precompute takes milliseconds
  if (!kernel.empty()) o.gpu.kernel = util::parse_name<CudaKernel>(kernel);
  if (cpu >= 0) o.cpuset = {cpu};
  std::unique_ptr<Backend> b;
  try {
    b = make_cuda_backend(m, o, copt);
  } catch (const UnsupportedError& e) {
    std::printf("%-44s refused: %s\n", name.c_str(), e.what());
    json_rows.push_back("{\"kind\":\"model\",\"name\":\"" + name + "\",\"refused\":true}");
    return;
  }
  const int I = m.config.input_size, O = m.config.output_size;
  // Inputs vary every tick: a pool of random vectors larger than the L2 of interest, cycled.
  const size_t pool = 1 << 16;
  std::vector<float> xs(pool * I);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& x : xs) x = d(rng);
  std::vector<float> out(O), first(check_ticks * O);
  std::vector<double> lat;
  lat.reserve(size_t(ticks));
  // a budgeted run warms up for 300 ticks at most (the big windows fill, the slow precompute still ends)
  const long long warm = std::min<long long>(budget_s > 0 ? 300 : 2000, ticks / 4);
  const auto start = Clock::now();
  auto t_measure = start;
  long long t = 0;
  for (; t < ticks + warm; ++t) {
    if (t == warm) t_measure = Clock::now();
    if (budget_s > 0 && t > warm && size_t(t) >= check_ticks &&
        std::chrono::duration<double>(Clock::now() - t_measure).count() > budget_s)
      break;
    std::span<const float> x(&xs[(size_t(t) % pool) * I], I);
    const auto t0 = Clock::now();
    b->step(x, out);
    const auto t1 = Clock::now();
    b->finish_precompute();
    if (send_gap_us > 0) {  // --send-gap: the next input comes this long after "ready", not at once
      const auto until = Clock::now() + std::chrono::duration<double, std::micro>(send_gap_us);
      while (Clock::now() < until) {
      }
    }
    if (t >= warm) lat.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (size_t(t) < check_ticks) std::copy(out.begin(), out.end(), first.begin() + t * O);
  }
  ticks = t - warm;
  const double secs = std::chrono::duration<double>(Clock::now() - t_measure).count();
  const auto z = reference::outputs_on_every_core(m, mode == Mode::streaming, W, xs, check_ticks);
  double md = 0, mr = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    md = std::max(md, std::fabs(double(first[i]) - z[i]));
    mr = std::max(mr, std::fabs(z[i]));
  }
  const double err = md / std::max(1.0, mr);
  const Pct p = percentiles(lat);
  const auto c = b->counters();
  const auto f = b->facts();
  char extra[256];
  std::snprintf(extra, sizeof extra, "rate %.0f ticks/s, err %.2e, kernel compute mean %.0f max %.0f cycles", double(ticks) / secs,
                err, c.count("kernel_compute_cycles_mean") ? c.at("kernel_compute_cycles_mean") : -1.0,
                c.count("kernel_compute_cycles_max") ? c.at("kernel_compute_cycles_max") : -1.0);
  row(name, p, extra);
  if (c.count("tick_trace_ticks"))  // CudaOptions::tick_trace: each tick's latency in three parts
    std::printf("%-44s   traced (%.0f ticks, us p50/p99/p99.9): total %.2f/%.2f/%.2f  input above its floor "
                "%.2f/%.2f/%.2f  kernel %.2f/%.2f/%.2f  output and floors %.2f/%.2f/%.2f\n",
                "", c.at("tick_trace_ticks"), c.at("tick_trace_total_us_p50"), c.at("tick_trace_total_us_p99"),
                c.at("tick_trace_total_us_p999"), c.at("tick_trace_input_excess_us_p50"),
                c.at("tick_trace_input_excess_us_p99"), c.at("tick_trace_input_excess_us_p999"),
                c.at("tick_trace_kernel_us_p50"), c.at("tick_trace_kernel_us_p99"), c.at("tick_trace_kernel_us_p999"),
                c.at("tick_trace_output_and_floors_us_p50"), c.at("tick_trace_output_and_floors_us_p99"),
                c.at("tick_trace_output_and_floors_us_p999"));
  if (c.count("kernel_tick_us_p50"))  // the in-kernel span of each tick ("input complete" to "output stored")
    std::printf("%-44s   in the kernel: p50 %.2f  p99 %.2f  p99.9 %.2f us; SM clock p1/p50 %.0f/%.0f MHz\n", "",
                c.at("kernel_tick_us_p50"), c.at("kernel_tick_us_p99"), c.at("kernel_tick_us_p999"),
                c.count("kernel_sm_clock_mhz_p1") ? c.at("kernel_sm_clock_mhz_p1") : -1.0,
                c.count("kernel_sm_clock_mhz_p50") ? c.at("kernel_sm_clock_mhz_p50") : -1.0);
  if (c.count("kernel_cycles_layer0_mean"))
    std::printf("%-44s   compute %.0f ns mean; cycles mean/max: wake %.0f/%.0f  layer0 %.0f/%.0f  layers1.. %.0f/%.0f  head "
                "%.0f/%.0f  store %.0f/%.0f\n",
                "", c.at("kernel_compute_ns_mean"), c.at("kernel_cycles_wake_mean"), c.at("kernel_cycles_wake_max"),
                c.at("kernel_cycles_layer0_mean"), c.at("kernel_cycles_layer0_max"), c.at("kernel_cycles_layers_mean"),
                c.at("kernel_cycles_layers_max"), c.at("kernel_cycles_head_mean"), c.at("kernel_cycles_head_max"),
                c.at("kernel_cycles_store_mean"), c.at("kernel_cycles_store_max"));
  if (c.count("precompute_round_cycles_mean"))
    std::printf("%-44s   precompute block 0, cycles a round: layer0 %.0f  barrier waits %.0f  layers %.0f  publish %.0f  "
                "round %.0f\n",
                "", c.at("precompute_layer0_cycles_mean"), c.at("precompute_barrier_wait_cycles_mean"),
                c.at("precompute_layers_cycles_mean"), c.at("precompute_publish_cycles_mean"),
                c.at("precompute_round_cycles_mean"));
  if (c.count("cluster_input_arrival_ns_mean")) {
    // the cluster kernel's parts, per block: mean over the blocks / the slowest block
    std::printf("%-44s   %s: input arrival %.0f/%.0f ns\n", "",
                f.count("critical_blocks") ? (f.at("critical_blocks") + " blocks").c_str() : "",
                c.at("cluster_input_arrival_ns_mean"), c.at("cluster_input_arrival_ns_max_block"));
    for (int l = 0; l < m.config.num_layers; ++l) {
      const std::string L = "cluster_layer" + std::to_string(l) + "_";
      std::printf("%-44s   L%d cycles:", "", l);
      for (const char* part : {"wait", "tiles", "meet", "cell", "send", "kshare_wait", "kshare_tiles", "compute"})
        if (c.count(L + part + "_cycles_mean"))
          std::printf("  %s %.0f/%.0f", part, c.at(L + part + "_cycles_mean"), c.at(L + part + "_cycles_max_block"));
      std::printf("\n");
    }
  }
  if (c.count("grid_layer0_meet_cycles_mean")) {
    // the grid kernel's parts, per block, cumulative from the block's start of the tick: the mean over the
    // blocks / the slowest block (GridLayerStat)
    for (int l = 0; l <= m.config.num_layers; ++l) {
      const std::string L = l == m.config.num_layers ? std::string("grid_head_") : "grid_layer" + std::to_string(l) + "_";
      std::printf("%-44s   %s cycles:", "", l == m.config.num_layers ? "head" : ("L" + std::to_string(l)).c_str());
      for (const char* part : cuda::kGridLayerStatNames)
        if (c.count(L + part + "_cycles_mean"))
          std::printf("  %s %.0f/%.0f", part, c.at(L + part + "_cycles_mean"), c.at(L + part + "_cycles_max_block"));
        else if (c.count(L + part + "_mean"))  // a count (the warps' poll rounds)
          std::printf("  %s %.2f/%.2f", part, c.at(L + part + "_mean"), c.at(L + part + "_max_block"));
      std::printf("\n");
    }
  }
  std::ostringstream js;
  js << "{\"kind\":\"model\",\"name\":\"" << name << "\",\"model\":\"" << zoo << "\",\"mode\":\"" << mode_name(mode)
     << "\",\"precision\":\"" << precision_name(prec) << "\",\"variant\":\"" << b->variant()
     << "\",\"latency_us\":" << json_pct(p) << ",\"ticks_per_s\":" << double(ticks) / secs << ",\"error\":" << err
     << ",\"error_ticks\":" << check_ticks;
  for (const auto& [k, v] : c) js << ",\"" << k << "\":" << v;
  js << "}";
  json_rows.push_back(js.str());
}

// The mailbox and the cta kernel's knobs, side by side (docs/cuda.md).
void run_standard(long long ticks, long long pp, int cpu, bool quick, const cuda::MailboxOptions& def) {
  // Mailbox: the two kernels' input paths (smem variant: poller warps; regs: one warp).
  pingpong("32f poller_warps", 32, pp, def, cpu, cuda::PingPongPath::poller_warps);
  pingpong("32f single_warp", 32, pp, def, cpu, cuda::PingPongPath::single_warp);
  if (!quick) {
    cuda::MailboxOptions v = def;
    v.stream_stores = true;
    pingpong("32f stream(full lines)", 32, pp, v, cpu);
    v = def;
    v.dual_seq_input = true;
    pingpong("32f store dual-seq {seq,f,f,seq}", 32, pp, v, cpu);
    v = def;
    v.poll_sets = 2;
    pingpong("32f store poll2", 32, pp, v, cpu);
    v = def;
    v.load_kind = 1;
    pingpong("32f store relaxed.sys loads", 32, pp, v, cpu);
  }

  CudaOptions copt;
  const size_t check = 3000;
  const long long short_ticks = std::min<long long>(ticks, 200'000);
  CudaOptions cregs = copt;
  cregs.variant = CudaVariant::regs;
  CudaOptions csmem = copt;
  csmem.variant = CudaVariant::smem;
  pingpong("32f default, beside lstm_s", 32, pp, def, cpu);
  // The critical block of the default variant, and what each knob does to it, side by side.
  model_run("lstm_s window fp16 regs", "lstm_s", Mode::window, Precision::fp16, ticks, cregs, cpu, check);
  model_run("lstm_s window fp16 regs (again)", "lstm_s", Mode::window, Precision::fp16, short_ticks, cregs, cpu, check);
  pingpong("32f default, after lstm_s", 32, pp, def, cpu);
  model_run("lstm_s window fp16 smem", "lstm_s", Mode::window, Precision::fp16, short_ticks, csmem, cpu, check);
  if (!quick) {
    CudaOptions c2 = csmem;
    c2.keep_warm = true;
    model_run("lstm_s window fp16 smem keep_warm on", "lstm_s", Mode::window, Precision::fp16, short_ticks, c2, cpu, check);
    c2 = csmem;
    c2.forward_after_output = true;
    model_run("lstm_s window fp16 smem forward-after-output", "lstm_s", Mode::window, Precision::fp16, short_ticks, c2, cpu,
              check);
    c2 = csmem;
    c2.mailbox.poll_sets = 2;
    model_run("lstm_s window fp16 smem poll2", "lstm_s", Mode::window, Precision::fp16, short_ticks, c2, cpu, check);
  }
  model_run("lstm_s window bf16 regs", "lstm_s", Mode::window, Precision::bf16, short_ticks, cregs, cpu, check);
  model_run("lstm_s streaming fp16 regs", "lstm_s", Mode::streaming, Precision::fp16, short_ticks, cregs, cpu, check);
  pingpong("128f default, beside vollo_tiny", 128, pp, def, cpu);
  model_run("vollo_tiny streaming fp16", "vollo_tiny", Mode::streaming, Precision::fp16, short_ticks, copt, cpu, check);
}

// The ping-pong at each width, the default beside each mailbox knob, widths interleaved so drift shows.
void run_widths(const std::vector<int>& widths, long long pp, int cpu, const cuda::MailboxOptions& def) {
  for (int w : widths) {
    auto at = [&](const std::string& knob, const cuda::MailboxOptions& v) {
      pingpong(std::to_string(w) + "f " + knob, w, pp, v, cpu, cuda::PingPongPath::automatic, true);
    };
    at("default", def);
    cuda::MailboxOptions v = def;
    v.poll_sets = 2;
    // as the ping-pong sizes its block: the widest inputs have no room for two sets (it would run one)
    if (cuda::fit_poll_sets(cuda::input_layout(w, false).chunks, 2, 2, cuda::kMaxBlockThreads) == 2) at("poll2", v);
    v = def;
    v.dual_seq_input = true;
    at("dual-seq {seq,f,f,seq}", v);
    v = def;
    v.stream_stores = true;
    at("stream(full lines)", v);
    v.write_combined_input = true;
    at("stream + write-combined memory", v);
    v = def;
    v.load_kind = 1;
    at("relaxed.sys loads", v);
  }
}

// The throughput path's backtests, the per-step GEMMs beside the fused chunk kernel and its cluster form:
// windows a second (median of 3 runs after an unmeasured one; also by the kernels' own time alone, the
// copies through host memory aside) and each kernel's error against float64 on the first ticks of the first
// series.
void tile_rows() {
  struct Case {
    const char* zoo;
    size_t S, T;
  };
  for (const Case k : {Case{"lstm_s", 256, 2048}, Case{"nv_small", 256, 2048}, Case{"stac_a", 256, 2048},
                       Case{"vollo_tiny", 4096, 256}}) {
    const Model m = *zoo_model(k.zoo);
    const int W = m.config.window.value_or(1);
    const bool streaming = W == 1;
    const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size), n = k.S * k.T;
    std::vector<float> x(n * I);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> d(0.f, 1.f);
    for (float& v : x) v = d(rng);
    const size_t checked = 64;
    const auto want = streaming ? reference::streaming(m, std::span<const float>(x.data(), checked * I), checked)
                                : reference::sliding_window(m, std::span<const float>(x.data(), checked * I), checked, W);
    for (const int kind : {0, 1, 2}) {  // per-step GEMMs, the fused kernel, its cluster form
      const bool tile = kind == 1, cluster = kind == 2;
      BackendOptions o;
      o.mode = streaming ? Mode::streaming : Mode::window;
      o.window = streaming ? 0 : W;
      CudaOptions c;
      c.throughput_only = true;
      c.batch_tile = tile;
      c.batch_cluster = cluster;
      c.batch_narrow_rows = 0;
      auto b = make_cuda_backend(m, o, c);
      std::vector<float> z(n * O);
      b->backtest(x, k.S, k.T, Backend::BacktestOutput{z.data(), nullptr}, nullptr);  // unmeasured
      std::vector<double> secs;
      for (int r = 0; r < 3; ++r) {
        const auto t0 = Clock::now();
        b->backtest(x, k.S, k.T, Backend::BacktestOutput{z.data(), nullptr}, nullptr);
        secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      std::sort(secs.begin(), secs.end());
      const auto c2 = b->counters();
      const double err = reference::normalized_error(std::vector<double>(z.begin(), z.begin() + long(checked * O)), want);
      const std::string name = std::string(k.zoo) + (streaming ? " backtest-streaming" : " backtest") +
                               (tile ? " tile" : cluster ? " cluster" : " gemm");
      std::printf("%-44s %.3g windows/s (%zu series x %zu ticks), compute %.3g ms (%.3g windows/s), wall %.3g ms, "
                  "tile kernel %g, cluster %g, err %.2e\n",
                  name.c_str(), double(n) / secs[1], k.S, k.T, c2.at("batch_compute_s") * 1e3,
                  double(n) / c2.at("batch_compute_s"), c2.at("batch_wall_s") * 1e3, c2.at("batch_tile_kernel"),
                  c2.at("batch_cluster_blocks"), err);
      std::ostringstream js;
      js << "{\"kind\":\"throughput\",\"name\":\"" << name << "\",\"windows_per_s\":" << double(n) / secs[1]
         << ",\"series\":" << k.S << ",\"ticks\":" << k.T << ",\"error\":" << err;
      for (const auto& [key, v] : c2) js << ",\"" << key << "\":" << v;
      js << "}";
      json_rows.push_back(js.str());
    }
  }
}


// Fresh windows at small batches (B = 1, 8, 64; and 128, 240, 512 for the crossover) on the GEMMs, the cluster form and the narrow kernel: per call
// latency (p50 / p99 of `calls` calls after 50 unmeasured), windows a second by wall time, and the error of the
// last call against float64; beside a ping-pong of the window's floats in the same process (the host-GPU round trip alone).
void fresh_rows(long long calls, int cpu, const std::vector<std::string>& variants, const std::vector<int>& batches) {
  auto wanted = [&](const std::string& v) {
    return variants.empty() || std::find(variants.begin(), variants.end(), v) != variants.end();
  };
  for (const char* zoo : {"lstm_s", "nv_small", "stac_a"}) {
    const Model m = *zoo_model(zoo);
    const int W = m.config.window.value_or(1);
    const size_t I = size_t(m.config.input_size), O = size_t(m.config.output_size);
    pingpong(std::string(zoo) + " window floats", int(std::min<size_t>(size_t(W) * I, size_t(cuda::kMaxInputFloats))), 20000,
             cuda::MailboxOptions{}, cpu);
    for (const int Bi : batches) {
      const size_t B = size_t(Bi);
      std::vector<float> x(B * size_t(W) * I);
      std::mt19937_64 rng(11);
      std::normal_distribution<float> d(0.f, 1.f);
      for (float& v : x) v = d(rng);
      const auto want = reference::batch(m, x, B, size_t(W));
      // per-step GEMMs (0), the cluster form (1), the narrow kernel with 1, 2 and 4 k-shares (the one-block fused
      // kernel, 2-4x slower than the GEMMs here in the first runs, is left out)
      // -2: the fresh-window server (a persistent kernel, the windows through its mailbox)
      // -3, -4: the server in its earlier forms (the ring's waits a pair at a time; W_hh's tiles counted at run time)
      for (const int ksplit : {0, -1, 1, 2, 4, -2, -3, -4}) {
        if (B > 64 && (ksplit == -1 || ksplit > 1)) continue;  // the crossover: the GEMMs, the narrow kernel, the server
        if (B > 240 && ksplit <= -2) continue;
        if (!wanted(ksplit == -4 ? "server_dynk" : ksplit == -3 ? "server_serial" : ksplit == -2 ? "server" : ksplit == -1 ? "cluster" : ksplit > 0 ? "narrow" + std::to_string(ksplit) : "gemm"))
          continue;
        BackendOptions o;
        o.mode = Mode::batch;
        o.window = W;
        CudaOptions c;
        c.throughput_only = true;
        c.batch_cluster = ksplit == -1;
        // beyond 64 rows every chunk on the narrow kernel, in as many waves of clusters as it takes
        c.batch_narrow_rows = ksplit > 0 ? (B > 64 ? (long long)B : -1) : 0;
        c.batch_narrow_ksplit = std::max(ksplit, 0);
        c.batch_fresh_rows = ksplit <= -2 ? (long long)B : 0;
        c.batch_fresh_form = ksplit == -3 ? cuda::kFreshRingSerial : ksplit == -4 ? cuda::kFreshDynamicK : 0u;
        auto b = make_cuda_backend(m, o, c);
        std::vector<float> z(B * O);
        for (int r = 0; r < 50; ++r) b->run_batch(x, B, size_t(W), z);
        std::vector<double> us;
        us.reserve(size_t(calls));
        const auto t_all = Clock::now();
        for (long long r = 0; r < calls; ++r) {
          const auto t0 = Clock::now();
          b->run_batch(x, B, size_t(W), z);
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        const double wall = std::chrono::duration<double>(Clock::now() - t_all).count();
        const double err = reference::normalized_error(std::vector<double>(z.begin(), z.end()), want);
        const Pct p = percentiles(us);
        const std::string name = std::string(zoo) + " fresh B=" + std::to_string(B) +
                                 (ksplit == -4   ? " server dynk"
                                  : ksplit == -3 ? " server serial"
                                  : ksplit == -2 ? " server"
                                  : ksplit == -1 ? " cluster"
                                  : ksplit > 0   ? " narrow k" + std::to_string(ksplit)
                                                 : " gemm");
        const auto cn = b->counters();
        char extra[160];
        std::snprintf(extra, sizeof extra, "%.3g windows/s, compute %.1f us, narrow chunks %g, server %g, err %.2e",
                      double(B) * double(calls) / wall, cn.at("batch_compute_s") * 1e6, cn.at("batch_narrow_chunks"),
                      cn.at("batch_fresh_server"), err);
        row(name, p, extra);
        if (ksplit <= -2) {  // where the server's requests went, per block, SM cycles a request
          std::string parts;
          for (const auto& [key, v] : cn)
            if (key.rfind("fresh_server_l", 0) == 0) parts += " " + key.substr(13) + "=" + std::to_string(long(v));
          std::printf("    %s\n", parts.c_str());
        }
        std::ostringstream js;
        js << "{\"kind\":\"fresh\",\"name\":\"" << name << "\",\"batch\":" << B << ",\"calls\":" << calls
           << ",\"latency_us\":" << json_pct(p) << ",\"windows_per_s\":" << double(B) * double(calls) / wall
           << ",\"error\":" << err;
        for (const auto& [key, v] : cn) js << ",\"" << key << "\":" << v;
        js << "}";
        json_rows.push_back(js.str());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  long long ticks = 1'000'000, pp = 200'000;
  int cpu = 2;
  std::string json;
  bool quick = false, families = false, large = false, large_default = false, quiet_answer = false, tile = false,
       trace = false, fresh = false;
  std::vector<std::string> fresh_variants;  // --variants gemm,...,server,server_serial,server_dynk (--fresh)
  std::vector<int> fresh_batches{1, 8, 64, 128, 240, 512};  // --batches 1,8,...
  std::vector<std::string> only;  // --model M (repeatable): the --large cases of these models only
  int input_nap_ns = 0;           // --input-nap NS: each grid row beside the same with grid_input_nap_ns
  bool warm_l2 = false;           // --warm-l2: ... with grid_warm_l2_tiles
  bool warp0_gives = false;       // --no-pollers-publish: ... with grid_pollers_publish off
  double send_gap_us = 0;         // --send-gap US: ... with the next input US after "ready"
  std::vector<int> widths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--ticks") ticks = std::stoll(next());
    else if (a == "--pp") pp = std::stoll(next());
    else if (a == "--json") json = next();
    else if (a == "--cpu") cpu = std::stoi(next());
    else if (a == "--quick") quick = true;
    else if (a == "--families") families = true;
    else if (a == "--large") large = true;
    else if (a == "--large-default") large = large_default = true;
    else if (a == "--quiet-answer") quiet_answer = true;
    else if (a == "--tile") tile = true;
    else if (a == "--fresh") fresh = true;
    else if (a == "--trace") trace = true;
    else if (a == "--variants") {
      std::stringstream list(next());
      for (std::string v; std::getline(list, v, ',');) fresh_variants.push_back(v);
    } else if (a == "--batches") {
      std::stringstream list(next());
      fresh_batches.clear();
      for (std::string v; std::getline(list, v, ',');) fresh_batches.push_back(std::stoi(v));
    }
    else if (a == "--model" && i + 1 < argc) only.push_back(argv[++i]);
    else if (a == "--input-nap" && i + 1 < argc) input_nap_ns = std::atoi(argv[++i]);
    else if (a == "--warm-l2") warm_l2 = true;
    else if (a == "--no-pollers-publish") warp0_gives = true;
    else if (a == "--send-gap" && i + 1 < argc) send_gap_us = std::atof(argv[++i]);
    else if (a == "--pp-widths") {
      std::stringstream list(next());
      for (std::string w; std::getline(list, w, ',');) widths.push_back(std::stoi(w));
    } else {
      std::fprintf(stderr, "cuda_sweep: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  try {
    const auto facts = cuda::device_facts();
    std::printf("device: %s, driver %s, %s SMs, SM clock %s MHz\n", facts.at("gpu_name").c_str(),
                facts.at("driver_version").c_str(), facts.at("sm_count").c_str(), facts.at("sm_clock_mhz").c_str());
    std::ostringstream fj;
    fj << "{\"kind\":\"facts\"";
    for (const auto& [k, v] : facts) fj << ",\"" << k << "\":\"" << v << "\"";
    fj << "}";
    json_rows.push_back(fj.str());

    cuda::MailboxOptions def;
    if (tile || fresh) {
      if (tile) tile_rows();
      fresh_rows(quick ? 300 : 2000, cpu, fresh_variants, fresh_batches);
    } else if (!widths.empty()) {
      run_widths(widths, pp, cpu, def);
    } else if (large) {
      // The grid family's models: its exchanges side by side (tagged words, the default, and arrival
      // counters; lstm_params.hpp, GridExchange) with the precompute in the critical blocks, and the
      // precompute on blocks of its own where that is quick enough (GridPrecompute), each beside the
      // ping-pong of its input width; each run stops after its tick count or its time budget (the rate
      // says which).
      struct Case {
        const char* zoo;
        Mode mode;
        int floats;
        size_t check;
      };
      const Case cases[] = {{"lstm_s", Mode::window, 32, 300},        {"stac_c", Mode::window, 500, 3},
                            {"lstm_l", Mode::window, 32, 3},          {"nv_large", Mode::window, 512, 3},
                            {"lstm_l", Mode::streaming, 32, 40},      {"vollo_med", Mode::streaming, 480, 100},
                            {"vollo_large", Mode::streaming, 960, 40}};
      for (const Case& k : cases) {
        if (!only.empty() && std::find(only.begin(), only.end(), std::string(k.zoo)) == only.end()) continue;
        pingpong(std::to_string(k.floats) + "f default", k.floats, pp, def, cpu);
        for (auto xch : {cuda::GridExchange::tagged, cuda::GridExchange::counters}) {
          for (auto pre : {cuda::GridPrecompute::in_critical, cuda::GridPrecompute::separate}) {
            // the separate precompute of the widest windows: a few ticks a second, not worth its warm-up here
            if (large_default && (xch != cuda::GridExchange::tagged || pre != cuda::GridPrecompute::in_critical)) continue;
            if (pre == cuda::GridPrecompute::separate &&
                (xch != cuda::GridExchange::tagged ||
                 (k.mode == Mode::window && std::string(k.zoo) != "lstm_s" && std::string(k.zoo) != "lstm_l")))
              continue;
            CudaOptions c;
            c.grid_precompute = pre;
            c.grid_exchange = xch;
            c.tick_trace = trace;  // --trace: every grid row's ticks split into input, kernel and output
            const bool own = pre == cuda::GridPrecompute::in_critical;
            model_run(std::string(k.zoo) + " " + mode_name(k.mode) + " fp16 grid " + cuda::grid_exchange_name(xch) + " " +
                          (own ? "in_critical" : "separate"),
                      k.zoo, k.mode, Precision::fp16, ticks, c, cpu, k.check, "grid", own ? 8.0 : 5.0);
            if (xch != cuda::GridExchange::tagged || !own) continue;
            // beside the default row: the same with one knob changed (or the input sent later: gap_us)
            auto beside = [&](const std::string& what, const CudaOptions& v, double gap_us = 0) {
              model_run(std::string(k.zoo) + " " + mode_name(k.mode) + " fp16 grid tagged in_critical" + what, k.zoo,
                        k.mode, Precision::fp16, ticks, v, cpu, k.check, "grid", 8.0, gap_us);
            };
            if (quiet_answer) {  // the blocks' next precompute round held until block 0's answer is out
              CudaOptions v = c;
              v.grid_quiet_answer = true;
              beside(", quiet answer", v);
            }
            if (input_nap_ns > 0) {  // blocks 1.. nap between looks for the input's words
              CudaOptions v = c;
              v.grid_input_nap_ns = input_nap_ns;
              beside(", input nap " + std::to_string(input_nap_ns) + " ns", v);
            }
            if (warm_l2) {  // the L2 layers' tiles loaded and waited for before "ready" (not only prefetched)
              CudaOptions v = c;
              v.grid_warm_l2_tiles = true;
              beside(", warm L2 tiles", v);
            }
            if (warp0_gives) {  // the input's words stored by block 0's warp 0 once the whole input is in
              CudaOptions v = c;
              v.grid_pollers_publish = false;
              beside(", warp 0 gives the input", v);
            }
            if (send_gap_us > 0) {  // the input sent a while after "ready" (what the round left in flight has settled)
              char gap[64];
              std::snprintf(gap, sizeof gap, ", input %g us after ready", send_gap_us);
              beside(gap, c, send_gap_us);
            }
            if (!large_default) {
              // the tiles read from shared memory as their MMAs run, with every compute warp that fits
              // (GridTiles::shared, the kernel before tiles in registers)
              CudaOptions v = c;
              v.grid_tiles = cuda::GridTiles::shared;
              beside(", tiles in shared memory", v);
            }
          }
        }
      }
    } else if (families) {
      // The medium models on the cluster kernel at each size it can take, beside the cta kernel and
      // the ping-pong of each input width: where the time goes (segments), what the cluster size does.
      CudaOptions copt;
      const long long n = std::min<long long>(ticks, 200'000);
      const size_t check = 300;
      // the two exchanges side by side: tagged words, st.async + mbarrier
      auto both = [&](const std::string& label, const std::string& zoo, Mode mode, std::initializer_list<int> blocks) {
        for (int nb : blocks)
          for (bool async : {false, true}) {
            CudaOptions c = copt;
            c.cluster_blocks = nb;
            c.cluster_async_exchange = async;
            model_run(label + " cluster " + (nb ? std::to_string(nb) : std::string("auto")) + (async ? " mbarrier" : " tagged"),
                      zoo, mode, Precision::fp16, n, c, cpu, check, "cluster");
          }
      };
      pingpong("32f default", 32, pp, def, cpu);
      model_run("lstm_s window fp16 cta", "lstm_s", Mode::window, Precision::fp16, n, copt, cpu, check, "cta");
      both("lstm_m window fp16", "lstm_m", Mode::window, {0, 8});
      pingpong("192f default", 192, pp, def, cpu);
      both("nv_medium window fp16", "nv_medium", Mode::window, {0});
      pingpong("250f default", 250, pp, def, cpu);
      both("stac_b window fp16", "stac_b", Mode::window, {0});
      pingpong("256f default", 256, pp, def, cpu);
      both("vollo_small streaming fp16", "vollo_small", Mode::streaming, {0});
      pingpong("100f default", 100, pp, def, cpu);
      model_run("stac_a window fp16 cta", "stac_a", Mode::window, Precision::fp16, n, copt, cpu, check, "cta");
      both("stac_a window fp16", "stac_a", Mode::window, {0});
      pingpong("32f default, again", 32, pp, def, cpu);
    } else {
      run_standard(ticks, pp, cpu, quick, def);
    }
  } catch (const std::exception& e) {
    std::printf("sweep failed: %s\n", e.what());
    if (!json.empty()) {
      std::ofstream(json) << "[\n" << [&] {
        std::string s;
        for (size_t i = 0; i < json_rows.size(); ++i) s += json_rows[i] + (i + 1 < json_rows.size() ? ",\n" : "\n");
        return s;
      }() << "]\n";
    }
    return 1;
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "[\n";
    for (size_t i = 0; i < json_rows.size(); ++i) f << json_rows[i] << (i + 1 < json_rows.size() ? ",\n" : "\n");
    f << "]\n";
  }
  return 0;
}
