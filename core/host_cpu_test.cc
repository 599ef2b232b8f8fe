#include "core/host_cpu.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

TEST(HostCpuTest, BusyIsUserNiceSystemIrqSoftirqNotSteal) {
  //                  user nice system idle iowait irq softirq steal guest guest_nice
  const std::string stat = "cpu  100 20 30 5000 70 4 6 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
  absl::StatusOr<double> busy = ParseBusyCpuSeconds(stat, "test", 100);
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_DOUBLE_EQ(*busy, (100 + 20 + 30 + 4 + 6) / 100.0);
}

TEST(HostCpuTest, MalformedStatIsAnErrorNamingIt) {
  absl::StatusOr<double> short_line = ParseBusyCpuSeconds("cpu 1 2 3 4 5 6\n", "/x/stat", 100);
  ASSERT_FALSE(short_line.ok());
  EXPECT_THAT(short_line.status().message(), testing::HasSubstr("/x/stat"));
  EXPECT_FALSE(ParseBusyCpuSeconds("cpu 1 2 x 4 5 6 7 8\n", "s", 100).ok());
  EXPECT_FALSE(ParseBusyCpuSeconds("intr 1 2 3 4 5 6 7 8\n", "s", 100).ok());
  EXPECT_FALSE(ParseBusyCpuSeconds("", "s", 100).ok());
}

TEST(HostCpuTest, ThisMachineCountsUp) {
  absl::StatusOr<double> before = HostBusyCpuSeconds();
  ASSERT_TRUE(before.ok()) << before.status();
  volatile double x = 0;
  for (int i = 0; i < 50'000'000; ++i) x = x + 1e-9 * i;  // ~50 ms of work: at least a few ticks
  absl::StatusOr<double> after = HostBusyCpuSeconds();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GT(*after, *before);
  EXPECT_GE(HostCores(), 1);
  EXPECT_FALSE(HostBootId().empty());
}

}  // namespace
}  // namespace nereid
