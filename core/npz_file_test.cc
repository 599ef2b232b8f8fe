#include "core/npz_file.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/npy_format.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST(NpyFormat, RoundTripsEveryDtypeAndRank) {
  Tensor f = *Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor i = *Tensor::Allocate(DT_INT64, {4});
  for (int k = 0; k < 4; ++k) i.data<int64_t>()[k] = -k * 1000000000000LL;
  Tensor s = *Tensor::FromVector({}, {2.5f});
  for (const Tensor& t : {f, i, s}) {
    std::string bytes = *EncodeNpy(t);
    EXPECT_EQ((bytes.size() - t.num_bytes()) % 64, 0u) << "data is 64-byte aligned";
    absl::StatusOr<Tensor> back = DecodeNpy(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->BitwiseEquals(t)) << t.DebugString();
  }
}

TEST(NpyFormat, RefusesWhatItCannotRead) {
  EXPECT_NE(DecodeNpy("hello").status().message().find("magic"), std::string::npos);
  std::string bytes = *EncodeNpy(*Tensor::FromVector({2}, {1, 2}));
  std::string truncated = bytes.substr(0, bytes.size() - 1);
  EXPECT_NE(DecodeNpy(truncated).status().message().find("needs 8"), std::string::npos);
  std::string big_endian = bytes;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  EXPECT_NE(DecodeNpy(big_endian).status().message().find(">f4"), std::string::npos);
  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_NE(DecodeNpy(fortran).status().message().find("Fortran"), std::string::npos);
}

TEST(NpzFile, WritesAnArchiveThatReadsBack) {
  const std::string path = TempPath("weights.npz");
  std::vector<std::pair<std::string, Tensor>> arrays = {
      {"fc1/weight", *Tensor::FromVector({2, 2}, {1, -2, 3, -4})},
      {"fc1/bias", *Tensor::FromVector({2}, {0.5f, 0.25f})},
  };
  ASSERT_TRUE(WriteNpz(path, arrays).ok());
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> back = ReadNpz(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ((*back)[k].first, arrays[k].first);
    EXPECT_TRUE((*back)[k].second.BitwiseEquals(arrays[k].second));
  }
  EXPECT_EQ(ReadNpz(TempPath("missing.npz")).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(TempPath("junk.npz")) << "not a zip";
  EXPECT_EQ(ReadNpz(TempPath("junk.npz")).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nereid
