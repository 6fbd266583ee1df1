#include "cuda/kernel_choice.hpp"

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

std::optional<KernelFamily> parse_kernel_family(std::string_view name) {
  if (name.empty() || name == "auto") return std::nullopt;
  if (name == "cta") return KernelFamily::cta;
  if (name == "cluster") return KernelFamily::cluster;
  if (name == "grid") return KernelFamily::grid;
  std::string list;
  for (const char* n : kKernelChoices) list += (list.empty() ? "" : ", ") + std::string(n);
  throw Error("unknown cuda kernel '" + std::string(name) + "' (valid: " + list + "; default " + kKernelChoices[0] + ")");
}

KernelChoice choose_kernel(const Model& model, Precision precision, Mode mode, int window, const MailboxOptions& mailbox,
                           const DeviceLimits& limits, std::optional<KernelFamily> requested, int max_precompute_blocks) {
  // Placeholder until the cluster and grid kernels land: the one-SM kernel only.
  if (requested && *requested != KernelFamily::cta)
    throw UnsupportedError(std::string("cuda kernel '") + family_name(*requested) + "' is not built yet");
  KernelChoice c;
  c.plan = plan_lstm(model, precision, mode, window, mailbox, limits, max_precompute_blocks);
  c.family = KernelFamily::cta;
  c.why = "its critical-step weights fit one SM's shared memory";
  return c;
}

}  // namespace hotpath::cuda
