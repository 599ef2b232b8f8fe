#ifndef NEREID_DATA_TEST_FILES_H_
#define NEREID_DATA_TEST_FILES_H_

// Test helpers: build IDX / CIFAR-10 byte strings and write them, plain or
// gzip-compressed, under $TEST_TMPDIR.

#include <cstdint>
#include <string>
#include <vector>

namespace nereid {
namespace data {
namespace testing {

// $TEST_TMPDIR/<name> (a fresh subdirectory per test is the caller's choice).
std::string TempPath(const std::string& name);

// Writes `bytes` to `path` uncompressed / gzip-compressed; fails the test on error.
void WritePlain(const std::string& path, const std::string& bytes);
void WriteGz(const std::string& path, const std::string& bytes);

// Gzip-compresses in memory (for corrupting or truncating the stream).
std::string Gzip(const std::string& bytes);

// An IDX file: big-endian magic, dims, then the payload bytes as given.
std::string Idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& payload);

// uint8 pixels/labels as a byte string.
std::string Bytes(const std::vector<int>& values);

// A CIFAR-10 record: label byte then 3072 pixel bytes, pixel i = (seed + i) % 256.
std::string CifarRecord(int label, int seed);

}  // namespace testing
}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_TEST_FILES_H_
