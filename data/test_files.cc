#include "data/test_files.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"

namespace nereid {
namespace data {
namespace testing {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size()) << path;
  ASSERT_EQ(std::fclose(f), 0) << path;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()))
        << path;
  }
  ASSERT_EQ(gzclose(f), Z_OK) << path;
}

std::string Gzip(const std::string& bytes) {
  z_stream zs{};
  // windowBits 15 + 16: gzip wrapper.
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    ADD_FAILURE() << "deflateInit2 failed";
    return "";
  }
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
  zs.avail_out = static_cast<uInt>(out.size());
  const int ret = deflate(&zs, Z_FINISH);
  EXPECT_EQ(ret, Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string out;
  auto put32 = [&out](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  return out + payload;
}

std::string Bytes(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

std::string CifarRecord(int label, int seed) {
  std::string out(1 + 3072, '\0');
  out[0] = static_cast<char>(label);
  for (int i = 0; i < 3072; ++i) out[1 + i] = static_cast<char>((seed + i) % 256);
  return out;
}

}  // namespace testing
}  // namespace data
}  // namespace nereid
