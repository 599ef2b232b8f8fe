#ifndef NEREID_OPS_CPU_CPU_UTIL_H_
#define NEREID_OPS_CPU_CPU_UTIL_H_

// What the CPU kernels share: parallel loops that respect the worker's thread
// budget, the oneDNN engine, and the thread count oneDNN's OpenMP runtime
// uses for one primitive call.
//
// Who owns the cores: the executor. A worker given T threads runs nodes on at
// most T cores at once; each node runs on the cores reserved for it when it
// was dispatched (OpKernelContext::AcquireThreads says how many it uses).
// Loops here split into exactly that many oneTBB tasks (run in the
// executor's arena of T threads); oneDNN primitives get the same count
// through omp_set_num_threads, set on the calling thread before they are
// built and run. So the busy threads never exceed T.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "ops/kernel.h"
#include "tbb/parallel_for.h"

namespace nereid {
namespace cpu {

// Runs fn(begin, end) over [0, n) split into as many equal chunks as the
// kernel may use threads (each chunk at least `min_per_thread` items). The
// split depends only on the thread count, so results are deterministic for a
// given --threads.
template <typename F>
void ParallelFor(OpKernelContext* ctx, int64_t n, int64_t min_per_thread, F&& fn) {
  if (n <= 0) return;
  int threads = ctx->AcquireThreads(n, min_per_thread);
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunk = (n + threads - 1) / threads;
  // oneTBB hands the chunks to its workers and joins them through its own
  // synchronisation, which ThreadSanitizer cannot see (Debian's libtbb is not
  // instrumented); this atomic makes both edges visible: the caller's writes
  // before the loop to every chunk, and every chunk's writes to the caller.
  std::atomic<int> handoff{0};
  handoff.store(1, std::memory_order_release);
  tbb::parallel_for(0, threads, [&](int i) {
    (void)handoff.load(std::memory_order_acquire);
    int64_t begin = i * chunk, end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
    handoff.fetch_add(1, std::memory_order_release);
  });
  (void)handoff.load(std::memory_order_acquire);
}

// The sum of term(0) .. term(n-1) in eight lanes (the compiler keeps them in
// one vector register), combined in a fixed order: the same sum in every
// run, and no chain of n dependent additions (3-5x one running sum).
template <typename Term>
inline float SumLanes(int64_t n, Term term) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += term(i + l);
  }
  float tail = 0;
  for (; i < n; ++i) tail += term(i);
  return (((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]))) + tail;
}

inline float SumLanes(const float* values, int64_t n) {
  return SumLanes(n, [values](int64_t i) { return values[i]; });
}

// Elements per thread below which splitting an elementwise loop costs more
// than it saves.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

const dnnl::engine& CpuEngine();

// Sets the calling thread's OpenMP thread count (at least 1), which oneDNN
// reads when it builds and runs a primitive.
void SetOpenMpThreads(int threads);

// Converts a oneDNN exception from building a primitive into a status.
absl::Status DnnlError(const dnnl::error& e, const char* what);

// The oneDNN primitives a kernel built, by the shapes and the thread count
// they were built for. Building one costs far more than running it, so each
// is built once; the map is guarded because a kernel may run for two steps at
// once. oneDNN fixes a primitive's split of the work (and so the order of its
// reductions) for the OpenMP thread count current when it is built, so the
// count is set first: building on whatever count the thread last ran with
// made results depend on which thread a node happened to run on.
template <typename Key, typename Value>
class PrimitiveCache {
 public:
  // `build()` returns the Value for `key` and may throw dnnl::error, which
  // becomes a status naming `what`.
  template <typename Build>
  absl::StatusOr<const Value*> Get(const Key& key, int threads, Build&& build, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    auto full_key = std::make_pair(key, threads);
    auto it = cache_.find(full_key);
    if (it != cache_.end()) return &it->second;
    SetOpenMpThreads(threads);
    try {
      return &cache_.emplace(full_key, build()).first->second;
    } catch (const dnnl::error& e) {
      return DnnlError(e, what);
    }
  }

 private:
  std::mutex mu_;
  std::map<std::pair<Key, int>, Value> cache_;
};

// Runs a oneDNN primitive on `threads` OpenMP threads and waits for it;
// oneDNN's exceptions become statuses naming the primitive. A primitive
// built with scratchpad_mode::user passes its scratchpad_desc(): it runs on
// one scratchpad shared by all such primitives (they run one at a time),
// grown to the largest asked for.
absl::Status RunPrimitive(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, int threads,
                          const char* what, const dnnl::memory::desc* scratchpad = nullptr);

// C = alpha * op(A) op(B) + beta * C on row-major matrices (op: transpose or
// not; C is [m, n], A [m, k] or [k, m], B [k, n] or [n, k]) through oneDNN's
// sgemm on `threads` OpenMP threads, one call at a time as the primitives.
absl::Status Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   const float* b, float beta, float* c, int threads);
// The same on sub-matrices: rows `lda`, `ldb`, `ldc` floats apart.
absl::Status Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads);

// A oneDNN memory over a tensor's buffer (no copy).
dnnl::memory Wrap(const dnnl::memory::desc& md, const Tensor& t);
// A plain row-major f32 descriptor of `dims`.
dnnl::memory::desc PlainDesc(const std::vector<int64_t>& dims);

// One argument of a oneDNN primitive that runs in its own preferred layout
// (blocked layouts run oneDNN's direct JIT kernels, which beat its plain-NCHW
// paths by 2-9x here) while our tensors stay plain: the two descriptors and
// the reorder between them, empty when they are the same.
struct Relayout {
  dnnl::memory::desc plain, chosen;
  dnnl::primitive reorder;  // plain -> chosen for inputs, back for outputs

  static Relayout ForInput(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen);
  static Relayout ForOutput(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen);

  // The input `t` in the chosen layout: `t` itself, or a copy reordered into
  // `*staging`, which must outlive the primitive's run.
  absl::StatusOr<dnnl::memory> Input(const Tensor& t, Tensor* staging, int threads) const;
  // Where the primitive writes the output `t`: `t` itself, or `*staging`,
  // which FinishOutput then reorders into `t`.
  absl::StatusOr<dnnl::memory> Output(const Tensor& t, Tensor* staging) const;
  absl::Status FinishOutput(const dnnl::memory& written, const Tensor& t, int threads) const;
};

}  // namespace cpu
}  // namespace nereid

#endif  // NEREID_OPS_CPU_CPU_UTIL_H_
