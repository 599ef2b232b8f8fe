#include "ops/cpu/cpu_util.h"

#include <omp.h>

#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace nereid {
namespace cpu {

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

absl::Status DnnlError(const dnnl::error& e, const char* what) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what()));
}

void SetOpenMpThreads(int threads) { omp_set_num_threads(std::max(1, threads)); }

namespace {
// Debian's oneDNN is built without DNNL_ENABLE_CONCURRENT_EXEC, so its
// primitives share one library-managed scratchpad: two running at once
// corrupt each other (observed as heap corruption with --threads 2).
// Primitive calls (and its GEMMs) are therefore serialised; each still uses
// the cores reserved for its node, and non-oneDNN nodes run alongside.
std::mutex& OneDnnSerial() {
  static std::mutex* serial = new std::mutex();
  return *serial;
}
}  // namespace

absl::Status Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   const float* b, float beta, float* c, int threads) {
  return Sgemm(transpose_a, transpose_b, m, n, k, alpha, a, transpose_a ? m : k, b, transpose_b ? k : n, beta, c, n,
               threads);
}

absl::Status Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads) {
  if (m == 0 || n == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(OneDnnSerial());
  SetOpenMpThreads(threads);
  dnnl_status_t s = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
                               c, ldc);
  if (s != dnnl_success) {
    return absl::InternalError(absl::StrCat("oneDNN sgemm [", m, "x", k, "] x [", k, "x", n, "] failed: status ", s));
  }
  return absl::OkStatus();
}

absl::Status RunPrimitive(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, int threads,
                          const char* what, const dnnl::memory::desc* scratchpad) {
  // Winograd convolutions crashed on the library's scratchpad with
  // --threads 2, so primitives built with scratchpad_mode::user run on this
  // shared buffer (one at a time: OneDnnSerial).
  static std::vector<char>* shared_scratchpad = new std::vector<char>();
  std::lock_guard<std::mutex> lock(OneDnnSerial());
  SetOpenMpThreads(threads);
  try {
    dnnl::stream stream(CpuEngine());
    if (scratchpad != nullptr && scratchpad->get_size() > 0) {
      constexpr size_t kAlign = 64;
      if (shared_scratchpad->size() < scratchpad->get_size() + kAlign) {
        shared_scratchpad->clear();
        shared_scratchpad->shrink_to_fit();
        shared_scratchpad->resize(scratchpad->get_size() + kAlign);
      }
      void* aligned = shared_scratchpad->data();
      size_t space = shared_scratchpad->size();
      std::align(kAlign, scratchpad->get_size(), aligned, space);
      std::unordered_map<int, dnnl::memory> with_scratchpad = args;
      with_scratchpad[DNNL_ARG_SCRATCHPAD] = dnnl::memory(*scratchpad, CpuEngine(), aligned);
      p.execute(stream, with_scratchpad);
    } else {
      p.execute(stream, args);
    }
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

Relayout Relayout::ForInput(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen) {
  Relayout r{plain, chosen, {}};
  if (plain != chosen) {
    r.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(CpuEngine(), plain, CpuEngine(), chosen));
  }
  return r;
}

Relayout Relayout::ForOutput(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen) {
  Relayout r{plain, chosen, {}};
  if (plain != chosen) {
    r.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(CpuEngine(), chosen, CpuEngine(), plain));
  }
  return r;
}

absl::StatusOr<dnnl::memory> Relayout::Input(const Tensor& t, Tensor* staging, int threads) const {
  dnnl::memory from = Wrap(plain, t);
  if (!reorder) return from;
  ASSIGN_OR_RETURN(dnnl::memory to, Output(t, staging));
  RETURN_IF_ERROR(RunPrimitive(reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, threads, "reorder"));
  return to;
}

absl::StatusOr<dnnl::memory> Relayout::Output(const Tensor& t, Tensor* staging) const {
  if (!reorder) return Wrap(plain, t);
  ASSIGN_OR_RETURN(*staging, Tensor::Allocate(DT_UINT8, {static_cast<int64_t>(chosen.get_size())}));
  return Wrap(chosen, *staging);
}

absl::Status Relayout::FinishOutput(const dnnl::memory& written, const Tensor& t, int threads) const {
  if (!reorder) return absl::OkStatus();
  return RunPrimitive(reorder, {{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, Wrap(plain, t)}}, threads, "reorder");
}

}  // namespace cpu
}  // namespace nereid
