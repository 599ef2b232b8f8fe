#include "ops/cpu/cpu_util.h"

#include <omp.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace cpu {

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

absl::Status DnnlError(const dnnl::error& e, const char* what) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what()));
}

absl::Status RunPrimitive(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, int threads,
                          const char* what) {
  // Debian's oneDNN is built without DNNL_ENABLE_CONCURRENT_EXEC, so its
  // primitives share one library-managed scratchpad: two running at once
  // corrupt each other (observed as heap corruption with --threads 2).
  // Primitive calls are therefore serialised; each still uses every core the
  // kernel could borrow, and non-oneDNN nodes run alongside.
  static std::mutex* serial = new std::mutex();
  std::lock_guard<std::mutex> lock(*serial);
  omp_set_num_threads(std::max(1, threads));
  try {
    dnnl::stream stream(CpuEngine());
    p.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return DnnlError(e, what);
  }
  return absl::OkStatus();
}

dnnl::memory Wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, CpuEngine(), const_cast<void*>(t.raw()));
}

dnnl::memory::desc PlainDesc(const std::vector<int64_t>& dims) {
  dnnl::memory::dims d(dims.begin(), dims.end());
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(d, dnnl::memory::data_type::f32, strides);
}

}  // namespace cpu
}  // namespace nereid
