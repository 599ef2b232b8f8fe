// Fuzzing of every parser that reads what a user or a peer hands Nereid:
// ONNX models, npz arrays, CSV tables, checkpoints, the identities ranks
// exchange, signed rendezvous values, and the TCP store's protocol (the
// graph file's own parser has graph_loader_fuzz_test). Each target starts
// from valid seeds, mutates them (tests/fuzz/mutator.h), keeps inputs that
// parse as further seeds, and checks that every input either parses or
// yields a non-empty error, and that no single allocation exceeds
// kAllocationBound (inputs are at most a few KiB: anything bigger is sized
// by a field the input controls). Inputs under tests/fuzz/regressions/TARGET/
// (found by earlier runs) are replayed first.
//
// Runs a short slice in the test suite; a campaign:
//   bazel test --config=asan //tests:parser_fuzz_test --test_timeout=3600
//     --test_env=NEREID_FUZZ_ITERATIONS=1000000
//     --test_env=NEREID_FUZZ_ITERATIONS_STORE=20000 --test_output=streamed
// (NEREID_FUZZ_ITERATIONS_<TARGET> sets one target's count) prints each
// target's executions; a failing input is written to
// $TEST_UNDECLARED_OUTPUTS_DIR (keep it under regressions/).

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo_test_world.h"
#include "comm/run_token.h"
#include "comm/store_handshake.h"
#include "comm/tcp_store.h"
#include "comm/worker_identity.h"
#include "core/npz_file.h"
#include "core/tensor.h"
#include "data/csv_dataset.h"
#include "graph/onnx/onnx_import.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint.h"
#include "tests/fuzz/mutator.h"

// Every allocation of this binary passes here: the largest one made while a
// target runs is checked against the bound.
namespace {
std::atomic<bool> tracking{false};
std::atomic<size_t> largest{0};

void* Allocate(size_t n) {
  if (tracking.load(std::memory_order_relaxed)) {
    size_t seen = largest.load(std::memory_order_relaxed);
    while (n > seen && !largest.compare_exchange_weak(seen, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

// The input being parsed, written to `crash_fd` if the process dies on it
// (AddressSanitizer's death callback, or a fatal signal without it), so that
// a crash leaves its input behind for fuzz/regressions/.
const std::string* current_input = nullptr;
int crash_fd = -1;

void DumpCurrentInput() {
  if (crash_fd < 0 || current_input == nullptr) return;
  const char* p = current_input->data();
  size_t left = current_input->size();
  while (left > 0) {
    const ssize_t w = ::write(crash_fd, p, left);
    if (w <= 0) break;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

void OnFatalSignal(int signal) {
  DumpCurrentInput();
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void CatchCrashes() {
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(DumpCurrentInput);
  for (int signal : {SIGSEGV, SIGFPE, SIGBUS, SIGABRT, SIGILL}) std::signal(signal, OnFatalSignal);
}
}  // namespace

void* operator new(size_t n) { return Allocate(n); }
void* operator new[](size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace nereid {
namespace {

// Inputs are seeds of at most a few KiB plus mutations: an allocation above
// this was sized by a length or shape field the input controls.
constexpr size_t kAllocationBound = size_t{64} << 20;
constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

struct Target {
  std::string name;
  std::vector<std::string> seeds;
  std::vector<std::string> dictionary;
  // Parses one input: OK, or an error that must say something.
  std::function<absl::Status(const std::string&)> parse;
  int suite_iterations = 300;
  // A server, not a parser: every input must leave it serving (OK).
  bool must_survive = false;
};

// Runs one target; returns the executions made.
int64_t Fuzz(const Target& target, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> pool = target.seeds;
  int64_t executions = 0, parsed = 0;
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string crash_path =
      absl::StrCat(outputs != nullptr ? outputs : "/tmp", "/", target.name, "-crashing-input");
  crash_fd = ::open(crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto run = [&](const std::string& input) -> bool {
    largest = 0;
    current_input = &input;
    tracking = true;
    const absl::Status status = target.parse(input);
    tracking = false;
    current_input = nullptr;
    ++executions;
    const bool bounded = largest.load() <= kAllocationBound;
    const bool explained = target.must_survive ? status.ok() : status.ok() || !status.message().empty();
    if (!bounded || !explained) {
      const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
      const std::string path = absl::StrCat(out != nullptr ? out : "/tmp", "/", target.name, "-failing-input");
      WriteBytes(path, input);
      ADD_FAILURE() << target.name << ": "
                    << (!bounded              ? absl::StrCat("an allocation of ", largest.load(), " bytes")
                        : target.must_survive ? absl::StrCat("the server stopped serving: ", status.message())
                                              : std::string("an error without a message"))
                    << " (input written to " << path << ")";
      return false;
    }
    if (status.ok()) {
      ++parsed;
      if (pool.size() < 64) pool.push_back(input);
    }
    return true;
  };
  const std::filesystem::path regressions = std::filesystem::path("tests/fuzz/regressions") / target.name;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(regressions, ec)) {
    if (!run(ReadBytes(entry.path().string()))) return executions;
  }
  for (const std::string& s : target.seeds) {
    const absl::Status seeded = target.parse(s);
    EXPECT_TRUE(seeded.ok()) << target.name << ": a seed fails: " << seeded;
  }
  const int iterations = testing::FuzzIterations(target.suite_iterations, target.name);
  for (int i = 0; i < iterations; ++i) {
    if (!run(testing::Mutate(pool[rng() % pool.size()], rng, target.dictionary))) break;
  }
  ::close(crash_fd);
  crash_fd = -1;
  std::remove(crash_path.c_str());  // nothing crashed
  std::printf("%s: %lld executions, %lld parsed\n", target.name.c_str(), static_cast<long long>(executions),
              static_cast<long long>(parsed));
  if (!target.must_survive) {
    EXPECT_LT(parsed, executions) << target.name << ": no mutation was refused";
  }
  return executions;
}

Target OnnxTarget() {
  Target t{"onnx", {}, {"\x08", "\x12", "\x1a", "\x22", "\x3a", "\x42", "Relu", "Reshape", "Gather", "LSTM"}, nullptr,
           200};
  for (const char* test : {"test_relu", "test_gemm_default_no_bias", "test_reshape_reordered_all_dims",
                           "test_gather_0", "test_conv_with_strides_padding", "test_lstm_defaults",
                           "test_layer_normalization_2d_axis0", "test_transpose_default"}) {
    const std::string bytes = ReadBytes(absl::StrCat("/usr/share/libonnx-testdata/data/node/", test, "/model.onnx"));
    if (!bytes.empty()) t.seeds.push_back(bytes);
  }
  t.parse = [](const std::string& bytes) -> absl::Status {
    onnx::ModelProto model;
    if (!model.ParseFromString(bytes)) return absl::InvalidArgumentError("not an ONNX model");
    OnnxImportOptions options;
    options.forward_only = true;  // the node tests' models have no classifier to train
    return ImportOnnxModel(model, options, "fuzz.onnx").status();
  };
  // Seeds are models that import (ONNX's node tests include ops Nereid lacks).
  std::vector<std::string> importable;
  for (const std::string& seed : t.seeds) {
    if (t.parse(seed).ok()) importable.push_back(seed);
  }
  EXPECT_GE(importable.size(), 3u) << "ONNX seeds that import";
  t.seeds = importable;
  return t;
}

Target NpzTarget() {
  const std::string path = TempPath("fuzz.npz");
  auto images = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  auto labels = Tensor::FromVector({2}, {0, 1});
  EXPECT_TRUE(WriteNpz(path, {{"images", *images}, {"labels", *labels}}).ok());
  Target t{"npz", {ReadBytes(path)}, {"PK\x03\x04", "\x93NUMPY", "'descr': '<f4'", "'shape': (", "<i8", "True"},
           nullptr};
  t.parse = [path](const std::string& bytes) -> absl::Status {
    WriteBytes(path, bytes);
    return ReadNpz(path).status();
  };
  return t;
}

Target CsvTarget() {
  const std::string dir = TempPath("fuzz_csv");
  std::filesystem::create_directories(dir);
  Target t{"csv", {"x1,label,x2\n0.5,1,2\n-1,0,3.25\n", "1,2,0\r\n3,4,1\r\n5,6,2\n"}, {",", "\n", "label", "nan", "1e999", "-0"},
           nullptr};
  t.parse = [dir](const std::string& text) -> absl::Status {
    WriteBytes(dir + "/train.csv", text);
    return data::LoadCsvDataset(dir, "train").status();
  };
  return t;
}

Target CheckpointTarget() {
  const std::string dir = TempPath("fuzz_ckpt");
  Checkpoint c;
  c.epochs_completed = 1;
  c.step = 8;
  c.run_identity = "plan=abc;workers=2";
  c.tensors.emplace_back("fc/w", *Tensor::FromVector({2, 2}, {1, 2, 3, 4}));
  c.tensors.emplace_back("fc/b", *Tensor::FromVector({2}, {0.5f, -1}));
  EXPECT_TRUE(SaveCheckpoint(dir, c).ok());
  const std::string file = absl::StrCat(dir, "/", CheckpointFileName(c));
  Target t{"checkpoint", {ReadBytes(file)}, {"fc/w", "\xff\xff\xff\x7f", "\x00\x00\x00\x00"}, nullptr};
  const std::string path = TempPath("fuzz.ckpt");
  t.parse = [path](const std::string& bytes) -> absl::Status {
    WriteBytes(path, bytes);
    return ReadCheckpointFile(path).status();
  };
  return t;
}

Target IdentityTarget() {
  const WorkerIdentity id{"0.9", "99ff0012", 4, "batch=32;seed=0;dataset=fashion-mnist"};
  Target t{"identity", {EncodeIdentity(id)}, {"\n", "=", "\\x", "\\", "world=", "nereid-identity v2\n"}, nullptr, 2000};
  t.parse = [](const std::string& text) { return DecodeIdentity(text).status(); };
  return t;
}

Target SignedValueTarget() {
  Target t{"signed_value",
           {SignValue(kToken, "nereid/run/ident/1", "payload")},
           {"\nmac ", "none", "00", "ff"},
           nullptr,
           2000};
  t.parse = [](const std::string& value) {
    return OpenSignedValue(kToken, "nereid/run/ident/1", value, "rank 1", "rank 0").status();
  };
  return t;
}

// The TCP store's server, on loopback: the handshake (a stranger's bytes)
// and, after it, requests (an authenticated client's). The target is the
// server's survival: after every input it still answers a real client.
Target StoreTarget() {
  static const int port = testing::FreeLoopbackPort();
  EXPECT_TRUE(ServeTcpStore("127.0.0.1", port, kToken).ok());
  // 'A' + a request: the harness answers the challenge properly first. 'H' +
  // bytes: sent in place of the answer.
  std::string set = "AS";
  for (const std::string& field : {std::string("key"), std::string("value")}) {
    set += std::string(1, static_cast<char>(field.size())) + std::string(3, '\0') + field;
  }
  // Requests hold NUL bytes: built with their lengths, not from C strings.
  const std::string check("AC\x01\0\0\0\x03\0\0\0key", 14), get("AG\x03\0\0\0key", 9);
  Target t{"store", {set, check, get, "H" + std::string(49, 'T')},
           {"S", "G", "C", "\xff\xff\xff\xff"}, nullptr, 100, /*must_survive=*/true};
  t.parse = [](const std::string& input) -> absl::Status {
    const int fd = testing::DialLoopback(port);
    if (fd < 0) return absl::InternalError("the store no longer accepts connections");
    const timeval timeout = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string challenge(store_handshake::kChallengeBytes, '\0');
    recv(fd, challenge.data(), challenge.size(), MSG_WAITALL);
    const std::string bytes = input.empty() ? "" : input.substr(1);
    if (!input.empty() && input[0] == 'A') {
      const std::string server_nonce = challenge.substr(store_handshake::kMagic.size());
      const std::string client_nonce(store_handshake::kNonceBytes, 'n');
      std::string accept(store_handshake::kAcceptBytes, '\0');
      const std::string answer = store_handshake::Answer(kToken, server_nonce, client_nonce);
      send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      recv(fd, accept.data(), accept.size(), MSG_WAITALL);
    }
    send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);  // the server sees the end of the request at once
    char sink[4096];
    while (recv(fd, sink, sizeof(sink), 0) > 0) {
    }
    close(fd);
    // The server still serves an honest client.
    auto client = TcpStoreClient::Connect("127.0.0.1", port, kToken, std::chrono::seconds(5));
    if (!client.ok()) return client.status();
    try {
      (*client)->check({"key"});
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
    return absl::OkStatus();
  };
  return t;
}

TEST(ParserFuzzTest, EveryParserRefusesWhatItCannotRead) {
  CatchCrashes();
  int64_t total = 0;
  uint64_t seed = 20261129;
  for (const Target& target : {OnnxTarget(), NpzTarget(), CsvTarget(), CheckpointTarget(), IdentityTarget(),
                               SignedValueTarget(), StoreTarget()}) {
    ASSERT_FALSE(target.seeds.empty()) << target.name;
    total += Fuzz(target, seed++);
  }
  std::printf("parser fuzzing: %lld executions in all\n", static_cast<long long>(total));
}

}  // namespace
}  // namespace nereid
