#include "comm/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace nereid {
namespace {

constexpr uint32_t kMaxKeyBytes = 4 << 10;
constexpr uint32_t kMaxValueBytes = 1 << 20;
constexpr size_t kMaxStoreBytes = size_t{64} << 20;
constexpr int kMaxConnections = 1024;
constexpr auto kPoll = std::chrono::milliseconds(10);
// A server that stops answering mid-request ends the request after this.
constexpr int kReplyTimeoutSeconds = 60;

std::string Address(const std::string& host, int port) {
  const bool bracket = host.find(':') != std::string::npos;
  return absl::StrCat(bracket ? "[" : "", host, bracket ? "]" : "", ":", port);
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, data, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void AppendLength(std::string* out, uint32_t n) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
}

bool ReadLength(int fd, uint32_t* n) {
  unsigned char b[4];
  if (!ReadAll(fd, reinterpret_cast<char*>(b), 4)) return false;
  *n = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
       static_cast<uint32_t>(b[3]) << 24;
  return true;
}

// A length-prefixed string of at most `limit` bytes.
bool ReadString(int fd, uint32_t limit, std::string* out) {
  uint32_t n = 0;
  if (!ReadLength(fd, &n) || n > limit) return false;
  out->resize(n);
  return ReadAll(fd, out->data(), n);
}

// The addresses `host:port` names, for binding (passive) or connecting.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("tcp store ", Address(host, port), ": ", ::gai_strerror(rc)));
  }
  return found;
}

class TcpStoreServer {
 public:
  explicit TcpStoreServer(int listen_fd) : listen_fd_(listen_fd) {}

  void Start() { std::thread([this] { AcceptLoop(); }).detach(); }

 private:
  void AcceptLoop() {
    for (;;) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (connections_ >= kMaxConnections) {
          ::close(fd);
          continue;
        }
        ++connections_;
      }
      std::thread([this, fd] { Serve(fd); }).detach();
    }
  }

  // Answers one client's requests until it closes or sends a malformed one.
  void Serve(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (;;) {
      char op = 0;
      if (!ReadAll(fd, &op, 1)) break;
      std::string reply;
      if (op == 'S') {
        std::string key, value;
        if (!ReadString(fd, kMaxKeyBytes, &key) || !ReadString(fd, kMaxValueBytes, &value)) break;
        std::lock_guard<std::mutex> lock(mu_);
        if (bytes_ + key.size() + value.size() > kMaxStoreBytes) break;
        const bool taken = !data_.emplace(key, value).second;
        if (!taken) bytes_ += key.size() + value.size();
        reply.push_back(taken ? 1 : 0);
      } else if (op == 'G') {
        std::string key;
        if (!ReadString(fd, kMaxKeyBytes, &key)) break;
        std::lock_guard<std::mutex> lock(mu_);
        auto it = data_.find(key);
        reply.push_back(it != data_.end() ? 1 : 0);
        if (it != data_.end()) {
          AppendLength(&reply, static_cast<uint32_t>(it->second.size()));
          reply += it->second;
        }
      } else if (op == 'C') {
        uint32_t n = 0;
        if (!ReadLength(fd, &n) || n > 4096) break;
        std::vector<std::string> keys(n);
        bool ok = true;
        for (std::string& key : keys) ok = ok && ReadString(fd, kMaxKeyBytes, &key);
        if (!ok) break;
        std::lock_guard<std::mutex> lock(mu_);
        bool all = true;
        for (const std::string& key : keys) all = all && data_.contains(key);
        reply.push_back(all ? 1 : 0);
      } else {
        break;
      }
      if (!WriteAll(fd, reply.data(), reply.size())) break;
    }
    ::close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    --connections_;
  }

  const int listen_fd_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::string> data_;
  size_t bytes_ = 0;
  int connections_ = 0;
};

std::mutex servers_mu;
// Servers by address; they live as long as the process.
std::map<std::string, TcpStoreServer*>& Servers() {
  static auto* servers = new std::map<std::string, TcpStoreServer*>();
  return *servers;
}

[[noreturn]] void Fail(const std::string& address, const std::string& what) {
  throw ::gloo::IoException(absl::StrCat("tcp store ", address, ": ", what));
}

}  // namespace

absl::Status ServeTcpStore(const std::string& host, int port) {
  const std::string address = Address(host, port);
  std::lock_guard<std::mutex> lock(servers_mu);
  if (Servers().count(address) > 0) return absl::OkStatus();
  absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/true);
  if (!found.ok()) return found.status();
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = *found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(*found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("tcp store: rank 0 cannot serve on ", address, ": ", error,
                                               " (is the port taken, or the address not this machine's?)"));
  }
  auto* server = new TcpStoreServer(fd);
  server->Start();
  Servers()[address] = server;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, int port,
                                                                        std::chrono::milliseconds timeout) {
  const std::string address = Address(host, port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string error;
  for (;;) {
    absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/false);
    if (!found.ok()) return found.status();
    for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(*found);
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        const timeval reply_timeout = {kReplyTimeoutSeconds, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &reply_timeout, sizeof(reply_timeout));
        return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, address));
      }
      error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(*found);
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("tcp store ", address, ": no server answered within ",
                                                      timeout.count(), "ms (", error,
                                                      "; rank 0 serves it: did it start?)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStoreClient::~TcpStoreClient() { ::close(fd_); }

char TcpStoreClient::Call(const std::string& request, std::string* value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!WriteAll(fd_, request.data(), request.size())) Fail(address_, "the server closed the connection");
  char answer = 0;
  if (!ReadAll(fd_, &answer, 1)) Fail(address_, "no answer from the server");
  if (value != nullptr && answer == 1 && !ReadString(fd_, kMaxValueBytes, value)) {
    Fail(address_, "a malformed answer from the server");
  }
  return answer;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  if (key.size() > kMaxKeyBytes || data.size() > kMaxValueBytes) Fail(address_, "key or value too large: " + key);
  std::string request = "S";
  AppendLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  AppendLength(&request, static_cast<uint32_t>(data.size()));
  request.append(data.begin(), data.end());
  if (Call(request, nullptr) != 0) Fail(address_, absl::StrCat("key '", key, "' already exists"));
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  wait({key}, kDefaultTimeout);
  std::string request = "G";
  AppendLength(&request, static_cast<uint32_t>(key.size()));
  request += key;
  std::string value;
  if (Call(request, &value) != 1) Fail(address_, absl::StrCat("key '", key, "' vanished"));
  return std::vector<char>(value.begin(), value.end());
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::string request = "C";
  AppendLength(&request, static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) {
    AppendLength(&request, static_cast<uint32_t>(key.size()));
    request += key;
  }
  return Call(request, nullptr) == 1;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, kDefaultTimeout); }

void TcpStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      Fail(address_, absl::StrCat("keys not set within ", timeout.count(), "ms (", keys.size() == 1 ? keys[0] : "",
                                  keys.size() == 1 ? "" : absl::StrCat(keys.size(), " keys"), ")"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace nereid
