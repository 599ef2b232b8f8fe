#include "data/batch_loader.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "data/synthetic.h"
#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace {

std::shared_ptr<const Dataset> MakeData(int64_t n) {
  return std::make_shared<const Dataset>(MakeSynthetic(n, 1, 2, 3, 4, /*seed=*/1));
}

std::unique_ptr<BatchLoader> MakeLoader(std::shared_ptr<const Dataset> ds, LoaderOptions opts) {
  absl::StatusOr<std::unique_ptr<BatchLoader>> loader = BatchLoader::Create(std::move(ds), opts);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? std::move(*loader) : nullptr;
}

// All batches of one epoch, checked for internal consistency.
std::vector<Batch> RunEpoch(BatchLoader& loader, const Dataset& ds, int64_t epoch) {
  loader.StartEpoch(epoch);
  std::vector<Batch> batches;
  while (std::optional<Batch> b = loader.Next()) {
    EXPECT_EQ(b->epoch, epoch);
    EXPECT_EQ(b->index_in_epoch, static_cast<int64_t>(batches.size()));
    EXPECT_EQ(b->image_dims, (std::vector<int64_t>{b->size, ds.channels, ds.height, ds.width}));
    EXPECT_EQ(static_cast<int64_t>(b->labels.size()), b->size);
    EXPECT_EQ(static_cast<int64_t>(b->example_indices.size()), b->size);
    EXPECT_EQ(static_cast<int64_t>(b->images.size()), b->size * ds.image_size());
    for (int64_t k = 0; k < b->size; ++k) {
      const int64_t row = b->example_indices[k];
      EXPECT_EQ(b->labels[k], ds.labels[row]);
      EXPECT_TRUE(std::equal(b->images.begin() + k * ds.image_size(),
                             b->images.begin() + (k + 1) * ds.image_size(),
                             ds.images.begin() + row * ds.image_size()));
    }
    batches.push_back(std::move(*b));
  }
  EXPECT_EQ(static_cast<int64_t>(batches.size()), loader.batches_per_epoch());
  EXPECT_FALSE(loader.Next().has_value());  // stays at the end
  return batches;
}

std::vector<int64_t> Order(const std::vector<Batch>& batches) {
  std::vector<int64_t> order;
  for (const Batch& b : batches) {
    order.insert(order.end(), b.example_indices.begin(), b.example_indices.end());
  }
  return order;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

class BatchLoaderPrefetchTest : public ::testing::TestWithParam<int> {};

TEST_P(BatchLoaderPrefetchTest, EachExampleOncePerEpochWithPartialLastBatch) {
  auto ds = MakeData(23);
  LoaderOptions opts;
  opts.batch_size = 5;
  opts.prefetch = GetParam();
  auto loader = MakeLoader(ds, opts);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->batches_per_epoch(), 5);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<Batch> batches = RunEpoch(*loader, *ds, epoch);
    ASSERT_EQ(batches.size(), 5u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(batches[i].size, 5);
    EXPECT_EQ(batches[4].size, 3);
    std::vector<int64_t> order = Order(batches);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, Iota(23));
  }
}

TEST_P(BatchLoaderPrefetchTest, SameSeedSameOrderDifferentEpochDifferentOrder) {
  auto ds = MakeData(40);
  LoaderOptions opts;
  opts.batch_size = 8;
  opts.seed = 42;
  opts.prefetch = GetParam();
  auto a = MakeLoader(ds, opts);
  auto b = MakeLoader(ds, opts);
  opts.seed = 43;
  auto c = MakeLoader(ds, opts);
  ASSERT_TRUE(a && b && c);
  const std::vector<int64_t> a0 = Order(RunEpoch(*a, *ds, 0));
  const std::vector<int64_t> a1 = Order(RunEpoch(*a, *ds, 1));
  // b resumes straight at epoch 1: the order depends on (seed, epoch) only.
  EXPECT_EQ(Order(RunEpoch(*b, *ds, 1)), a1);
  EXPECT_EQ(Order(RunEpoch(*b, *ds, 0)), a0);
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, Iota(40));
  EXPECT_NE(Order(RunEpoch(*c, *ds, 0)), a0);
  EXPECT_EQ(a0, BatchLoader::EpochPermutation(40, 42, 0));
}

TEST_P(BatchLoaderPrefetchTest, ShardsAreDisjointAndCoverTheEpoch) {
  auto ds = MakeData(25);
  for (int world : {2, 3}) {
    std::vector<int64_t> all;
    for (int rank = 0; rank < world; ++rank) {
      LoaderOptions opts;
      opts.batch_size = 4;
      opts.seed = 5;
      opts.rank = rank;
      opts.world = world;
      opts.prefetch = GetParam();
      auto loader = MakeLoader(ds, opts);
      ASSERT_NE(loader, nullptr);
      const std::vector<int64_t> shard = Order(RunEpoch(*loader, *ds, 3));
      EXPECT_EQ(static_cast<int64_t>(shard.size()), loader->shard_size());
      // Rank r takes positions r, r+world, ... of the shared permutation.
      const std::vector<int64_t> perm = BatchLoader::EpochPermutation(25, 5, 3);
      for (size_t i = 0; i < shard.size(); ++i) EXPECT_EQ(shard[i], perm[rank + i * world]);
      all.insert(all.end(), shard.begin(), shard.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, Iota(25)) << "world " << world;
  }
}

TEST_P(BatchLoaderPrefetchTest, DropLast) {
  auto ds = MakeData(23);
  LoaderOptions opts;
  opts.batch_size = 5;
  opts.drop_last = true;
  opts.prefetch = GetParam();
  auto loader = MakeLoader(ds, opts);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->batches_per_epoch(), 4);
  std::vector<Batch> batches = RunEpoch(*loader, *ds, 0);
  ASSERT_EQ(batches.size(), 4u);
  for (const Batch& b : batches) EXPECT_EQ(b.size, 5);
  std::set<int64_t> seen;
  for (int64_t i : Order(batches)) EXPECT_TRUE(seen.insert(i).second) << i;
}

TEST_P(BatchLoaderPrefetchTest, NoShuffleKeepsDatasetOrder) {
  auto ds = MakeData(10);
  LoaderOptions opts;
  opts.batch_size = 3;
  opts.shuffle = false;
  opts.prefetch = GetParam();
  auto loader = MakeLoader(ds, opts);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(Order(RunEpoch(*loader, *ds, 0)), Iota(10));
  EXPECT_EQ(Order(RunEpoch(*loader, *ds, 1)), Iota(10));
}

TEST_P(BatchLoaderPrefetchTest, RestartAndSkipMidEpoch) {
  auto ds = MakeData(64);
  LoaderOptions opts;
  opts.batch_size = 4;
  opts.seed = 9;
  opts.prefetch = GetParam();
  auto loader = MakeLoader(ds, opts);
  ASSERT_NE(loader, nullptr);
  EXPECT_FALSE(loader->Next().has_value());  // no epoch started
  const std::vector<Batch> full = RunEpoch(*loader, *ds, 2);

  loader->StartEpoch(1);
  ASSERT_TRUE(loader->Next().has_value());
  ASSERT_TRUE(loader->Next().has_value());
  // Abandon epoch 1 mid-way; epoch 2 comes out complete and in order.
  EXPECT_EQ(Order(RunEpoch(*loader, *ds, 2)), Order(full));

  loader->StartEpoch(2);
  loader->SkipTo(13);
  std::optional<Batch> b = loader->Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index_in_epoch, 13);
  EXPECT_EQ(b->example_indices, full[13].example_indices);
  int rest = 1;
  while (loader->Next()) ++rest;
  EXPECT_EQ(rest, 3);
  loader->SkipTo(100);
  EXPECT_FALSE(loader->Next().has_value());
}

TEST_P(BatchLoaderPrefetchTest, DestroyMidEpoch) {
  auto ds = MakeData(200);
  for (int consumed = 0; consumed < 4; ++consumed) {
    LoaderOptions opts;
    opts.batch_size = 2;
    opts.prefetch = GetParam();
    auto loader = MakeLoader(ds, opts);
    ASSERT_NE(loader, nullptr);
    loader->StartEpoch(0);
    for (int i = 0; i < consumed; ++i) ASSERT_TRUE(loader->Next().has_value());
    loader.reset();  // joins the producer while it may be mid-batch
  }
  // Destroyed before any epoch and right after a restart.
  LoaderOptions opts;
  opts.batch_size = 2;
  opts.prefetch = GetParam();
  MakeLoader(ds, opts).reset();
  auto loader = MakeLoader(ds, opts);
  ASSERT_NE(loader, nullptr);
  loader->StartEpoch(0);
  loader->StartEpoch(1);
}

INSTANTIATE_TEST_SUITE_P(Prefetch, BatchLoaderPrefetchTest, ::testing::Values(0, 1, 2, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "prefetch" + std::to_string(info.param);
                         });

TEST(BatchLoaderTest, RejectsBadOptions) {
  auto ds = MakeData(5);
  LoaderOptions opts;
  opts.batch_size = 0;
  EXPECT_FALSE(BatchLoader::Create(ds, opts).ok());
  opts.batch_size = 2;
  EXPECT_FALSE(BatchLoader::Create(nullptr, opts).ok());
  opts.rank = 2;
  opts.world = 2;
  EXPECT_FALSE(BatchLoader::Create(ds, opts).ok());
  opts.rank = 0;
  opts.world = 0;
  EXPECT_FALSE(BatchLoader::Create(ds, opts).ok());
  opts.world = 1;
  opts.prefetch = -1;
  EXPECT_FALSE(BatchLoader::Create(ds, opts).ok());
  opts.prefetch = 2;
  opts.rank = 5;
  opts.world = 6;  // more ranks than examples: rank 5 gets nothing
  absl::StatusOr<std::unique_ptr<BatchLoader>> empty = BatchLoader::Create(ds, opts);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(std::string(empty.status().message()).find("leave rank 5 of world 6 nothing"),
            std::string::npos)
      << empty.status();
  opts.rank = 0;
  opts.world = 1;
  opts.batch_size = 6;
  opts.drop_last = true;  // 5 examples, batch 6: no batch at all
  EXPECT_FALSE(BatchLoader::Create(ds, opts).ok());
  auto inconsistent = std::make_shared<Dataset>(MakeSynthetic(5, 1, 2, 3, 4, 1));
  inconsistent->labels.pop_back();
  opts.drop_last = false;
  EXPECT_FALSE(BatchLoader::Create(inconsistent, opts).ok());
}

TEST(BatchLoaderTest, PermutationIsAPermutationAndPinned) {
  std::vector<int64_t> p = BatchLoader::EpochPermutation(1000, 123, 7);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, Iota(1000));
  // Pinned: a change here reorders every resumed or multi-rank run.
  EXPECT_EQ(BatchLoader::EpochPermutation(10, 123, 7),
            (std::vector<int64_t>{0, 9, 4, 8, 2, 1, 3, 6, 7, 5}));
  EXPECT_TRUE(BatchLoader::EpochPermutation(0, 1, 1).empty());
  EXPECT_EQ(BatchLoader::EpochPermutation(1, 1, 1), (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace data
}  // namespace nereid
