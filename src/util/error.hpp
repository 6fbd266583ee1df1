// Errors a user can act on. Every user-facing failure is one of these; the CLI prints what() on one
// line and exits 2. Internal bugs use assertions, not these.
#pragma once
#include <stdexcept>
#include <string>

namespace hotpath {

// Bad input of any kind: a file, a flag, a model, a tick. The message names the problem.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tick input containing NaN/Inf. Thrown before any state is touched.
class TickError : public Error {
 public:
  using Error::Error;
};

// The platform cannot do what was asked (no CUDA device, model too large for a kernel, ...).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// The backend failed at run time, through no fault of the input: a GPU answer or precompute past its
// deadline, a kernel that stopped or would not start, a fallback whose shadow failed.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace hotpath
