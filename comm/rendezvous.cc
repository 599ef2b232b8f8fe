#include "comm/rendezvous.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "comm/gloo_status.h"
#include "comm/run_token.h"
#include "comm/tcp_store.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/redis_store.h"

namespace nereid {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(10);
constexpr auto kVerdictGrace = std::chrono::seconds(2);
// How long a run's Redis keys live after its ranks have met.
constexpr int kRedisKeySeconds = 3600;
constexpr char kVerdictKey[] = "ident/verdict";

std::string IdentityKey(int rank) { return absl::StrCat("ident/", rank); }
std::string VerdictReadKey(int rank) { return absl::StrCat("ident/verdict_read/", rank); }

// FileStore::check is protected; it is the non-blocking test we need.
class CheckableFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  using FileStore::check;
};

// PrefixStore::joinKey is protected; we need the full key to check() it on
// the underlying store.
class RunStore : public gloo::rendezvous::PrefixStore {
 public:
  using PrefixStore::PrefixStore;
  std::string FullKey(const std::string& key) { return joinKey(key); }
};

// The opened store: the backend, a non-blocking existence check on it, and
// the view scoped to the run.
struct OpenedStore {
  std::string name;  // "file:/tmp/x (run 'abc')"
  RendezvousSpec spec;
  std::unique_ptr<gloo::rendezvous::Store> base;
  std::function<bool(const std::vector<std::string>&)> check;
  std::unique_ptr<RunStore> run;
};

// `rank` 0 serves a TCP store (unless the world's does: a group's spec);
// every rank connects to it, waiting up to
// `timeout` for the server.
absl::StatusOr<OpenedStore> Open(const RendezvousSpec& spec, int rank, std::chrono::milliseconds timeout) {
  OpenedStore store;
  store.name = absl::StrCat(spec.ToString(), " (run '", spec.run_id, "')");
  store.spec = spec;
  const std::string where = absl::StrCat("opening rendezvous store ", store.name);
  if (spec.kind == RendezvousSpec::Kind::kFile) {
    std::error_code error;
    std::filesystem::create_directories(spec.path, error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat(where, ": cannot create directory ", spec.path, ": ", error.message()));
    }
    RETURN_IF_ERROR(CallGloo(where, [&] {
      auto file = std::make_unique<CheckableFileStore>(spec.path);
      CheckableFileStore* raw = file.get();
      store.check = [raw](const std::vector<std::string>& keys) { return raw->check(keys); };
      store.base = std::move(file);
    }));
  } else if (spec.kind == RendezvousSpec::Kind::kTcp) {
    if (rank == 0 && spec.rank0_serves) RETURN_IF_ERROR(ServeTcpStore(spec.host, spec.port, spec.token));
    absl::StatusOr<std::unique_ptr<TcpStoreClient>> client =
        TcpStoreClient::Connect(spec.host, spec.port, spec.token, timeout);
    if (!client.ok()) return absl::Status(client.status().code(), absl::StrCat(where, ": ", client.status().message()));
    TcpStoreClient* raw = client->get();
    store.check = [raw](const std::vector<std::string>& keys) { return raw->check(keys); };
    store.base = std::move(*client);
  } else {
    // Gloo's RedisStore constructor throws on a failed connect without
    // freeing its hiredis context; probing first keeps that path leak-free.
    const timeval connect_timeout = {2, 0};
    redisContext* probe = redisConnectWithTimeout(spec.host.c_str(), spec.port, connect_timeout);
    if (probe == nullptr || probe->err != 0) {
      const std::string error = probe == nullptr ? "out of memory" : probe->errstr;
      if (probe != nullptr) redisFree(probe);
      return absl::UnavailableError(absl::StrCat(where, ": cannot connect to Redis: ", error));
    }
    redisFree(probe);
    RETURN_IF_ERROR(CallGloo(where, [&] {
      auto redis = std::make_unique<gloo::rendezvous::RedisStore>(spec.host, spec.port);
      gloo::rendezvous::RedisStore* raw = redis.get();
      store.check = [raw](const std::vector<std::string>& keys) { return raw->check(keys); };
      store.base = std::move(redis);
    }));
  }
  store.run = std::make_unique<RunStore>(absl::StrCat("nereid/", spec.run_id), *store.base);
  return store;
}

// The identity exchange of one rank (see rendezvous.h).
class IdentityExchange {
 public:
  IdentityExchange(OpenedStore& store, int rank, int world, std::chrono::milliseconds timeout)
      : store_(store),
        rank_(rank),
        world_(world),
        timeout_(timeout),
        where_(absl::StrCat("rendezvous in ", store.name, ", rank ", rank, " of ", world)) {}

  absl::Status Run(const WorkerIdentity& me) {
    RETURN_IF_ERROR(SetSigned(IdentityKey(rank_), EncodeIdentity(me)));
    return rank_ == 0 ? RunAsRoot(me) : RunAsPeer(me);
  }

 private:
  absl::Status RunAsRoot(const WorkerIdentity& me) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    std::vector<bool> seen(world_, false);
    seen[0] = true;
    absl::Status verdict;
    for (;;) {
      std::vector<std::string> mismatches;
      for (int r = 1; r < world_; ++r) {
        if (seen[r]) continue;
        ASSIGN_OR_RETURN(const bool present, Has(IdentityKey(r)));
        if (!present) continue;
        absl::StatusOr<WorkerIdentity> theirs_or = GetIdentity(r);
        seen[r] = true;
        if (absl::IsPermissionDenied(theirs_or.status())) {  // no token, or another: refuse it like a mismatch
          mismatches.push_back(std::string(absl::StripPrefix(theirs_or.status().message(), where_ + ": ")));
          continue;
        }
        if (!theirs_or.ok()) return theirs_or.status();
        const WorkerIdentity& theirs = *theirs_or;
        const absl::Status same = CompareIdentities(theirs, r, me, 0);
        if (!same.ok()) mismatches.push_back(std::string(same.message()));
      }
      if (!mismatches.empty()) {
        verdict = absl::FailedPreconditionError(absl::StrJoin(mismatches, "; "));
        break;
      }
      std::vector<int> missing;
      for (int r = 1; r < world_; ++r) {
        if (!seen[r]) missing.push_back(r);
      }
      if (missing.empty()) break;
      if (Clock::now() >= deadline) {
        verdict = absl::DeadlineExceededError(
            absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " of ", world_,
                         " never published ", missing.size() == 1 ? "its" : "their", " identity within ",
                         timeout_.count(), "ms", StoreDrops()));
        break;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    const std::string encoded =
        verdict.ok() ? "0\n" : absl::StrCat(static_cast<int>(verdict.code()), "\n", verdict.message());
    RETURN_IF_ERROR(SetSigned(kVerdictKey, encoded));
    if (const std::string drops = StoreDrops(); verdict.ok() && !drops.empty()) {
      Log().warn("{}: every rank joined{}", where_, drops);
    }
    if (verdict.ok()) return verdict;
    // Rank 0 may serve the store (tcp://): it stays until the ranks it saw
    // have read why the run stops, or kVerdictGrace, so that they report the
    // reason rather than "no answer from the server".
    const Clock::time_point linger = Clock::now() + kVerdictGrace;
    for (int r = 1; r < world_; ++r) {
      if (seen[r] && !WaitFor(VerdictReadKey(r), linger).value_or(false)) break;
    }
    return absl::Status(verdict.code(), absl::StrCat(where_, ": ", verdict.message()));
  }

  // A peer that stops (for its own reason or rank 0's) says it knows, so
  // that rank 0, which may serve the store, need not wait for it.
  absl::Status RunAsPeer(const WorkerIdentity& me) {
    absl::Status status = PeerExchange(me);
    if (!status.ok()) (void)Set(VerdictReadKey(rank_), "");  // best effort
    return status;
  }

  absl::Status PeerExchange(const WorkerIdentity& me) {
    ASSIGN_OR_RETURN(const bool root_present, WaitFor(IdentityKey(0), Clock::now() + timeout_));
    if (!root_present) {
      return absl::DeadlineExceededError(
          absl::StrCat(where_, ": rank 0 never published its identity within ", timeout_.count(), "ms"));
    }
    absl::StatusOr<WorkerIdentity> root_or = GetIdentity(0);
    if (!root_or.ok()) return root_or.status();
    const WorkerIdentity& root = *root_or;
    const absl::Status same = CompareIdentities(me, rank_, root, 0);
    if (!same.ok()) return absl::FailedPreconditionError(absl::StrCat(where_, ": ", same.message()));

    ASSIGN_OR_RETURN(const bool verdict_present, WaitFor(kVerdictKey, Clock::now() + timeout_ + kVerdictGrace));
    if (!verdict_present) {
      return absl::DeadlineExceededError(absl::StrCat(
          where_, ": rank 0 published its identity but no verdict on the others within ",
          (timeout_ + kVerdictGrace).count(), "ms (did rank 0 stop?)"));
    }
    absl::StatusOr<std::string> signed_verdict = GetSigned(kVerdictKey, "rank 0");
    if (!signed_verdict.ok()) return signed_verdict.status();
    const std::string& verdict = *signed_verdict;
    const size_t newline = verdict.find('\n');
    int code = -1;
    if (newline == std::string::npos || !absl::SimpleAtoi(verdict.substr(0, newline), &code) || code < 0 ||
        code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      return absl::InternalError(absl::StrCat(where_, ": malformed verdict from rank 0: '", verdict, "'"));
    }
    if (code == 0) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(code),
                        absl::StrCat(where_, ": rank 0 reports: ", verdict.substr(newline + 1)));
  }

  // The store accessors are public for RendezvousStoreImpl (OpenRendezvous).
 public:
  const std::string& where() const { return where_; }

  absl::Status Set(const std::string& key, const std::string& value) {
    const std::string where = absl::StrCat(where_, ": writing ", key);
    // Checked first because Gloo's RedisStore::set leaks its reply when it
    // throws for a taken key; the check after set() covers a race.
    ASSIGN_OR_RETURN(const bool taken, Has(key));
    if (taken) {
      return absl::AlreadyExistsError(
          absl::StrCat(where, ": the key is taken: run id reused? each run needs a fresh run id or store"));
    }
    const absl::Status status =
        CallGloo(where, [&] { store_.run->set(key, std::vector<char>(value.begin(), value.end())); });
    if (absl::StrContains(status.message(), "already exists") || absl::StrContains(status.message(), "already set")) {
      return absl::AlreadyExistsError(absl::StrCat(status.message(), " (the key is taken: run id reused? each run",
                                                   " needs a fresh run id or store)"));
    }
    return status;
  }

  absl::StatusOr<bool> Has(const std::string& key) {
    bool present = false;
    RETURN_IF_ERROR(CallGloo(absl::StrCat(where_, ": checking ", key),
                             [&] { present = store_.check({store_.run->FullKey(key)}); }));
    return present;
  }

  absl::StatusOr<bool> WaitFor(const std::string& key, Clock::time_point deadline) {
    for (;;) {
      ASSIGN_OR_RETURN(const bool present, Has(key));
      if (present) return true;
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  // Only for keys known to exist (get() would block up to 30 s otherwise).
  absl::StatusOr<std::string> Get(const std::string& key) {
    std::vector<char> bytes;
    RETURN_IF_ERROR(CallGloo(absl::StrCat(where_, ": reading ", key), [&] { bytes = store_.run->get(key); }));
    return std::string(bytes.begin(), bytes.end());
  }

 private:
  // Values that say who a rank is are signed with the run's token, so a
  // process without it cannot pass for a rank in any kind of store.
  absl::Status SetSigned(const std::string& key, const std::string& payload) {
    return Set(key, SignValue(store_.spec.token, store_.run->FullKey(key), payload));
  }

  absl::StatusOr<std::string> GetSigned(const std::string& key, const std::string& writer) {
    ASSIGN_OR_RETURN(const std::string value, Get(key));
    absl::StatusOr<std::string> payload =
        OpenSignedValue(store_.spec.token, store_.run->FullKey(key), value, writer, absl::StrCat("rank ", rank_));
    if (!payload.ok()) {
      return absl::Status(payload.status().code(), absl::StrCat(where_, ": ", payload.status().message()));
    }
    return payload;
  }

  // What the store this process serves dropped ("" if none, or not served
  // here): a stranger's flood or a rank without the token shows up there.
  std::string StoreDrops() const {
    if (store_.spec.kind != RendezvousSpec::Kind::kTcp) return "";
    const std::string drops = TcpStoreDropReport(store_.spec.host, store_.spec.port);
    return drops.empty() ? "" : absl::StrCat(" (the store dropped: ", drops, ")");
  }

  absl::StatusOr<WorkerIdentity> GetIdentity(int rank) {
    ASSIGN_OR_RETURN(const std::string text, GetSigned(IdentityKey(rank), absl::StrCat("rank ", rank)));
    absl::StatusOr<WorkerIdentity> identity = DecodeIdentity(text);
    if (!identity.ok()) {
      return absl::Status(identity.status().code(),
                          absl::StrCat(where_, ": identity of rank ", rank, ": ", identity.status().message()));
    }
    return identity;
  }

  OpenedStore& store_;
  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  const std::string where_;
};

// OpenRendezvous's result: the opened store and the exchange's accessors on it.
class RendezvousStoreImpl final : public RendezvousStore {
 public:
  RendezvousStoreImpl(OpenedStore store, int rank, int world, std::chrono::milliseconds timeout)
      : store_(std::move(store)), exchange_(store_, rank, world, timeout) {}

  absl::Status Exchange(const WorkerIdentity& me) { return exchange_.Run(me); }

  const std::string& name() const override { return store_.name; }
  absl::Status Set(const std::string& key, const std::string& value) override { return exchange_.Set(key, value); }
  absl::StatusOr<std::string> WaitAndGet(const std::string& key, absl::Duration timeout) override {
    ASSIGN_OR_RETURN(const std::chrono::milliseconds ms,
                     ToGlooTimeout(timeout, absl::StrCat(exchange_.where(), ": waiting for ", key)));
    ASSIGN_OR_RETURN(const bool present, exchange_.WaitFor(key, Clock::now() + ms));
    if (!present) {
      return absl::DeadlineExceededError(
          absl::StrCat(exchange_.where(), ": key ", key, " did not appear within ", ms.count(), "ms"));
    }
    return exchange_.Get(key);
  }

 private:
  OpenedStore store_;
  IdentityExchange exchange_;  // refers to store_
};

// The checks shared by ConnectGloo and OpenRendezvous: rank and world in
// range, and the identity with world_size 0 filled in (any other value must
// equal world).
absl::StatusOr<WorkerIdentity> CheckedIdentity(const std::string& where, int rank, int world,
                                               const WorkerIdentity& identity) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": need world >= 1 and 0 <= rank < world"));
  }
  WorkerIdentity me = identity;
  if (me.world_size == 0) me.world_size = world;
  if (me.world_size != world) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": identity says world size ", me.world_size, " but world is ", world));
  }
  return me;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousStore>> OpenRendezvous(const RendezvousSpec& spec, int rank, int world,
                                                                const WorkerIdentity& identity,
                                                                absl::Duration timeout) {
  const std::string where =
      absl::StrCat("OpenRendezvous(", spec.ToString(), ", rank ", rank, " of ", world, ")");
  ASSIGN_OR_RETURN(const WorkerIdentity me, CheckedIdentity(where, rank, world, identity));
  ASSIGN_OR_RETURN(const std::chrono::milliseconds ms, ToGlooTimeout(timeout, where));
  ASSIGN_OR_RETURN(OpenedStore store, Open(spec, rank, ms));
  auto opened = std::make_unique<RendezvousStoreImpl>(std::move(store), rank, world, ms);
  RETURN_IF_ERROR(opened->Exchange(me));
  return std::unique_ptr<RendezvousStore>(std::move(opened));
}

// Redis keys outlive the processes that wrote them; once a run's ranks have
// met, its keys get a time to live, so a store shared by many runs does not
// fill up. Best effort: a failure here leaves keys behind, it fails nothing.
void ExpireRunKeys(const RendezvousSpec& spec) {
  const timeval timeout = {2, 0};
  redisContext* c = redisConnectWithTimeout(spec.host.c_str(), spec.port, timeout);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return;
  }
  const std::string pattern = absl::StrCat("nereid/", spec.run_id, "/*");
  std::string cursor = "0";
  for (int rounds = 0; rounds < 10000; ++rounds) {  // bounded: SCAN ends at cursor 0
    auto* reply = static_cast<redisReply*>(
        redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor.c_str(), pattern.c_str()));
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      if (reply != nullptr) freeReplyObject(reply);
      break;
    }
    cursor = std::string(reply->element[0]->str, reply->element[0]->len);
    const redisReply* keys = reply->element[1];
    for (size_t i = 0; i < keys->elements; ++i) {
      auto* done = static_cast<redisReply*>(redisCommand(c, "EXPIRE %b %d", keys->element[i]->str,
                                                        keys->element[i]->len, kRedisKeySeconds));
      if (done != nullptr) freeReplyObject(done);
    }
    freeReplyObject(reply);
    if (cursor == "0") break;
  }
  redisFree(c);
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const RendezvousSpec& spec, int rank, int world,
                                                          const WorkerIdentity& identity,
                                                          const GlooConnectOptions& options) {
  const std::string where = absl::StrCat("ConnectGloo(", spec.ToString(), ", rank ", rank, " of ", world, ")");
  ASSIGN_OR_RETURN(const WorkerIdentity me, CheckedIdentity(where, rank, world, identity));
  ASSIGN_OR_RETURN(const std::chrono::milliseconds timeout, ToGlooTimeout(options.connect_timeout, where));
  ASSIGN_OR_RETURN(OpenedStore store, Open(spec, rank, timeout));
  RETURN_IF_ERROR(IdentityExchange(store, rank, world, timeout).Run(me));
  absl::StatusOr<std::unique_ptr<Communicator>> communicator = ConnectGlooFullMesh(*store.run, rank, world, options);
  if (!communicator.ok()) {
    return absl::Status(communicator.status().code(),
                        absl::StrCat(communicator.status().message(), " [rendezvous store ", store.name, "]"));
  }
  if (spec.kind == RendezvousSpec::Kind::kRedis) ExpireRunKeys(spec);
  return communicator;
}

}  // namespace nereid
