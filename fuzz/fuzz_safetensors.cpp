// libFuzzer target: the safetensors reader (File::parse, what File::open runs on a file's bytes) on
// arbitrary bytes. A refusal (hotpath::Error) is the expected answer to bad input; a crash, a
// sanitizer report, a leak, a huge allocation, another exception or a broken promise of a File that
// parsed is a bug (the promises a parsed File makes: tensors inside the data, sizes matching
// shapes, no overlap, every name found).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/safetensors.hpp"
#include "util/error.hpp"

namespace st = hotpath::safetensors;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void check(const st::File& f) {
  uint64_t prev_end = 0;
  for (const auto& t : f.tensors()) {
    const auto r = f.raw(t);
    require(r.size() == t.end - t.begin && t.element_count() * st::dtype_size(t.dtype) == r.size());
    if (!r.empty()) {
      require(t.begin >= prev_end);  // sorted by offset, no overlap
      prev_end = t.end;
    }
    require(f.find(t.name) == &t);
    if (st::is_float(t.dtype)) {
      require(f.read_f64(t).size() == t.element_count());
      require(f.read_f32(t).size() == t.element_count());
    }
  }
  require(f.tensors().size() <= st::kMaxTensors && f.metadata().size() <= st::kMaxObjectMembers);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check(st::File::parse(std::vector<uint8_t>(data, data + size), "fuzz"));
  } catch (const hotpath::Error&) {
    // bad input, refused: expected
  }
  return 0;
}
