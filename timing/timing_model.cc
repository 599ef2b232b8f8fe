#include "timing/timing_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nereid {
namespace {

bool FiniteAtLeast(double v, double low) { return std::isfinite(v) && v >= low; }

absl::Status Check(const TimingInputs& in) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (in.workers < 2) return bad("workers must be >= 2 (got ", in.workers, ")");
  if (in.batch_per_worker < 1) return bad("batch per worker must be >= 1 (got ", in.batch_per_worker, ")");
  if (!(std::isfinite(in.compute_seconds) && in.compute_seconds > 0)) {
    return bad("compute time must be > 0 (got ", in.compute_seconds, " s)");
  }
  if (in.bucket_bytes.empty()) return bad("no gradient messages (the plan has no AllReduce buckets)");
  for (int64_t b : in.bucket_bytes) {
    if (b <= 0) return bad("a bucket of ", b, " bytes");
  }
  for (int64_t b : in.parameter_bytes) {
    if (b <= 0) return bad("a parameter of ", b, " bytes");
  }
  if (in.gossip_peers < 1) return bad("SGP peers must be >= 1 (got ", in.gossip_peers, ")");
  if (in.gossip_overlap < 1) return bad("overlap SGP's tau must be >= 1 (got ", in.gossip_overlap, ")");
  if (!FiniteAtLeast(in.link.alpha_seconds, 0)) return bad("latency must be >= 0 (got ", in.link.alpha_seconds, ")");
  if (!(std::isfinite(in.link.beta_bytes_per_second) && in.link.beta_bytes_per_second > 0)) {
    return bad("bandwidth must be > 0 (got ", in.link.beta_bytes_per_second, " bytes/s)");
  }
  if (!FiniteAtLeast(in.link.gamma_seconds_per_byte, 0)) {
    return bad("reduction cost must be >= 0 (got ", in.link.gamma_seconds_per_byte, " s/byte)");
  }
  if (!FiniteAtLeast(in.link.cpu_seconds_per_byte_sent, 0)) {
    return bad("communication CPU cost must be >= 0 (got ", in.link.cpu_seconds_per_byte_sent, " s/byte)");
  }
  if (!FiniteAtLeast(in.link.cores_per_worker, 0)) {
    return bad("cores per worker must be >= 0 (got ", in.link.cores_per_worker, ")");
  }
  if (!FiniteAtLeast(in.busy_compute_link.alpha_seconds, 0) ||
      !FiniteAtLeast(in.busy_compute_link.beta_bytes_per_second, 0)) {
    return bad("the link beside busy compute must have latency and bandwidth >= 0 (got ",
               in.busy_compute_link.alpha_seconds, " s, ", in.busy_compute_link.beta_bytes_per_second, " bytes/s)");
  }
  if (!FiniteAtLeast(in.busy_link_compute_seconds, 0)) {
    return bad("compute time beside a busy link must be >= 0 (got ", in.busy_link_compute_seconds, " s)");
  }
  if (!in.bucket_ready_fraction.empty() && in.bucket_ready_fraction.size() != in.bucket_bytes.size()) {
    return bad(in.bucket_ready_fraction.size(), " bucket ready times for ", in.bucket_bytes.size(), " buckets");
  }
  for (size_t b = 0; b < in.bucket_ready_fraction.size(); ++b) {
    double f = in.bucket_ready_fraction[b];
    if (!(std::isfinite(f) && f >= 0 && f <= 1)) {
      return bad("bucket ", b, " ready fraction must be in [0, 1] (got ", f, ")");
    }
  }
  if (in.pipe_width < 1) return bad("Pipe-SGD width must be >= 1 (got ", in.pipe_width, ")");
  for (const ServerChunk& c : in.server_chunks) {
    if (c.bytes <= 0 || c.server < 0 || c.server >= in.servers || !(c.ready_fraction >= 0 && c.ready_fraction <= 1)) {
      return bad("a server chunk of ", c.bytes, " bytes on server ", c.server, " of ", in.servers, ", ready at ",
                 c.ready_fraction);
    }
  }
  if (!FiniteAtLeast(in.server_beta_bytes_per_second, 0)) {
    return bad("the servers' bandwidth must be >= 0 (got ", in.server_beta_bytes_per_second, " bytes/s)");
  }
  if (in.ps_staleness < 1) return bad("the stale-synchronous row's staleness must be >= 1 (got ", in.ps_staleness, ")");
  if (in.servers < 1) return bad("servers must be >= 1 (got ", in.servers, ")");
  if (!FiniteAtLeast(in.compression_ratio, 1)) {
    return bad("compression ratio must be >= 1 (got ", in.compression_ratio, ")");
  }
  if (!FiniteAtLeast(in.codec_seconds, 0)) return bad("codec time must be >= 0 (got ", in.codec_seconds, " s)");
  return absl::OkStatus();
}

}  // namespace

double ExpectedMaxOf(std::vector<double> samples, int n) {
  if (samples.empty() || n < 1) return 0;
  std::sort(samples.begin(), samples.end());
  const double m = static_cast<double>(samples.size());
  double expected = 0;
  for (size_t k = 1; k <= samples.size(); ++k) {
    expected += samples[k - 1] * (std::pow(k / m, n) - std::pow((k - 1) / m, n));
  }
  return expected;
}

double RingAllReduceSeconds(int workers, double bytes, const LinkModel& link) {
  const double n = workers;
  return 2 * (n - 1) * std::max(link.min_step_seconds, link.alpha_seconds + bytes / (n * link.beta_bytes_per_second)) +
         (n - 1) / n * bytes * link.gamma_seconds_per_byte;
}

namespace {

// Each bucket's (start, end) in a synchronous step of `compute` seconds: it
// starts once its gradients are ready and the bucket before it is done.
std::vector<std::pair<double, double>> BucketSchedule(double compute, const std::vector<double>& ready_fraction,
                                                      const std::vector<double>& comm_seconds) {
  std::vector<std::pair<double, double>> schedule;
  double end = 0;
  for (size_t b = 0; b < comm_seconds.size(); ++b) {
    double start = std::max(b < ready_fraction.size() ? ready_fraction[b] * compute : compute, end);
    end = start + comm_seconds[b];
    schedule.emplace_back(start, end);
  }
  return schedule;
}

}  // namespace

double OverlappedIterationSeconds(double compute, const std::vector<double>& ready_fraction,
                                  const std::vector<double>& comm_seconds) {
  double end = 0;
  for (const auto& [start, stop] : BucketSchedule(compute, ready_fraction, comm_seconds)) end = stop;
  return std::max(compute, end);
}

double CommBusyDuring(double compute, const std::vector<double>& ready_fraction,
                      const std::vector<double>& comm_seconds) {
  double busy = 0;
  for (const auto& [start, end] : BucketSchedule(compute, ready_fraction, comm_seconds)) {
    busy += std::min(end, compute) - std::min(start, compute);
  }
  return busy;
}

double SlowedCompute(double compute, double interference, double max_busy, const std::function<double(double)>& busy) {
  const double bound = compute + interference * max_busy;
  // busy is nondecreasing, so the iterates rise to the least fixed point; with
  // rho < 1 and busy growing at most as fast as T they converge geometrically.
  double t = compute;
  for (int i = 0; i < 10000; ++i) {
    double next = std::min(bound, compute + interference * busy(t));
    if (next - t <= 1e-12 * compute) return next;
    t = next;
  }
  return t;
}

double ParameterServerSeconds(int workers, int servers, double bytes, const LinkModel& link) {
  const double n = workers, s = servers;
  return 2 * (link.alpha_seconds + n * bytes / (s * link.beta_bytes_per_second)) +
         (n - 1) / s * bytes * link.gamma_seconds_per_byte;
}

ServerChunkSchedule ScheduleServerChunks(double compute, const std::vector<ServerChunk>& chunks, int workers,
                                         int servers, const LinkModel& link, double server_beta) {
  const double n = workers;
  const double beta = link.beta_bytes_per_second, beta_s = server_beta > 0 ? server_beta : beta;
  // A worker's transfer to or from one server gets at most 1/n of that
  // server's link (its n workers' pieces go through it at once).
  const double per_worker_cap = beta_s / n;
  const size_t num_servers = static_cast<size_t>(std::max(servers, 0));
  std::vector<size_t> order(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return chunks[a].ready_fraction < chunks[b].ready_fraction; });
  // One push stream and one pull stream per server, each a FIFO of chunks
  // (a worker's messages to one server share one connection; a chunk's pull
  // follows its push). The streams active at a moment share the worker's
  // uplink (pushes) or downlink (pulls) evenly, each capped by its server's
  // share: fluid max-min fairness, as TCP connections through one FIFO come
  // close to.
  struct Pending {
    size_t chunk;
    double available;  // when it may start
    double remaining;  // bytes of a worker's piece still to move
  };
  std::vector<std::deque<Pending>> push(num_servers), pull(num_servers);
  // Each link's work per step (a pull moves what its push moved).
  double worker_work = 0;
  std::vector<double> server_work(num_servers, 0);
  for (size_t i : order) {
    const ServerChunk& c = chunks[i];
    const double m = static_cast<double>(c.bytes);
    push[static_cast<size_t>(c.server)].push_back({i, c.ready_fraction * compute, m});
    worker_work += m / beta;  // latency delays a message but does not occupy the link
    server_work[static_cast<size_t>(c.server)] += n * m / beta_s;
  }
  ServerChunkSchedule s;
  s.push_seconds = s.pull_seconds =
      std::max(worker_work, num_servers > 0 ? *std::max_element(server_work.begin(), server_work.end()) : 0.0);

  double t = 0;
  std::vector<char> up(num_servers), down(num_servers);  // the streams moving bytes now
  // Each step of the loop ends a transfer, starts one, or waits for one to
  // become ready: at most 6 per chunk (a push and a pull each).
  for (size_t events = 0; events <= 8 * chunks.size() + 8; ++events) {
    double next_start = std::numeric_limits<double>::infinity();
    int active_up = 0, active_down = 0;
    // Whether the stream's head may move now; else when it may.
    auto moving = [&](const std::deque<Pending>& q) {
      if (q.empty()) return false;
      if (q.front().available <= t) return true;
      next_start = std::min(next_start, q.front().available);
      return false;
    };
    for (size_t k = 0; k < num_servers; ++k) {
      up[k] = moving(push[k]);
      down[k] = moving(pull[k]);
      active_up += up[k];
      active_down += down[k];
    }
    if (active_up + active_down == 0) {
      if (std::isinf(next_start)) break;  // all done
      t = next_start;
      continue;
    }
    const double rate_up = active_up > 0 ? std::min(per_worker_cap, beta / active_up) : 0;
    const double rate_down = active_down > 0 ? std::min(per_worker_cap, beta / active_down) : 0;
    double dt = next_start - t;
    for (size_t k = 0; k < num_servers; ++k) {
      if (up[k]) dt = std::min(dt, push[k].front().remaining / rate_up);
      if (down[k]) dt = std::min(dt, pull[k].front().remaining / rate_down);
    }
    // The links' use inside [0, compute]: the CPU it costs slows the compute.
    const double inside = std::max(0.0, std::min(t + dt, compute) - std::min(t, compute));
    s.busy_during_compute += inside * (active_up * rate_up + active_down * rate_down) / beta;
    t += dt;
    for (size_t k = 0; k < num_servers; ++k) {
      if (down[k]) {
        Pending& p = pull[k].front();
        p.remaining -= rate_down * dt;
        if (p.remaining <= 1e-9 * static_cast<double>(chunks[p.chunk].bytes)) {
          s.last_pull_end = std::max(s.last_pull_end, t + link.alpha_seconds);
          pull[k].pop_front();
        }
      }
      if (up[k]) {
        Pending& p = push[k].front();
        p.remaining -= rate_up * dt;
        if (p.remaining <= 1e-9 * static_cast<double>(chunks[p.chunk].bytes)) {
          const double m = static_cast<double>(chunks[p.chunk].bytes);
          // Every worker's piece is in one latency later, summed, then pulled.
          pull[k].push_back({p.chunk, t + link.alpha_seconds + (n - 1) * m * link.gamma_seconds_per_byte, m});
          push[k].pop_front();
        }
      }
    }
  }
  return s;
}

absl::StatusOr<TimingPrediction> PredictIteration(const TimingInputs& in) {
  if (absl::Status s = Check(in); !s.ok()) return s;
  TimingPrediction p;
  p.compute_seconds = in.compute_seconds + in.codec_seconds;
  std::vector<double> ring, ps;  // per bucket
  for (int64_t b : in.bucket_bytes) {
    double wire = static_cast<double>(b) / in.compression_ratio;
    p.gradient_bytes += b;
    ring.push_back(RingAllReduceSeconds(in.workers, wire, in.link));
    ps.push_back(ParameterServerSeconds(in.workers, in.servers, wire, in.link));
    p.ring_comm_seconds += ring.back();
    p.ps_comm_seconds += ps.back();
  }
  const double n = in.workers;
  p.wire_bytes_per_step = 2 * (n - 1) / n * static_cast<double>(p.gradient_bytes) / in.compression_ratio;
  const double ps_bytes = static_cast<double>(p.gradient_bytes) / in.compression_ratio;
  p.one_worker_samples_per_second = static_cast<double>(in.batch_per_worker) / in.compute_seconds;
  const double cpu_per_byte =
      in.link.cores_per_worker > 0 ? in.link.cpu_seconds_per_byte_sent / in.link.cores_per_worker : 0;
  p.overlapped_comm_cpu_seconds = cpu_per_byte * p.wire_bytes_per_step;

  // rho per strategy: measured beside a busy link (the same for both), or the
  // host CPU of the bytes a strategy sends spread over its communication.
  double ring_rho = p.overlapped_comm_cpu_seconds / p.ring_comm_seconds;
  double ps_rho = cpu_per_byte * ps_bytes / p.ps_comm_seconds;
  if (in.busy_link_compute_seconds > 0) {
    ring_rho = ps_rho = std::max(0.0, in.busy_link_compute_seconds - in.compute_seconds) / in.busy_link_compute_seconds;
    p.interference_from_busy_profile = true;
  }
  p.comm_interference = ring_rho;
  // A synchronous step: its compute slowed by the buckets that overlap it, the
  // iteration, and what of the communication it hides.
  struct Synchronous {
    double compute, total, hidden;
  };
  auto synchronous = [&](const std::vector<double>& comm, double total_comm, double rho) {
    Synchronous t;
    t.compute = SlowedCompute(p.compute_seconds, rho, total_comm,
                              [&](double c) { return CommBusyDuring(c, in.bucket_ready_fraction, comm); });
    t.total = OverlappedIterationSeconds(t.compute, in.bucket_ready_fraction, comm);
    t.hidden = t.compute + total_comm - t.total;
    return t;
  };
  const Synchronous sync = synchronous(ring, p.ring_comm_seconds, ring_rho);
  Synchronous server = synchronous(ps, p.ps_comm_seconds, ps_rho);
  const bool chunked = !in.server_chunks.empty();
  const ServerChunkSchedule chunk_comm = ScheduleServerChunks(p.compute_seconds, in.server_chunks, in.workers,
                                                              in.servers, in.link, in.server_beta_bytes_per_second);
  if (chunked) {
    // The chunked server's own schedule replaces the bucket formula.
    const double comm = chunk_comm.push_seconds + chunk_comm.pull_seconds;
    if (!p.interference_from_busy_profile) ps_rho = cpu_per_byte * ps_bytes / comm;
    server.compute = SlowedCompute(p.compute_seconds, ps_rho, comm, [&](double c) {
      return ScheduleServerChunks(c, in.server_chunks, in.workers, in.servers, in.link, in.server_beta_bytes_per_second)
          .busy_during_compute;
    });
    const ServerChunkSchedule at = ScheduleServerChunks(server.compute, in.server_chunks, in.workers, in.servers,
                                                        in.link, in.server_beta_bytes_per_second);
    p.ps_comm_seconds = comm;
    server.total = std::max(server.compute, at.last_pull_end);
    server.hidden = server.compute + comm - server.total;
  }
  p.ring_hidden_seconds = sync.hidden;
  p.ps_hidden_seconds = server.hidden;

  auto add = [&](std::string name, std::string description, double compute, double comm, double bytes,
                 double total) {
    StrategyTime t;
    t.name = std::move(name);
    t.description = std::move(description);
    t.compute_seconds = compute;
    t.comm_seconds = comm;
    t.bytes_sent_per_worker = bytes;
    t.seconds_per_iteration = total;
    t.samples_per_second = static_cast<double>(in.batch_per_worker) * n / total;
    p.strategies.push_back(std::move(t));
  };
  add("sync_allreduce", "synchronous ring allreduce", sync.compute, p.ring_comm_seconds, p.wire_bytes_per_step,
      sync.total);
  add("parameter_server",
      in.servers == 1 ? std::string("parameter server") : absl::StrCat("parameter server (", in.servers, " shards)"),
      server.compute, p.ps_comm_seconds, ps_bytes, server.total);
  if (chunked) {
    // Stale-synchronous: the pushes and pulls of step t beside the compute
    // of the next ones; each link's work per step bounds the step.
    const double links = std::max(chunk_comm.push_seconds, chunk_comm.pull_seconds);
    const double ssp_compute = SlowedCompute(p.compute_seconds, ps_rho, links, [&](double t) { return std::min(links, t); });
    add("parameter_server_ssp", absl::StrCat("parameter server, SSP (s=", in.ps_staleness, ")"),
        ssp_compute, links, ps_bytes, std::max(ssp_compute, links));
  }
  // Communication beside compute: on the link measured beside busy cores
  // when there is one (its reduction cost is the link's).
  const bool busy_cores = in.busy_compute_link.beta_bytes_per_second > 0;
  LinkModel beside_compute = busy_cores ? in.busy_compute_link : in.link;
  beside_compute.gamma_seconds_per_byte = in.link.gamma_seconds_per_byte;
  double overlapped_ring = 0;
  for (int64_t b : in.bucket_bytes) {
    overlapped_ring += RingAllReduceSeconds(in.workers, static_cast<double>(b) / in.compression_ratio, beside_compute);
  }
  p.overlapped_ring_comm_seconds = overlapped_ring;
  // Pipelined, the allreduce runs while the next step computes, for as long as
  // it lasts or the step does, and slows that computation.
  // A codec encodes and decodes on the collective thread, between its
  // collectives: pipelined, it lengthens the communication beside the next
  // steps' compute, not that compute.
  const bool pipelined = in.pipe_width >= 2;
  const double pipe_comm = overlapped_ring + in.codec_seconds;
  const double pipe_compute =
      pipelined ? SlowedCompute(in.compute_seconds, ring_rho, pipe_comm, [&](double t) { return std::min(pipe_comm, t); })
                : sync.compute;
  add("pipe_sgd", absl::StrCat("Pipe-SGD (K=", in.pipe_width, ")"), pipe_compute,
      pipelined ? pipe_comm : p.ring_comm_seconds, p.wire_bytes_per_step,
      pipelined ? std::max(pipe_compute, pipe_comm) : sync.total);
  // SGP: a message per parameter to each peer; plain, after the update;
  // overlapped, beside the next steps' compute (which it slows as Pipe-SGD's
  // allreduce does).
  // Consecutive parameters, then the 4-byte push-sum weight, packed up to the
  // bucket size, as the gossip pass does; compress(fp16|bf16) halves them
  // (--compression-ratio 2).
  std::vector<int64_t> values = in.parameter_bytes.empty() ? in.bucket_bytes : in.parameter_bytes;
  values.push_back(4);
  std::vector<int64_t> messages;
  for (int64_t b : values) {
    if (!messages.empty() && messages.back() + b <= in.gossip_bucket_bytes) {
      messages.back() += b;
    } else {
      messages.push_back(b);
    }
  }
  double gossip_bytes = 0, gossip_comm = 0, overlapped_gossip = 0;
  for (int64_t b : messages) {
    const double wire = in.gossip_peers * static_cast<double>(b) / in.compression_ratio;
    gossip_bytes += wire;
    gossip_comm += in.link.alpha_seconds + wire / in.link.beta_bytes_per_second;
    overlapped_gossip += beside_compute.alpha_seconds + wire / beside_compute.beta_bytes_per_second;
  }
  double gossip_rho = cpu_per_byte * gossip_bytes / gossip_comm;
  if (in.busy_link_compute_seconds > 0) gossip_rho = ring_rho;
  const std::string peers = absl::StrCat(in.gossip_peers, in.gossip_peers == 1 ? " peer" : " peers");
  add("sgp", absl::StrCat("SGP (", peers, ")"), p.compute_seconds, gossip_comm, gossip_bytes,
      p.compute_seconds + gossip_comm);
  const double gossip_compute = SlowedCompute(p.compute_seconds, gossip_rho, overlapped_gossip,
                                              [&](double t) { return std::min(overlapped_gossip, t); });
  add("sgp_overlap", absl::StrCat("overlap SGP (", peers, ", tau=", in.gossip_overlap, ")"), gossip_compute,
      overlapped_gossip, gossip_bytes, std::max(gossip_compute, overlapped_gossip));
  for (StrategyTime& t : p.strategies) t.speedup = sync.total / t.seconds_per_iteration;
  return p;
}

}  // namespace nereid
