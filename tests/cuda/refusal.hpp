// A request the CUDA backend must refuse, naming why, before it serves anything.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_backend.hpp"
#include "util/error.hpp"

namespace hotpath {

// make_cuda_backend(model, options, cuda) throws UnsupportedError whose message contains `why`; `asked` names
// the request in the failure when it is accepted instead.
inline void expect_refused(const Model& model, const BackendOptions& options, const CudaOptions& cuda,
                           const std::string& why, const std::string& asked) {
  try {
    (void)make_cuda_backend(model, options, cuda);
    ADD_FAILURE() << "accepted " << asked;
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

}  // namespace hotpath
