#ifndef NEREID_COMPRESS_CODEC_TEST_UTIL_H_
#define NEREID_COMPRESS_CODEC_TEST_UTIL_H_

// Runs a codec on `world` simulated ranks in one process: one thread per
// rank, collectives through shared memory (InProcessWorld). Real
// communicators are tested in tests/distributed/.

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compress/codec.h"
#include "gtest/gtest.h"

namespace nereid {
namespace testing_codec {

class InProcessWorld {
 public:
  explicit InProcessWorld(int world) : world_(world), blocks_(world) {}

  class Comm : public CodecComm {
   public:
    Comm(InProcessWorld* w, int rank) : w_(w), rank_(rank) {}
    int rank() const override { return rank_; }
    int world() const override { return w_->world_; }
    absl::Status AllReduceSum(absl::Span<float> data) override {
      std::vector<float> all = w_->Exchange(rank_, data);
      std::fill(data.begin(), data.end(), 0.0f);
      for (int r = 0; r < w_->world_; ++r) {  // rank order: the same sum everywhere
        for (size_t i = 0; i < data.size(); ++i) data[i] += all[r * data.size() + i];
      }
      return absl::OkStatus();
    }
    absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override {
      std::vector<float> all = w_->Exchange(rank_, in);
      if (out.size() != all.size()) return absl::InternalError("allgather size");
      std::memcpy(out.data(), all.data(), all.size() * sizeof(float));
      return absl::OkStatus();
    }

   private:
    InProcessWorld* w_;
    int rank_;
  };

  // Every rank's block, concatenated in rank order, once all have arrived.
  std::vector<float> Exchange(int rank, absl::Span<const float> mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    blocks_[rank].assign(mine.begin(), mine.end());
    if (++arrived_ == world_) {
      result_.clear();
      for (const auto& b : blocks_) result_.insert(result_.end(), b.begin(), b.end());
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    return result_;  // copied before anyone can start the next exchange's result
  }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<float>> blocks_;
  std::vector<float> result_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

// One codec per rank, with its state, stepped together.
class SimulatedRanks {
 public:
  SimulatedRanks(const std::string& method, const std::vector<int64_t>& dims, int world,
                 std::map<std::string, std::string> options = {}, int64_t layer = 0)
      : world_(world), dims_(dims) {
    elements_ = ElementCount(dims);
    for (int r = 0; r < world; ++r) {
      absl::StatusOr<std::unique_ptr<GradientCodec>> codec = CodecRegistry::Global().Create(method);
      EXPECT_TRUE(codec.ok()) << codec.status();
      absl::Status s = (*codec)->Init(dims, CodecOptions(options));
      EXPECT_TRUE(s.ok()) << s;
      std::vector<std::vector<float>> state;
      for (const CodecStateSpec& spec : (*codec)->State()) {
        state.emplace_back(ElementCount(spec.dims), 0.0f);
      }
      states_.push_back(std::move(state));
      codecs_.push_back(*std::move(codec));
    }
    step_.layer = layer;
    step_.seed = 7;
  }

  // Averages grads[r] (one per rank); returns each rank's average.
  std::vector<std::vector<float>> Step(const std::vector<std::vector<float>>& grads) {
    InProcessWorld world(world_);
    std::vector<std::vector<float>> out(world_, std::vector<float>(elements_));
    std::vector<absl::Status> status(world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r) {
      threads.emplace_back([&, r] {
        InProcessWorld::Comm comm(&world, r);
        std::vector<absl::Span<float>> state;
        for (auto& s : states_[r]) state.push_back(absl::MakeSpan(s));
        status[r] = codecs_[r]->Average(step_, grads[r], state, absl::MakeSpan(out[r]), comm);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world_; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    ++step_.step;
    return out;
  }

  GradientCodec& codec(int rank) { return *codecs_[rank]; }
  std::vector<std::vector<float>>& state(int rank) { return states_[rank]; }
  int64_t elements() const { return elements_; }
  void set_step(int64_t step) { step_.step = step; }

 private:
  int world_;
  std::vector<int64_t> dims_;
  int64_t elements_ = 0;
  std::vector<std::unique_ptr<GradientCodec>> codecs_;
  std::vector<std::vector<std::vector<float>>> states_;
  CodecStep step_;
};

// Normal(0, 1) values from a fixed seed.
inline std::vector<float> RandomGradient(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> g(n);
  for (float& v : g) v = normal(random);
  return g;
}

// ||got - want|| / ||want||, in double.
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(err / norm);
}

// Gram-Schmidt on the columns of the row-major rows x cols matrix `a`.
inline void OrthonormalizeColumns(std::vector<double>& a, int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t l = 0; l < j; ++l) {
      double dot = 0;
      for (int64_t i = 0; i < rows; ++i) dot += a[i * cols + l] * a[i * cols + j];
      for (int64_t i = 0; i < rows; ++i) a[i * cols + j] -= dot * a[i * cols + l];
    }
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += a[i * cols + j] * a[i * cols + j];
    for (int64_t i = 0; i < rows; ++i) a[i * cols + j] /= std::sqrt(norm);
  }
}

}  // namespace testing_codec
}  // namespace nereid

#endif  // NEREID_COMPRESS_CODEC_TEST_UTIL_H_
