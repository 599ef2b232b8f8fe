#include "data/batch_loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace data {
namespace {

constexpr int kMaxPrefetch = 1024;

uint32_t Lo(uint64_t x) { return static_cast<uint32_t>(x); }
uint32_t Hi(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

// Uniform in [0, range) without modulo bias (rejection as in arc4random_uniform).
uint64_t Bounded(std::mt19937_64& rng, uint64_t range) {
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  uint64_t x;
  do {
    x = rng();
  } while (x < threshold);
  return x % range;
}

}  // namespace

std::vector<int64_t> BatchLoader::EpochPermutation(int64_t num_examples, uint64_t seed,
                                                   int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(num_examples, 0)));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const uint64_t e = static_cast<uint64_t>(epoch);
  std::seed_seq seq{Lo(seed), Hi(seed), Lo(e), Hi(e)};
  std::mt19937_64 rng(seq);
  for (size_t i = perm.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(Bounded(rng, i));  // in [0, i-1]
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

absl::StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(
    std::shared_ptr<const Dataset> dataset, LoaderOptions options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("BatchLoader: null dataset");
  if (absl::Status valid = dataset->Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("BatchLoader: ", valid.message()));
  }
  const std::string who = absl::StrCat("BatchLoader over '", dataset->name, "': ");
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "batch_size must be >= 1, got ", options.batch_size));
  }
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(absl::StrCat(who, "need 0 <= rank < world, got rank ",
                                                   options.rank, " of world ", options.world));
  }
  if (options.prefetch < 0 || options.prefetch > kMaxPrefetch) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "prefetch must be in [0, ", kMaxPrefetch, "], got ", options.prefetch));
  }
  const int64_t n = dataset->num_examples;
  const int64_t shard = options.equal_shards ? n / options.world
                       : n > options.rank  ? (n - options.rank + options.world - 1) / options.world
                                           : 0;
  if (shard == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, n, " examples leave rank ", options.rank,
                                                   " of world ", options.world, " nothing"));
  }
  const int64_t batches = options.drop_last ? shard / options.batch_size
                                            : (shard + options.batch_size - 1) / options.batch_size;
  if (batches == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, "rank ", options.rank, "'s shard of ",
                                                   shard, " examples is smaller than batch_size ",
                                                   options.batch_size, " and drop_last is set"));
  }
  std::unique_ptr<BatchLoader> loader(new BatchLoader(std::move(dataset), options, shard, batches));
  if (options.prefetch > 0) {
    loader->producer_ = std::thread([l = loader.get()] { l->ProducerLoop(); });
  }
  return loader;
}

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options,
                         int64_t shard_size, int64_t batches_per_epoch)
    : dataset_(std::move(dataset)),
      options_(options),
      shard_size_(shard_size),
      batches_per_epoch_(batches_per_epoch) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  producer_cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

std::vector<int64_t> BatchLoader::ShardFor(int64_t epoch) const {
  const int64_t n = dataset_->num_examples;
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = EpochPermutation(n, options_.seed, epoch);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (options_.world == 1) return order;
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(shard_size_));
  for (int64_t p = options_.rank; p < n && static_cast<int64_t>(shard.size()) < shard_size_; p += options_.world) {
    shard.push_back(order[p]);
  }
  return shard;
}

Batch BatchLoader::Assemble(const std::vector<int64_t>& shard, int64_t epoch, int64_t index) const {
  const Dataset& ds = *dataset_;
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, shard.size());
  const int64_t image_size = ds.image_size();
  Batch b;
  b.epoch = epoch;
  b.index_in_epoch = index;
  b.size = end - begin;
  b.image_dims = {b.size, ds.channels, ds.height, ds.width};
  b.images.resize(static_cast<size_t>(b.size * image_size));
  const int64_t per_example = ds.labels_per_example;
  b.labels_per_example = per_example;
  b.labels.resize(static_cast<size_t>(b.size * per_example));
  b.example_indices.assign(shard.begin() + begin, shard.begin() + end);
  for (int64_t k = 0; k < b.size; ++k) {
    const int64_t row = b.example_indices[k];
    std::memcpy(b.images.data() + k * image_size, ds.images.data() + row * image_size,
                static_cast<size_t>(image_size) * sizeof(float));
    std::copy_n(ds.labels.data() + row * per_example, per_example, b.labels.data() + k * per_example);
  }
  return b;
}

void BatchLoader::ProducerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    producer_cv_.wait(lock, [this] {
      return stop_ || (active_ && produce_next_ < batches_per_epoch_ &&
                       static_cast<int64_t>(queue_.size()) < options_.prefetch);
    });
    if (stop_) return;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_;
    const int64_t index = produce_next_++;
    std::shared_ptr<const std::vector<int64_t>> shard = shard_;
    lock.unlock();
    Batch batch = Assemble(*shard, epoch, index);
    lock.lock();
    if (generation != generation_) continue;  // the epoch was restarted or skipped: drop it
    queue_.push_back(std::move(batch));
    consumer_cv_.notify_all();
  }
}

void BatchLoader::StartEpoch(int64_t epoch) {
  auto shard = std::make_shared<const std::vector<int64_t>>(ShardFor(epoch));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    queue_.clear();
    active_ = true;
    epoch_ = epoch;
    shard_ = std::move(shard);
    produce_next_ = 0;
    consume_next_ = 0;
  }
  producer_cv_.notify_all();
}

void BatchLoader::SkipTo(int64_t batch_index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    ++generation_;
    queue_.clear();
    produce_next_ = consume_next_ = std::clamp<int64_t>(batch_index, 0, batches_per_epoch_);
  }
  producer_cv_.notify_all();
}

std::optional<Batch> BatchLoader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!active_ || consume_next_ >= batches_per_epoch_) return std::nullopt;
  if (options_.prefetch == 0) {
    const int64_t index = consume_next_++;
    std::shared_ptr<const std::vector<int64_t>> shard = shard_;
    const int64_t epoch = epoch_;
    lock.unlock();
    return Assemble(*shard, epoch, index);
  }
  consumer_cv_.wait(lock, [this] { return !queue_.empty(); });
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  ++consume_next_;
  lock.unlock();
  producer_cv_.notify_all();
  return batch;
}

}  // namespace data
}  // namespace nereid
