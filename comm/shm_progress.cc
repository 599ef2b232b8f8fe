#include "comm/shm_progress.h"

#include "absl/time/time.h"

namespace nereid {
namespace {

// The longest sleep between rounds: each round checks deadlines and peers.
constexpr absl::Duration kCheckEvery = absl::Milliseconds(50);

}  // namespace

ShmProgressEngine::~ShmProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  transport_->WakeAnyEventWaiter();
  if (thread_.joinable()) thread_.join();
  for (Pending& p : incoming_) Finish(p, absl::CancelledError("shm: the communicator closed before the transfer ran"));
}

void ShmProgressEngine::Submit(ShmTransport::PendingExchange exchange, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back({std::move(exchange), std::move(done)});
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  transport_->WakeAnyEventWaiter();
}

void ShmProgressEngine::Finish(Pending& p, absl::Status status) {
  p.exchange.reset();  // its slots and abort registration go before the caller hears
  Done done = std::move(p.done);
  done(std::move(status));
}

bool ShmProgressEngine::PassOverAll(std::vector<Pending>& pending) {
  bool moved = false;
  for (size_t i = 0; i < pending.size();) {
    absl::StatusOr<ShmTransport::Pass> pass = transport_->Advance(*pending[i].exchange);
    if (pass.ok() && *pass != ShmTransport::Pass::kDone) {
      pending[i].waiting = *pass == ShmTransport::Pass::kWaiting;
      moved |= !pending[i].waiting;
      ++i;
      continue;
    }
    Pending finished = std::move(pending[i]);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    Finish(finished, pass.ok() ? absl::OkStatus() : pass.status());
    moved = true;
  }
  return moved;
}

bool ShmProgressEngine::CheckStalled(std::vector<Pending>& pending) {
  bool again = false;
  for (size_t i = 0; i < pending.size();) {
    if (!pending[i].waiting) {
      ++i;
      continue;
    }
    absl::StatusOr<bool> stalled = transport_->Stalled(*pending[i].exchange);
    if (stalled.ok()) {
      again |= *stalled;
      ++i;
      continue;
    }
    Pending failed = std::move(pending[i]);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    Finish(failed, stalled.status());
  }
  return again;
}

void ShmProgressEngine::Loop() {
  std::vector<Pending> pending;
  // Waiting transfers are checked after every idle round, and this often
  // while others keep the thread busy (an abort, a dead peer).
  absl::Time next_check = absl::Now() + kCheckEvery;
  for (;;) {
    // Read before the passes: an event after this read ends the sleep below.
    const uint32_t seen = transport_->AnyEvents();
    bool arrived = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
      arrived = !incoming_.empty();
      for (Pending& p : incoming_) pending.push_back(std::move(p));
      incoming_.clear();
    }
    const bool moved = PassOverAll(pending) || arrived;
    if (moved && absl::Now() < next_check) continue;
    next_check = absl::Now() + kCheckEvery;
    if (CheckStalled(pending) || moved) continue;
    bool streaming = false;
    for (const Pending& p : pending) streaming |= transport_->Streaming(*p.exchange);
    transport_->WaitForAnyEvent(seen, kCheckEvery, streaming);
  }
  for (Pending& p : pending) Finish(p, absl::CancelledError("shm: the communicator closed with the transfer pending"));
}

}  // namespace nereid
