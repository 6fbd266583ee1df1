// Placeholder until the CPU backend lands.
#include "cpu/cpu_backend.hpp"
#include "util/error.hpp"
namespace hotpath {
std::unique_ptr<Backend> make_cpu_backend(const Model&, const BackendOptions&) {
  throw UnsupportedError("the cpu backend is not built yet");
}
}  // namespace hotpath
