#include "comm/launch_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace nereid {
namespace {

EnvGetter FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void ExpectError(int rank, int world, std::map<std::string, std::string> vars, const std::string& fragment) {
  auto info = ResolveLaunch(rank, world, FakeEnv(vars));
  ASSERT_FALSE(info.ok()) << fragment;
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(info.status().message()).find(fragment), std::string::npos) << info.status();
}

TEST(LaunchEnvTest, ExplicitValuesWin) {
  auto info = ResolveLaunch(1, 3, FakeEnv({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->world, 3);
  EXPECT_EQ(info->source, "explicit");
  EXPECT_EQ(info->run_id, "default");
}

TEST(LaunchEnvTest, LaunchersInOrder) {
  const std::map<std::string, std::string> all = {
      {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"},
      {"SLURM_NTASKS", "2"},         {"RANK", "0"},                  {"WORLD_SIZE", "8"}};
  auto mpi = ResolveLaunch(-1, -1, FakeEnv(all));
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->source, "mpirun");
  EXPECT_EQ(mpi->rank, 2);
  EXPECT_EQ(mpi->world, 4);

  auto slurm = ResolveLaunch(-1, -1, FakeEnv({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "0"}}));
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->source, "slurm");
  EXPECT_EQ(slurm->rank, 1);
  EXPECT_EQ(slurm->world, 2);

  auto torch = ResolveLaunch(-1, -1,
                             FakeEnv({{"RANK", "3"},
                                      {"WORLD_SIZE", "8"},
                                      {"MASTER_ADDR", "node07"},
                                      {"MASTER_PORT", "29500"},
                                      {"TORCHELASTIC_RUN_ID", "job-42"}}));
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_EQ(torch->source, "torchrun");
  EXPECT_EQ(torch->rank, 3);
  EXPECT_EQ(torch->world, 8);
  EXPECT_EQ(torch->master_addr, "node07");
  EXPECT_EQ(torch->master_port, 29500);
  EXPECT_EQ(torch->run_id, "job-42");
}

TEST(LaunchEnvTest, MixesExplicitAndEnvironment) {
  auto info = ResolveLaunch(-1, 4, FakeEnv({{"SLURM_PROCID", "3"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->world, 4);
  EXPECT_EQ(info->source, "explicit+slurm");
}

TEST(LaunchEnvTest, RunIdPreference) {
  auto info = ResolveLaunch(0, 1, FakeEnv({{"NEREID_RUN_ID", "mine"}, {"SLURM_JOB_ID", "77"}}));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->run_id, "mine");
  info = ResolveLaunch(0, 1, FakeEnv({{"SLURM_JOB_ID", "77"}}));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->run_id, "77");
}

TEST(LaunchEnvTest, ClearErrors) {
  ExpectError(-1, -1, {}, "none of OMPI_COMM_WORLD_RANK, SLURM_PROCID, RANK is set");
  ExpectError(-1, -1, {{"SLURM_PROCID", "0"}}, "SLURM_NTASKS is not set");
  ExpectError(-1, -1, {{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one' is not an integer");
  ExpectError(-1, -1, {{"RANK", "0"}, {"WORLD_SIZE", "2x"}}, "WORLD_SIZE='2x' is not an integer");
  ExpectError(-1, -1, {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
              "rank 4 (OMPI_COMM_WORLD_RANK) is outside 0..3 for world size 4 (OMPI_COMM_WORLD_SIZE)");
  ExpectError(-1, -1, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "world size 0 (WORLD_SIZE) must be at least 1");
  ExpectError(-1, -1, {{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "rank -1 (RANK) is outside 0..1");
  ExpectError(2, 2, {}, "rank 2 (explicit rank) is outside 0..1");
  ExpectError(0, 1, {{"MASTER_PORT", "http"}}, "MASTER_PORT='http'");
}

}  // namespace
}  // namespace nereid
