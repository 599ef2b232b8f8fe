#include "comm/abort_signal.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(AbortSignalTest, FireRunsEachRegisteredActionOnceAndLateOnesAtOnce) {
  AbortSignal signal;
  int a = 0, b = 0, gone = 0;
  signal.Register([&] { ++a; });
  const int64_t id = signal.Register([&] { ++gone; });
  signal.Unregister(id);
  EXPECT_FALSE(signal.fired());
  signal.Fire();
  signal.Fire();
  EXPECT_TRUE(signal.fired());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(gone, 0);
  {
    AbortRegistration late(&signal, [&] { ++b; });
    EXPECT_EQ(b, 1);
  }
  AbortRegistration none(nullptr, [&] { ++b; });
  EXPECT_EQ(b, 1);
}

// A waiter registered from another thread is woken by Fire; once its
// registration is gone, Fire cannot touch what it captured.
TEST(AbortSignalTest, FireFromAnotherThreadEndsAWait) {
  for (int round = 0; round < 200; ++round) {
    AbortSignal signal;
    std::atomic<bool> woken{false};
    std::thread waiter([&] {
      AbortRegistration r(&signal, [&] { woken = true; });
      while (!woken) std::this_thread::yield();
    });
    signal.Fire();
    waiter.join();
    EXPECT_TRUE(woken);
  }
}

}  // namespace
}  // namespace nereid
