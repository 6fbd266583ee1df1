#include "cuda/kernel_choice.hpp"

#include <algorithm>
#include <cstdio>

#include "util/error.hpp"

namespace hotpath::cuda {

const char* family_name(KernelFamily family) {
  switch (family) {
    case KernelFamily::cta: return "cta";
    case KernelFamily::cluster: return "cluster";
    case KernelFamily::grid: return "grid";
  }
  return "?";
}

std::optional<KernelFamily> requested_family(CudaKernel kernel) {
  switch (kernel) {
    case CudaKernel::cta: return KernelFamily::cta;
    case CudaKernel::cluster: return KernelFamily::cluster;
    case CudaKernel::grid: return KernelFamily::grid;
    case CudaKernel::automatic: break;
  }
  return std::nullopt;
}

KernelChoice choose_kernel(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                           const DeviceLimits& limits, std::optional<KernelFamily> requested, int max_precompute_blocks,
                           int cluster_blocks, const GridPlanOptions& grid) {
  auto plan = [&](KernelFamily family) {
    if (family == KernelFamily::cta)
      return plan_lstm(model, precision, mode, window, mailbox, limits, max_precompute_blocks);
    if (family == KernelFamily::cluster)
      return plan_cluster(model, precision, mode, window, mailbox, limits, max_precompute_blocks, cluster_blocks);
    return plan_grid(model, precision, mode, window, mailbox, limits, max_precompute_blocks, grid);
  };
  auto describe = [&](KernelChoice& c) {
    const LstmParams& p = c.plan.params;
    const std::string kib = std::to_string(c.plan.critical_weight_bytes / 1024) + " KiB of critical-step weights";
    if (c.family == KernelFamily::cta) {
      c.why = kib + " fit one SM (1 critical block + " + std::to_string(p.np) + " precompute blocks)";
    } else if (c.family == KernelFamily::cluster) {
      const int spill = std::max(0, p.cl.slots - p.cl.regs);
      c.why = kib + " over a cluster of " + std::to_string(p.nc) + " blocks of " + std::to_string(p.gpb * kUnitsPerGroup) +
              " hidden units (" + std::to_string(p.cl.slots) + " W_ih tiles a warp, " +
              (spill ? std::to_string(spill) + " of them in shared memory" : std::string("all in registers")) +
              "), exchanged as tagged words through distributed shared memory; " + std::to_string(p.np) +
              " precompute blocks" + (p.pre_global ? ", their weights in global memory" : "");
    } else {
      const long long smem_weights = grid_smem_weight_bytes(p);
      const std::string l2 = p.grid_l2_layers == 0 ? std::string("all in shared memory")
                             : p.grid_l2_layers == p.L
                                 ? std::string("every layer's read from L2 each tick: slower")
                                 : "layers 0-" + std::to_string(p.grid_l2_layers - 1) + " read from L2 each tick, the rest in shared memory";
      const int lanes = grid_cell_lanes(p);
      c.why = kib + " over " + std::to_string(p.nc) + " blocks of " + std::to_string(p.gpb * kUnitsPerGroup) +
              " hidden units (" + std::to_string(smem_weights / 1024) + " KiB of weights in " +
              std::to_string(p.smem_bytes / 1024) + " KiB shared memory each; " + l2 +
              "), exchanged through L2; " + std::to_string(p.compute_warps) + " compute warps a block" +
              (p.grid_reg_wgs > 0 ? " holding each layer's tiles in registers (" +
                                        std::to_string(grid_warpgroup_registers(p.threads(), p.grid_reg_wgs)) +
                                        " a thread, loaded before the layer's input arrives)"
                                  : std::string(" reading their tiles from shared memory")) +
              ", the cell warp adding each unit's k-shares in " + std::to_string(lanes) +
              (lanes == 1 ? " lane; " : " lanes; ") +
              (p.grid_precompute == GridPrecompute::in_critical
                   ? std::string("the precompute in the same blocks between ticks (tensor cores, W_hh from L2)")
                   : std::to_string(p.np) + " precompute blocks" + (p.pre_global ? ", their weights in global memory" : ""));
      if (p.grid_precompute == GridPrecompute::in_critical) {
        const GridEstimate e = grid_estimate(p);
        char est[200];
        std::snprintf(est, sizeof est,
                      "; predicted ~%.0f ticks/s: a precompute round ~%.0f us (%.1f MB of W_hh a block from L2), "
                      "the answer ~%.0f us (rates measured on an H200; bench measures yours)",
                      e.ticks_per_s, e.round_us, double(e.hh_bytes_per_block) / 1e6, e.answer_us);
        c.why += est;
      }
    }
  };
  KernelChoice c;
  if (requested) {
    c.family = *requested;
    try {
      c.plan = plan(c.family);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(std::string("cuda kernel '") + family_name(c.family) + "' cannot serve this model: " + e.what());
    }
    describe(c);
    c.why = std::string("asked for; ") + c.why;
    return c;
  }
  std::string refused;
  for (KernelFamily f : {KernelFamily::cta, KernelFamily::cluster, KernelFamily::grid}) {
    try {
      c.plan = plan(f);
      c.family = f;
      describe(c);
      if (!refused.empty()) c.why += " (" + refused + ")";
      return c;
    } catch (const UnsupportedError& e) {
      refused += (refused.empty() ? "" : "; ") + std::string("not ") + family_name(f) + ": " + e.what();
    }
  }
  throw UnsupportedError("no cuda kernel can serve this model: " + refused);
}

}  // namespace hotpath::cuda
