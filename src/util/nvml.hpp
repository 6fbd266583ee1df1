// NVML, the NVIDIA driver's management library, loaded with dlopen at run time: hotpath has no link
// dependency on the driver and builds without its headers; where it is missing, reason() says why.
#pragma once
#include <dlfcn.h>

#include <string>

namespace hotpath::util {

// The library the NVIDIA driver installs (the unversioned .so comes only with development files).
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// NVML's return code (an enum in nvml.h); NVML_SUCCESS is 0.
using NvmlReturn = int;
inline constexpr NvmlReturn kNvmlSuccess = 0;

class Nvml {
 public:
  // Loads `library` and its nvmlInit_v2, nvmlShutdown and nvmlErrorString. Never throws: on failure
  // ok() is false and reason() says which step failed.
  explicit Nvml(std::string library = kNvmlLibrary);
  ~Nvml();  // nvmlShutdown once initialised, then dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Looks up `name` into `fn`; a missing one sets reason() and returns false. Only after ok().
  template <class F>
  bool symbol(const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib_, name));
    if (!fn) reason_ = std::string("the library has no ") + name + " (not NVML, or too old a driver)";
    return fn != nullptr;
  }
  // nvmlInit_v2; a failure sets reason() and returns false.
  bool init();
  // "<call> failed: <nvmlErrorString>" for reasons.
  std::string error(const char* call, NvmlReturn rc) const;
  // Sets reason() (e.g. "NVML sees no GPU"), so ok() turns false.
  void fail(std::string reason) { reason_ = std::move(reason); }

  bool ok() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }
  const std::string& library() const { return library_; }

 private:
  using InitFn = NvmlReturn (*)();
  using ErrorStringFn = const char* (*)(NvmlReturn);
  std::string library_, reason_;
  void* lib_ = nullptr;
  bool initialised_ = false;
  InitFn init_ = nullptr, shutdown_ = nullptr;
  ErrorStringFn error_string_ = nullptr;
};

}  // namespace hotpath::util
