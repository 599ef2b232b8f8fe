// LowRankPush on the GPU (place(device=cuda, comm=device)): the CPU
// kernel's push (ops/cpu/low_rank_push_kernels.cc) with its codes made on
// the GPU (ops/cuda/codec_gpu.h: PowerSGD's one-output functions, the host's
// bits) and sent through NCCL on the group's communication stream when the
// group's collective queue issues the node, in its turn.
//
// Two things go through the host: whether the step's edges have started
// (two flags in device memory that size the messages: read back when the
// queue issues the node, a wait on the stream, until both have; started
// edges stay so), and, each step, the normal
// values a warm start's zero columns take (LowRankPush::SeedDraws, drawn on
// the host for every low-rank segment, since only the device knows which
// columns are zero).

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compress/sticky_word.h"
#include "core/status_macros.h"
#include "ops/cuda/codec_gpu.h"
#include "ops/cuda/gpu_launch.h"
#include "ops/low_rank_push_node.h"

namespace nereid {
namespace {

// The step's device memory: state slices, the two messages, the work space.
struct PushBuffers {
  const float* x;
  float* y;
  float* sent;      // the out-edge's reference
  float* received;  // the in-edge's
  float* basis;     // the out-edge's warm starts
  float* started;   // [out-edges..., in-edges...]
  float* message;  // MessageCapacity() floats each
  float* arrival;
  char* work;
};

class LowRankPushGpuKernel : public cuda::IssuingKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(node_, LowRankPushNode::Make(node, attrs));
    name_ = cuda::Prefix(node);
    // The largest segment's work space: D, then the orthonormalisation's
    // doubles, the zero-column flags and the host's normal draws.
    for (const PushSegment& s : node_.push->segments()) {
      if (s.rank == 0) continue;
      d_floats_ = std::max(d_floats_, s.rows * s.cols);
      col_doubles_ = std::max(col_doubles_, s.rows + s.rows * s.rank);
      zero_bytes_ = std::max(zero_bytes_, s.rank);
      normal_floats_ = std::max(normal_floats_, s.cols * s.rank);
    }
    return absl::OkStatus();
  }

 private:
  // The most floats a message holds: an edge's first push sends every
  // value, a later one its codes (more than the values where a segment's
  // rank is high for its size).
  int64_t MessageCapacity() const {
    return std::max(node_.push->MessageFloats(false), node_.push->MessageFloats(true));
  }
  // [col, basis: doubles][D: floats][normals: floats][zero: bytes]
  size_t d_at() const { return sizeof(double) * col_doubles_; }
  size_t normals_at() const { return d_at() + sizeof(float) * d_floats_; }
  size_t zero_at() const { return normals_at() + sizeof(float) * normal_floats_; }
  size_t work_bytes() const { return zero_at() + zero_bytes_; }

  absl::Status Start(OpKernelContext& ctx, std::function<void(absl::Status)>& done) override {
    ASSIGN_OR_RETURN(cudaStream_t stream, cuda::StreamOf(ctx));
    CollectiveQueue* queue = ctx.collectives();
    RETURN_IF_ERROR(node_.CheckLaunch(ctx.step().training, queue != nullptr));
    // Outputs: y, then the state, copied from the inputs and updated in place.
    std::vector<Tensor> out;
    for (int i = 0; i < 5; ++i) {
      ASSIGN_OR_RETURN(Tensor * t, ctx.AllocateOutput(i));
      if (i > 0) {
        RETURN_IF_ERROR(cuda::CopyOnStream(t->raw(), ctx.input(i).raw(), t->num_bytes(), stream,
                                           name_ + "copying the push's state"));
      }
      out.push_back(Tensor::ViewOf(*t));
    }
    const Tensor& x = ctx.input(0);
    if (queue == nullptr) {  // a group of one keeps its value
      RETURN_IF_ERROR(cuda::CopyOnStream(out[0].raw(), x.raw(), x.num_bytes(), stream, name_ + "a group of one"));
      done(absl::OkStatus());
      return absl::OkStatus();
    }
    const size_t message = static_cast<size_t>(MessageCapacity());
    ASSIGN_OR_RETURN(Tensor scratch, cuda::Scratch(ctx, 2 * message * sizeof(float) + work_bytes()));
    CollectiveOptions options;
    options.tag = static_cast<uint32_t>(node_.bucket);
    options.timeout = queue->timeout();
    const int64_t step = ctx.step().step;
    queue->Submit(
        step, node_.bucket,
        [this, input = Tensor::ViewOf(x), out = std::move(out), scratch = std::move(scratch), options, step,
         waiter = cuda::StreamWaiter(ctx), stream](Communicator& comm) mutable -> absl::Status {
          RETURN_IF_ERROR(node_.CheckWorld(comm.world()));
          StreamCollectives* on_stream = comm.stream_collectives();
          if (on_stream == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                name_, "the group's communicator (", comm.backend(),
                ") cannot enqueue on a GPU stream: collectives placed on cuda need NCCL"));
          }
          const LowRankPushNode::Edge edge = node_.EdgeAt(step, comm.rank(), comm.world());
          const int64_t size = node_.push->elements(), capacity = MessageCapacity();
          float* message = scratch.data<float>();
          PushBuffers b{input.data<float>(),
                        out[0].data<float>(),
                        out[1].data<float>() + edge.slot * size,
                        out[2].data<float>() + edge.slot * size,
                        out[3].data<float>() + edge.slot * node_.push->basis_floats(),
                        out[4].data<float>(),
                        message,
                        message + capacity,
                        reinterpret_cast<char*>(message + 2 * capacity)};
          return Run(*on_stream, comm.rank(), step, edge, b, options, waiter, stream);
        },
        [done = std::move(done), group = node_.group](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("LowRankPush on group '", group, "': ", s.message())));
          done(absl::OkStatus());
        });
    return absl::OkStatus();
  }

  absl::Status Run(StreamCollectives& on_stream, int rank, int64_t step, const LowRankPushNode::Edge& edge,
                   const PushBuffers& b, const CollectiveOptions& options, const cuda::StreamWaiter& waiter,
                   cudaStream_t stream) {
    // The queue's thread launches here: the stream's GPU must be current.
    int device = 0;
    RETURN_IF_ERROR(cuda::CudaStatus(cudaStreamGetDevice(stream, &device), name_ + "cudaStreamGetDevice"));
    RETURN_IF_ERROR(cuda::CudaStatus(cudaSetDevice(device), name_ + "cudaSetDevice"));
    const LowRankPush& push = *node_.push;
    const int64_t slots = node_.slots(), size = push.elements();
    // An edge's two ends start on the same step, so each knows the other's
    // size. Whether they have is read back (a wait on the GPU) until both
    // have: started edges stay so (a StickyWord per slot).
    bool out_started = true, in_started = true;
    std::lock_guard<std::mutex> lock(started_mu_);  // Run's steps come one at a time; this orders them for TSan
    started_.resize(slots);
    codes::StickyWord& started = started_[edge.slot];
    if (started.NeedsRead(step)) {
      float flags[2] = {0, 0};
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(&flags[0], b.started + edge.slot, sizeof(float), cudaMemcpyDeviceToHost,
                                            stream),
                            "reading whether the out-edge has started"));
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(&flags[1], b.started + slots + edge.slot, sizeof(float),
                                            cudaMemcpyDeviceToHost, stream),
                            "reading whether the in-edge has started"));
      RETURN_IF_ERROR(waiter.Wait(stream, name_ + "reading whether the edges have started"));
      out_started = flags[0] != 0, in_started = flags[1] != 0;
      started.Read(step, out_started && in_started ? 1 : 0);
    }
    RETURN_IF_ERROR(Encode(edge, out_started, b, stream));
    const int64_t going = push.MessageFloats(out_started), coming = push.MessageFloats(in_started);
    if (edge.to == rank) {  // a shift of 0: NCCL does not send to its own rank
      RETURN_IF_ERROR(cuda::CopyOnStream(b.arrival, b.message, sizeof(float) * going, stream, name_ + "a shift of 0"));
    } else {
      RETURN_IF_ERROR(on_stream.EnqueueSendRecv(absl::MakeConstSpan(b.message, going), edge.to,
                                                absl::MakeSpan(b.arrival, coming), edge.from, options, stream));
    }
    RETURN_IF_ERROR(Decode(in_started, b, stream));
    static const float kOne = 1.0f;
    for (float* flag : {b.started + edge.slot, b.started + slots + edge.slot}) {
      RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(flag, &kOne, sizeof(float), cudaMemcpyHostToDevice, stream), "marking the edges"));
    }
    return Check(cuda::codecs::LowRankPushMix(size, b.x, b.received, b.sent, node_.consensus, b.y, stream),
                 "mixing the push");  // LowRankPush::Mix's operations
  }

  // The message for x and the out-edge's reference and warm starts, as
  // LowRankPush::Encode.
  absl::Status Encode(const LowRankPushNode::Edge& edge, bool started, const PushBuffers& b, cudaStream_t stream) {
    const LowRankPush& push = *node_.push;
    if (!started) {
      const size_t bytes = sizeof(float) * push.elements();
      RETURN_IF_ERROR(cuda::CopyOnStream(b.message, b.x, bytes, stream, name_ + "an edge's first push"));
      return cuda::CopyOnStream(b.sent, b.x, bytes, stream, name_ + "an edge's first reference");
    }
    double* col = reinterpret_cast<double*>(b.work);
    float* d = reinterpret_cast<float*>(b.work + d_at());
    float* normals = reinterpret_cast<float*>(b.work + normals_at());
    unsigned char* zero = reinterpret_cast<unsigned char*>(b.work + zero_at());
    int64_t at = 0, sent = 0, warm = 0;
    for (size_t s = 0; s < push.segments().size(); ++s) {
      const auto [n, m, r] = push.segments()[s];
      if (r == 0) {
        const size_t bytes = sizeof(float) * n * m;
        RETURN_IF_ERROR(cuda::CopyOnStream(b.message + sent, b.x + at, bytes, stream, name_ + "an exact segment"));
        RETURN_IF_ERROR(cuda::CopyOnStream(b.sent + at, b.x + at, bytes, stream, name_ + "an exact segment"));
        sent += n * m;
      } else {
        const std::vector<float> draws = LowRankPush::SeedDraws(edge.seed + s, m, r);
        // From pageable memory: returns once `draws` is staged.
        RETURN_IF_ERROR(Check(cudaMemcpyAsync(normals, draws.data(), sizeof(float) * draws.size(),
                                              cudaMemcpyHostToDevice, stream),
                              "copying the warm starts' draws"));
        float* p = b.message + sent;
        RETURN_IF_ERROR(Check(cuda::codecs::LowRankPushEncode(n, m, r, b.x + at, b.sent + at, b.basis + warm, normals,
                                                              d, zero, col, col + n, p, p + n * r, stream),
                              absl::StrCat("encoding segment ", s)));
        sent += (n + m) * r;
        warm += m * r;
      }
      at += n * m;
    }
    return absl::OkStatus();
  }

  // The in-edge's reference from the arrival, as LowRankPush::Decode.
  absl::Status Decode(bool started, const PushBuffers& b, cudaStream_t stream) {
    const LowRankPush& push = *node_.push;
    if (!started) {
      return cuda::CopyOnStream(b.received, b.arrival, sizeof(float) * push.elements(), stream,
                                name_ + "an edge's first arrival");
    }
    int64_t at = 0, sent = 0;
    for (const auto& [n, m, r] : push.segments()) {
      if (r == 0) {
        RETURN_IF_ERROR(cuda::CopyOnStream(b.received + at, b.arrival + sent, sizeof(float) * n * m, stream,
                                           name_ + "an exact segment's arrival"));
        sent += n * m;
      } else {
        const float* p = b.arrival + sent;
        RETURN_IF_ERROR(Check(cuda::codecs::LowRankPushAddProduct(n, m, r, p, p + n * r, b.received + at, stream),
                              "decoding a segment"));
        sent += (n + m) * r;
      }
      at += n * m;
    }
    return absl::OkStatus();
  }

  absl::Status Check(int cuda_error, absl::string_view what) const {
    return cuda::CudaStatus(static_cast<cudaError_t>(cuda_error), absl::StrCat(name_, what));
  }

  LowRankPushNode node_;
  std::string name_;
  int64_t d_floats_ = 0, col_doubles_ = 0, zero_bytes_ = 0, normal_floats_ = 0;
  // Per slot, whether its edges were last read as started (Run).
  std::mutex started_mu_;
  std::vector<codes::StickyWord> started_;
};

}  // namespace

NEREID_REGISTER_KERNEL("LowRankPush", kGpu, DT_FLOAT, LowRankPushGpuKernel);

}  // namespace nereid
