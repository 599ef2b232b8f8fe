#ifndef NEREID_RUNTIME_DATA_PARALLEL_GROUP_H_
#define NEREID_RUNTIME_DATA_PARALLEL_GROUP_H_

// One rank's membership in a distributed run: the world's communicator (Gloo
// over TCP, met through the rendezvous store) and the collective engine the
// plan's AllReduce buckets go through; a communicator and two engines (steps,
// evaluation) for each process group the plan declares (its records' groups:
// a model-parallel group, a shard's replicas); and what the
// training driver itself needs from the other ranks: identical starting
// parameters, and sums of metrics.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "graph/ir.h"
#include "schedulers/collective_engine.h"
#include "schedulers/executor.h"
#include "schedulers/point_to_point_engine.h"

namespace nereid {

struct GroupOptions {
  int rank = 0;
  int world = 1;
  std::string rendezvous;  // "file:DIR" or "redis://HOST:PORT"
  std::string run_id = "default";  // keeps runs sharing a store apart
  std::string token;               // the run's secret (comm/run_token.h); "" for none
  std::string hostname = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);
  // Must be equal on every rank (the plan and the run's settings); a rank
  // that differs is refused at the rendezvous.
  std::string plan_fingerprint;
  // The run's settings ("key=value;..."), compared key by key.
  std::string settings;
  // Every communicator wrapped in the message verifier.
  bool verify_messages = false;
  // The communicator backend (comm/communicator_factory.h): "gloo", "shm" or "hierarchical".
  std::string backend = "gloo";
};

class DataParallelGroup {
 public:
  // Connects to the other ranks; `graph` is the plan (its AllReduce buckets
  // fix the engine's per-step order).
  static absl::StatusOr<std::unique_ptr<DataParallelGroup>> Join(const Graph& graph, const GroupOptions& options);

  // Gives the executor this rank's engines (world and groups) and its place
  // in each group (sharded parameters take their block by it).
  void ConfigureExecutor(ExecutorOptions& options);
  // Every engine's next key is (step, 0): before the first step.
  void StartAt(int64_t step);
  // The evaluation engines start over: before each evaluation pass (its
  // batches are their steps).
  void StartEvaluation();
  // Records every engine's collectives on the trace (null: none).
  void SetTrace(TraceRecorder* trace);
  ~DataParallelGroup();

  int rank() const { return communicator_->rank(); }
  int world() const { return communicator_->world(); }
  CollectiveEngine* engine() { return engine_.get(); }
  // The time the world's collectives spent, and the part of it codecs spent
  // encoding and decoding: the world engine's, and its host share's where
  // the world is split across a device and the host.
  absl::Duration world_busy_time() const;
  absl::Duration world_codec_time() const;
  Communicator& communicator() { return *communicator_; }
  // Bytes this rank moved on the world communicator and every group's.
  TrafficCounters traffic() const;

  // Broadcasts rank 0's parameters and checks they equal this rank's: every
  // rank must start from identical values (same seed, same checkpoint). An
  // error names the first parameter that differs. Per-rank state (names in
  // `per_rank`: error-feedback residuals) is skipped.
  absl::Status CheckIdenticalState(const Executor& executor, const absl::flat_hash_set<std::string>& per_rank);

  // Gathers every rank's StateFingerprint and fails, naming `step` and the
  // ranks whose parameters differ from rank 0's, unless all are equal. Only
  // between steps (nothing in flight). A second call at the same step (a
  // checkpoint, then the end of the run) compares nothing new and returns OK.
  absl::Status CheckSameState(const Executor& executor, const absl::flat_hash_set<std::string>& per_rank,
                              int64_t step);

  // The collective running now, on the world's engine, a group's engine or
  // the driver ("allreduce step=12 bucket=0", "model step=12 bucket=1",
  // "sum_metrics"), if any: a rank waiting there waits for its peers, and
  // says so, so the launcher blames the rank it waits for (thread-safe).
  std::optional<std::string> WaitingFor() const;

  // Sums `values` over the ranks (in place). Only between steps.
  absl::Status SumAcrossRanks(std::vector<double>& values);

  // A fingerprint of the parameters (FNV-1a of their bytes) except per-rank
  // state, for tests that compare ranks.
  static uint64_t StateFingerprint(const Executor& executor, const absl::flat_hash_set<std::string>& per_rank);

  // The Parameters each rank keeps its own value of (attribute per_rank).
  static absl::flat_hash_set<std::string> PerRankState(const Graph& graph);

  // The per-rank Parameters that are running statistics (batch norm's, the
  // state an op updates) of a replicated model: every rank holds the whole
  // tensor, so their average across the ranks means something.
  static std::vector<std::string> RunningStatistics(const Graph& graph);

  // The ranks' average of each of `tensors` (float32 state, by name), in one
  // sum, flattened in order; with `adopt`, each becomes its average in
  // `executor`.
  absl::StatusOr<std::vector<double>> AverageAcrossRanks(Executor& executor,
                                                         const std::vector<std::pair<std::string, Tensor>>& tensors,
                                                         bool adopt);

 private:
  DataParallelGroup() = default;
  uint32_t NextDriverTag() { return kDriverTagBase + driver_calls_++; }

  // Tags of the driver's own collectives, above any bucket number.
  static constexpr uint32_t kDriverTagBase = 1u << 20;
  struct ProcessGroup {
    std::string name;
    int group_rank = 0;
    std::unique_ptr<Communicator> communicator;
    std::unique_ptr<CollectiveEngine> steps, evaluation;  // destroyed before the communicator
  };
  std::unique_ptr<Communicator> communicator_;
  // NCCL, for collectives placed on a GPU (place(device=cuda, comm=device));
  // the world engine then runs on it. Null otherwise.
  std::unique_ptr<Communicator> device_communicator_;
  std::unique_ptr<CollectiveEngine> engine_;
  // Send and Recv transfers on the world communicator.
  std::unique_ptr<PointToPointEngine> point_to_point_;
  std::vector<ProcessGroup> groups_;
  absl::Duration timeout_;
  uint32_t driver_calls_ = 0;
  int64_t checked_step_ = -1;  // the step CheckSameState last compared
  std::atomic<const char*> driver_collective_{nullptr};
  // Marks a driver collective as running while it lives.
  class DriverCollective {
   public:
    DriverCollective(DataParallelGroup* group, const char* what) : group_(group) { group_->driver_collective_ = what; }
    ~DriverCollective() { group_->driver_collective_ = nullptr; }

   private:
    DataParallelGroup* group_;
  };
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_DATA_PARALLEL_GROUP_H_
