#ifndef NEREID_DATA_BATCH_LOADER_H_
#define NEREID_DATA_BATCH_LOADER_H_

// Cuts a Dataset into minibatches, epoch by epoch, optionally shuffled,
// sharded across data-parallel ranks, and prefetched by a background thread.
//
// Epoch e visits the examples in a permutation that is a deterministic
// function of (seed, e) only: Fisher-Yates driven by std::mt19937_64 seeded
// from std::seed_seq{seed, e} with an unbiased hand-written bounded draw (no
// implementation-defined std::shuffle or distributions), so every rank and
// every resumed run computes the same order. Without `shuffle` the order is
// 0..N-1. Rank r of `world` takes the positions p of that order with
// p % world == r, so the ranks' shards are disjoint and together cover the
// epoch; it then cuts its shard into consecutive batches of `batch_size`, the
// last one partial unless `drop_last`.
//
// Shards differ in size by at most one example, so when N % world != 0 the
// ranks can disagree on batches_per_epoch() by one (e.g. N=5, world=2,
// batch_size=1 gives 3 and 2). Callers that need lock-step ranks should trim
// the dataset to a multiple of world (Dataset::Truncate) or use drop_last with
// a batch size that divides the smaller shard.
//
// With prefetch > 0 a background thread assembles up to `prefetch` batches
// ahead of Next() into a bounded queue. StartEpoch, SkipTo and the destructor
// may be called at any point, including mid-epoch while the thread is
// assembling: batches of an abandoned epoch are discarded and the thread is
// joined cleanly. The public methods are meant for one consumer thread; they
// are safe against the prefetch thread, not against each other.
//
//   LoaderOptions opts;
//   opts.batch_size = 64;
//   ASSIGN_OR_RETURN(std::unique_ptr<BatchLoader> loader, BatchLoader::Create(dataset, opts));
//   for (int64_t e = 0; e < epochs; ++e) {
//     loader->StartEpoch(e);
//     while (std::optional<Batch> b = loader->Next()) Train(*b);
//   }

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace nereid {
namespace data {

struct Batch {
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;
  int64_t size = 0;                      // examples in this batch
  std::vector<int64_t> image_dims;       // {size, C, H, W}
  std::vector<float> images;             // size * C * H * W, NCHW
  std::vector<int32_t> labels;           // size * labels_per_example
  int64_t labels_per_example = 1;
  std::vector<int64_t> example_indices;  // row of each example in the Dataset
};

struct LoaderOptions {
  int64_t batch_size = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  // This process reads the examples at positions p of the epoch's order with
  // p % world == rank (the order is identical on every rank).
  int rank = 0;
  int world = 1;
  // Every rank reads floor(N / world) examples (the odd ones out are left
  // out), so the ranks' batches have equal sizes: needed where ranks
  // exchange their batches (model-parallel groups).
  bool equal_shards = false;
  // Batches assembled ahead by a background thread; 0 = synchronous.
  int prefetch = 2;
};

class BatchLoader {
 public:
  // InvalidArgument for a null or inconsistent dataset, batch_size < 1,
  // world < 1, rank outside [0, world), prefetch outside [0, 1024], or options
  // that leave this rank no batches (fewer examples than ranks; drop_last with
  // a shard smaller than one batch).
  static absl::StatusOr<std::unique_ptr<BatchLoader>> Create(std::shared_ptr<const Dataset> dataset,
                                                             LoaderOptions options);

  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Batches Next() yields per epoch on this rank.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Examples in this rank's shard per epoch (before drop_last).
  int64_t shard_size() const { return shard_size_; }
  const LoaderOptions& options() const { return options_; }

  // Begins producing epoch `epoch`'s batches, abandoning any epoch in progress.
  void StartEpoch(int64_t epoch);

  // The next batch of the current epoch, blocking until it is ready; nullopt
  // at the end of the epoch or before the first StartEpoch.
  std::optional<Batch> Next();

  // Makes the next Next() return batch `batch_index` of the current epoch
  // (clamped to [0, batches_per_epoch()]), for resuming mid-epoch. No-op
  // before the first StartEpoch.
  void SkipTo(int64_t batch_index);

  // The order in which epoch `epoch` visits the examples 0..num_examples-1
  // when shuffling (before sharding). Deterministic in its arguments only.
  static std::vector<int64_t> EpochPermutation(int64_t num_examples, uint64_t seed, int64_t epoch);

 private:
  BatchLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options, int64_t shard_size,
              int64_t batches_per_epoch);
  std::vector<int64_t> ShardFor(int64_t epoch) const;
  Batch Assemble(const std::vector<int64_t>& shard, int64_t epoch, int64_t index) const;
  void ProducerLoop();

  const std::shared_ptr<const Dataset> dataset_;
  const LoaderOptions options_;
  const int64_t shard_size_;
  const int64_t batches_per_epoch_;

  std::mutex mu_;
  std::condition_variable producer_cv_;  // work to do, or stop
  std::condition_variable consumer_cv_;  // a batch was queued
  bool stop_ = false;                    // guarded by mu_
  bool active_ = false;                  // an epoch was started; guarded by mu_
  uint64_t generation_ = 0;              // bumped by StartEpoch/SkipTo; guarded by mu_
  int64_t epoch_ = 0;                    // guarded by mu_
  std::shared_ptr<const std::vector<int64_t>> shard_;  // guarded by mu_
  int64_t produce_next_ = 0;  // next batch index to assemble; guarded by mu_
  int64_t consume_next_ = 0;  // next batch index Next() returns; guarded by mu_
  std::deque<Batch> queue_;   // batches consume_next_.. in order; guarded by mu_
  std::thread producer_;      // only when options_.prefetch > 0
};

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_BATCH_LOADER_H_
