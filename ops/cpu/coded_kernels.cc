// Kernels of CodedSend and CodedGather (ops/coded_ops.cc). A worker's result
// travels as one body on the point-to-point channel (tag:
// point_to_point_tag.h); its shape is the master's to know ([ceil(rows / k),
// cols], rows from `like`), so no header. The master posts a receive for
// every worker present this round and decodes as soon as the results that
// arrived determine every partition; later ones still land (in buffers the
// transfers own) and are dropped, so a slow worker never holds the round up
// once it is not needed.

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "coded/departure_plan.h"
#include "coded/linear_code.h"
#include "core/status_macros.h"
#include "ops/coded_round_stats.h"
#include "ops/point_to_point_tag.h"
#include "ops/kernel.h"

namespace nereid {
namespace {

struct CodeAttrs {
  CodeSpec spec;
  std::string departures;
  int64_t channel = -1;
};

absl::StatusOr<CodeAttrs> ReadCodeAttrs(const Node& node, const AttrMap& attrs) {
  CodeAttrs a;
  ASSIGN_OR_RETURN(a.spec.scheme, ParseCodeScheme(attrs.at("scheme")->s()));
  a.spec.n = static_cast<int>(attrs.at("n")->i());
  a.spec.k = static_cast<int>(attrs.at("k")->i());
  a.spec.degree = static_cast<int>(attrs.at("degree")->i());
  a.spec.seed = static_cast<uint64_t>(attrs.at("seed")->i());
  a.departures = attrs.at("departures")->s();
  a.channel = attrs.at("channel")->i();
  if (a.channel < 0 || a.channel >= kMaxPointToPointChannels) {
    return absl::FailedPreconditionError(
        absl::StrCat(node.name(), ": channel ", a.channel, " is outside [0, ", kMaxPointToPointChannels, ")"));
  }
  return a;
}

CollectiveOptions BodyOptions(int64_t channel, const StepInfo& step, PointToPointChannel& p2p) {
  CollectiveOptions o;
  o.tag = PointToPointTag(channel, step, /*header=*/false);
  o.timeout = p2p.timeout();
  o.abort = p2p.abort_signal();
  return o;
}

class CodedSendKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(CodeAttrs code, ReadCodeAttrs(node, attrs));
    channel_ = code.channel;
    peer_ = static_cast<int>(attrs.at("peer")->i());
    worker_ = static_cast<int>(attrs.at("worker")->i());
    ASSIGN_OR_RETURN(departures_, DeparturePlan::Parse(code.departures, code.spec.n, code.spec.seed));
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    const Tensor& x = ctx->input(0);
    if (absl::Status s = ctx->SetOutput(0, x); !s.ok()) return done(s);
    if (!ctx->step().training) return done(absl::FailedPreconditionError("coded plans do not evaluate on workers"));
    if (departures_.Gone(ctx->step().step, worker_)) return done(absl::OkStatus());  // gone: silent this round
    PointToPointChannel* p2p = ctx->point_to_point();
    if (p2p == nullptr) return done(absl::FailedPreconditionError("CodedSend needs the master: run with --workers"));
    const CollectiveOptions body = BodyOptions(channel_, ctx->step(), *p2p);
    auto value = std::make_shared<Tensor>(x);
    const int peer = peer_;
    p2p->Submit(
        [value, peer, body](Communicator& comm) {
          return comm.Send(absl::MakeConstSpan(value->data<float>(), value->num_elements()), peer, body);
        },
        [done = std::move(done), peer](absl::Status s) {
          if (!s.ok()) return done(absl::Status(s.code(), absl::StrCat("sending a coded result to rank ", peer, ": ",
                                                                       s.message())));
          done(absl::OkStatus());
        });
  }

 private:
  int64_t channel_ = -1;
  int peer_ = 0;
  int worker_ = 0;
  DeparturePlan departures_;
};

// One round's receipts, shared by its transfers: they may finish after the
// node has (the result was decodable without them).
struct Round {
  std::mutex mu;
  std::vector<int> rows;                    // the coded rows that arrived, in order
  std::vector<std::vector<float>> results;  // their values
  bool finished = false;
};

class CodedGatherKernel : public AsyncOpKernel {
 public:
  absl::Status Init(const Node& node, const AttrMap& attrs) override {
    ASSIGN_OR_RETURN(CodeAttrs code, ReadCodeAttrs(node, attrs));
    channel_ = code.channel;
    ASSIGN_OR_RETURN(code_, LinearCode::Make(code.spec));
    ASSIGN_OR_RETURN(departures_, DeparturePlan::Parse(code.departures, code.spec.n, code.spec.seed));
    for (int64_t p : attrs.at("peers")->list().i()) peers_.push_back(static_cast<int>(p));
    if (static_cast<int>(peers_.size()) != code.spec.n) {
      return absl::FailedPreconditionError(
          absl::StrCat(node.name(), ": ", peers_.size(), " peers for n=", code.spec.n, " coded partitions"));
    }
    cols_ = attrs.at("cols")->i();
    return absl::OkStatus();
  }

  void ComputeAsync(OpKernelContext* ctx, std::function<void(absl::Status)> done) override {
    if (!ctx->step().training) return done(absl::FailedPreconditionError("coded plans evaluate with the model itself"));
    PointToPointChannel* p2p = ctx->point_to_point();
    if (p2p == nullptr) return done(absl::FailedPreconditionError("CodedGather needs its workers: run with --workers"));
    const int64_t round = ctx->step().step;
    const int k = code_.spec().k;
    const int64_t rows = ctx->input(0).dim(0);
    const int64_t piece_rows = (rows + k - 1) / k;
    const size_t piece = static_cast<size_t>(piece_rows * cols_);

    std::vector<int> present, gone;
    for (int w = 0; w < static_cast<int>(peers_.size()); ++w) (departures_.Gone(round, w) ? gone : present).push_back(w);
    if (!code_.Decodable(present)) {
      absl::StatusOr<Eigen::MatrixXd> why = code_.Decode(present, Eigen::MatrixXd::Zero(
                                                                        static_cast<Eigen::Index>(present.size()), 1));
      return done(absl::FailedPreconditionError(absl::StrCat(
          "coded round ", round, ": workers ", absl::StrJoin(gone, ","), " (ranks ", RanksOf(gone),
          ") are gone and the ", present.size(), " left cannot decode: ",
          why.ok() ? "their rows of the generator have rank below k" : why.status().message())));
    }
    CodedRoundStats::Global().RecordRound(static_cast<int>(present.size()), static_cast<int>(gone.size()));

    auto state = std::make_shared<Round>();
    auto finish = std::make_shared<std::function<void(absl::Status)>>(std::move(done));
    const absl::Time posted = absl::Now();
    const CollectiveOptions body = BodyOptions(channel_, ctx->step(), *p2p);
    for (int w : present) {
      const int peer = peers_[static_cast<size_t>(w)];
      auto buffer = std::make_shared<std::vector<float>>(piece);
      p2p->Submit([buffer, peer, body](Communicator& comm) { return comm.Recv(absl::MakeSpan(*buffer), peer, body); },
                  [this, ctx, state, finish, buffer, w, peer, rows, piece_rows, posted](absl::Status s) {
                    std::vector<int> decode_rows;
                    std::vector<std::vector<float>> decode_results;
                    {
                      std::lock_guard<std::mutex> lock(state->mu);
                      if (state->finished) return;  // decoded already: not needed
                      if (!s.ok()) {
                        state->finished = true;
                        (*finish)(absl::Status(s.code(), absl::StrCat("receiving worker ", w, "'s coded result from rank ",
                                                                      peer, ": ", s.message())));
                        return;
                      }
                      state->rows.push_back(w);
                      state->results.push_back(std::move(*buffer));
                      if (!code_.Decodable(state->rows)) return;
                      state->finished = true;
                      decode_rows = state->rows;
                      decode_results = std::move(state->results);
                    }
                    CodedRoundStats::Global().RecordAnswers(static_cast<int>(decode_rows.size()),
                                                             absl::Now() - posted);
                    (*finish)(DecodeInto(ctx, decode_rows, decode_results, rows, piece_rows));
                  });
    }
  }

 private:
  std::string RanksOf(const std::vector<int>& workers) const {
    std::vector<int> ranks;
    for (int w : workers) ranks.push_back(peers_[static_cast<size_t>(w)]);
    return absl::StrJoin(ranks, ",");
  }

  // Solves for the k partitions' results and writes them, partition after
  // partition, into the output's `rows` rows (the last partition's padding
  // cut).
  absl::Status DecodeInto(OpKernelContext* ctx, const std::vector<int>& coded_rows,
                          const std::vector<std::vector<float>>& results, int64_t rows, int64_t piece_rows) const {
    const absl::Time start = absl::Now();
    const Eigen::Index width = static_cast<Eigen::Index>(piece_rows * cols_);
    Eigen::MatrixXd received(static_cast<Eigen::Index>(coded_rows.size()), width);
    for (size_t r = 0; r < results.size(); ++r) {
      for (Eigen::Index i = 0; i < width; ++i) received(static_cast<Eigen::Index>(r), i) = results[r][i];
    }
    ASSIGN_OR_RETURN(Eigen::MatrixXd partitions, code_.Decode(coded_rows, received));
    ASSIGN_OR_RETURN(Tensor * out, ctx->AllocateOutput(0));
    float* y = out->data<float>();
    const int64_t total = rows * cols_;
    for (Eigen::Index j = 0; j < partitions.rows(); ++j) {
      const int64_t begin = j * width;
      for (Eigen::Index i = 0; i < width && begin + i < total; ++i) y[begin + i] = static_cast<float>(partitions(j, i));
    }
    CodedRoundStats::Global().RecordDecode(absl::Now() - start);
    return absl::OkStatus();
  }

  int64_t channel_ = -1;
  LinearCode code_;
  DeparturePlan departures_;
  std::vector<int> peers_;
  int64_t cols_ = 0;
};

NEREID_REGISTER_KERNEL("CodedSend", kCpu, DT_FLOAT, CodedSendKernel);
NEREID_REGISTER_KERNEL("CodedGather", kCpu, DT_FLOAT, CodedGatherKernel);

}  // namespace
}  // namespace nereid
