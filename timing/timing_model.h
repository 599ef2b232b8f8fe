#ifndef NEREID_TIMING_TIMING_MODEL_H_
#define NEREID_TIMING_TIMING_MODEL_H_

// The Pipe-SGD timing model (Li et al., "Pipe-SGD: A Decentralized Pipelined
// SGD Framework for Distributed Deep Net Training", NeurIPS 2018, section 3):
// predicts the time of one training iteration of a data-parallel strategy from
// the compute time of one worker's step, the gradient messages of the plan and
// an alpha-beta(-gamma) model of the link. Pure functions; no I/O
// (`nereid model` reads the inputs, docs/TIMING_MODEL.md explains them).
//
// Notation: n workers, a link with latency alpha (seconds per message) and
// bandwidth beta (bytes per second), a reduction cost gamma (seconds per byte
// summed; default 0), the plan's gradients sent in B buckets of M_b bytes
// (M = sum of M_b, the bytes of one worker's gradients). Compression with
// ratio R puts M_b / R bytes on the wire and adds C seconds of encoding and
// decoding to every step's compute.
//
//   ring allreduce of one bucket (2(n-1) steps of M_b/n bytes each, the
//   summing done in the n-1 reduce-scatter steps):
//     T_ring(M_b) = 2(n-1) * (alpha + M_b / (R n beta)) + (n-1)/n * (M_b / R) * gamma
//   T_comm     = sum over buckets of T_ring(M_b)   (buckets run one after another)
//   T_compute' = T_compute + C
//
//   synchronous SGD:    T_sync = max(T'', e_B), where bucket b's allreduce
//                       starts once its gradients are ready, at f_b T'' into
//                       the step (f_b from a profile's node times; 1 without
//                       one), and after bucket b-1's:
//                       e_b = max(f_b T'', e_{b-1}) + T_ring(M_b), e_0 = 0.
//                       T'' is T_compute' slowed by the communication that
//                       runs inside it (below). With every f_b = 1 nothing
//                       overlaps: T_compute' + T_comm.
//   Pipe-SGD, width K:  T_pipe = max(T_compute'', T_comm) for K >= 2
//                       (the allreduce of iteration t overlaps the compute of
//                       t+1; a wider pipeline adds staleness, not speed);
//                       K = 1 is T_sync
//
// Interference: compute that runs while the worker's link carries traffic is
// slower (the network stack and the communicator take CPU, in bursts). Every
// second of communication during the compute delays it by rho seconds, so a
// strategy's compute is the least solution of T'' = T_compute' + rho *
// busy(T''), busy being the time its communication runs inside the compute:
// for Pipe-SGD min(T_comm, T''), i.e. T'' = T_compute' + rho T_comm when
// compute is the longer stage; for synchronous SGD and the parameter server
// the part of the buckets' schedule (e_b above, with ready times f_b T'')
// before T''. rho comes from one of:
//   - a compute profile taken beside a busy link (one-worker steps while
//     allreduces keep the link busy), T_busy with the same statistic as
//     T_compute: rho = (T_busy - T_compute) / T_busy, so that a step
//     overlapped throughout takes T_busy;
//   - the host CPU: rho = T_cpu / T_comm, with T_cpu = kappa * (bytes a worker
//     sends per step) / c the CPU the allreduce takes, kappa the machine's CPU
//     seconds per byte sent (measured by `nereid bench allreduce`, the kernel's
//     network stack included) and c the cores per worker; 0 unless both are
//     given. For a pipelined step this charges T_cpu whole.
//   SGP (P peers):      every rank pushes its parameters, packed into
//                       messages of up to bucket_kb (M_m bytes each), to each
//                       of its P out-neighbours and receives as many:
//                       T_gossip = sum over messages of (alpha + P M_m / beta)
//                       (the push-sum weight rides in the last; pushes are
//                       not compressed). Plain SGP mixes after the
//                       update: T_sgp = T_compute' + T_gossip (its pushes are
//                       taken not to overlap the backward pass, an upper
//                       bound). Overlap SGP (tau >= 1) mixes a push tau steps
//                       later: T = max(T_compute'', T_gossip), as Pipe-SGD.
//   parameter server:   as T_sync, with each bucket's push and pull taking
//                         2 * (alpha + n * (M_b / R) / (S beta)) + (n-1)/S * (M_b / R) * gamma
//
// The parameter server is the paper's baseline: one server (S = 1) whose link
// is the bottleneck. Every worker pushes its M_b bytes to the server, which
// receives n M_b bytes through its one link (n M_b / beta), sums them, and
// sends the n workers the result back (another n M_b / beta: pull only starts
// when the sum is complete, so push and pull do not overlap); each direction
// costs one message latency alpha because the n messages are in flight
// together. With S servers each holding 1/S of the parameters (a sharded PS)
// every server link carries 1/S of the bytes, so the bandwidth and summing
// terms divide by S, the latency does not. The ring's per-worker traffic,
// 2(n-1)M/n, does not grow with n; the server's, 2nM, does, so the PS wins only
// when latency dominates (small messages, few workers): 2 alpha per bucket
// against the ring's 2(n-1) alpha.
//
// The chunked parameter server (the parameter_server pass's plan: each
// parameter on one of S servers, cut into chunks of chunk_kb, each chunk
// pushed as soon as its gradient is ready and pulled back as soon as the
// server has every worker's piece and updated it). The servers' links may
// be faster than the workers' (beta_s). A worker's messages to one server
// go through one connection, one after another, so each server has a push
// stream and a pull stream of chunks; pushes to different servers go at
// once. The streams active at a moment share a worker's uplink (pushes) or
// downlink (pulls) evenly, as TCP connections through one queue do, and
// each is capped at beta_s / n, its share of its server's link, which
// takes the n workers' pieces at once (fluid max-min fairness, simulated
// event by event):
//     rate of a push stream = min(beta_s / n, beta / active push streams)
// A chunk's pull may start alpha + (n-1) m gamma after its push's last
// byte (every piece in, summed); a pull ends alpha after its last byte.
// Chunks enter their server's push stream in the order their gradients are
// ready (f_c T'', as the buckets above). Synchronous: T_ps = max(T'', the
// last pull's end). Stale-synchronous (mode=ssp, staleness >= 1) pipelines
// steps as Pipe-SGD does: T_ssp = max(T'', sum of pushes, sum of pulls),
// each link's work per step.
// The server's update of a chunk is taken to be free (it is elementwise and
// small beside a chunk's transfer).
//
// What the model leaves out: the optimizer's update after the last bucket
// arrives (it is in T_compute', where a one-worker profile runs it), the
// pipeline's own coupling of the ranks beyond the expected slowest step, a
// link shared by several workers of one machine, and stragglers.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace nereid {

struct LinkModel {
  double alpha_seconds = 0;           // latency per message
  double beta_bytes_per_second = 0;   // bandwidth
  double gamma_seconds_per_byte = 0;  // cost of summing one byte (0: free)
  // The least a ring step takes, whatever its bytes (0: no floor): small
  // messages cost more than alpha + S / beta fitted to large ones says (on
  // 45 Mbit/s links a 4K allreduce over 4 ranks took 6.9 ms, the fit's 1.9).
  double min_step_seconds = 0;
  // The host side (0: not charged): CPU time the machine spends per byte a
  // worker sends (its network stack included), and the cores each worker has.
  double cpu_seconds_per_byte_sent = 0;
  double cores_per_worker = 0;
};

// One chunk of the chunked parameter server, in the plan's order.
struct ServerChunk {
  int64_t bytes = 0;
  int server = 0;               // 0 .. servers-1
  double ready_fraction = 1;    // when its gradient is ready, as f_b
};

struct TimingInputs {
  int workers = 0;                    // n >= 2
  int64_t batch_per_worker = 0;       // samples one worker takes per step
  double compute_seconds = 0;         // one worker's step without communication
  std::vector<int64_t> bucket_bytes;  // one entry per allreduce message, uncompressed
  // f_b, one per bucket in [0, 1]: when the bucket's gradients are all
  // computed, as a fraction of T_compute'. Empty: all 1 (no overlap).
  std::vector<double> bucket_ready_fraction;
  // T_busy: the same step computed while the worker's link carries allreduce
  // traffic throughout (same statistic as compute_seconds, no codec); 0: not
  // measured, the interference then comes from the link's host CPU cost.
  double busy_link_compute_seconds = 0;
  LinkModel link;
  // The same link measured while every rank of the host computes (an
  // allreduce beside busy cores: its wake-ups wait for a core), for the
  // communication that overlaps compute (Pipe-SGD, overlap SGP); bandwidth
  // 0: not measured, the link above.
  LinkModel busy_compute_link;
  int pipe_width = 2;            // K >= 1
  int servers = 1;               // parameter-server shards, S >= 1
  double compression_ratio = 1;  // R >= 1: bytes on the wire = bytes / R
  double codec_seconds = 0;      // C: encode + decode per step
  // SGP: the trained parameters' bytes, one message each as the gossip pass
  // pushes them (empty: the buckets'), the out-neighbours per step and the
  // overlap tau of the overlap SGP row (>= 1).
  std::vector<int64_t> parameter_bytes;
  int64_t gossip_bucket_bytes = 4 << 20;  // consecutive parameters packed per message (0: one each)
  int gossip_peers = 1;
  int gossip_overlap = 1;
  // The chunked parameter server's chunks (empty: the parameter-server row
  // uses the bucket formula), the servers' bandwidth (0: the link's) and the
  // staleness of its stale-synchronous row (>= 1).
  std::vector<ServerChunk> server_chunks;
  double server_beta_bytes_per_second = 0;
  int ps_staleness = 1;
};

struct StrategyTime {
  std::string name;                  // "sync_allreduce", "parameter_server", "pipe_sgd"
  std::string description;           // for tables, e.g. "Pipe-SGD (K=2)"
  double compute_seconds = 0;        // T_compute' (compute + codec)
  double comm_seconds = 0;           // communication of one iteration
  double bytes_sent_per_worker = 0;  // per iteration, on the wire
  double seconds_per_iteration = 0;
  double samples_per_second = 0;  // batch * n / seconds_per_iteration
  double speedup = 0;             // T_sync / seconds_per_iteration
};

struct TimingPrediction {
  double compute_seconds = 0;                // T_compute' (compute + codec)
  double ring_comm_seconds = 0;              // T_comm of the ring allreduce
  double overlapped_ring_comm_seconds = 0;   // the same beside busy compute (busy_compute_link; else T_comm)
  double ps_comm_seconds = 0;                // communication of the parameter server
  double ring_hidden_seconds = 0;            // of T_comm, what T_sync hides behind the backward pass
  double ps_hidden_seconds = 0;              // the same for the parameter server
  int64_t gradient_bytes = 0;                // M, uncompressed
  double wire_bytes_per_step = 0;            // a worker's bytes sent per step in the ring: 2(n-1)/n * M / R
  double overlapped_comm_cpu_seconds = 0;    // T_cpu: kappa * wire_bytes_per_step / c
  double comm_interference = 0;              // rho of the ring (seconds of compute lost per second of traffic)
  bool interference_from_busy_profile = false;  // rho from T_busy (else from T_cpu)
  double one_worker_samples_per_second = 0;  // batch / T_compute (no codec)
  // sync, parameter server (and its stale-synchronous row with chunks), Pipe-SGD, SGP, overlap SGP
  std::vector<StrategyTime> strategies;
};

// T_ring of one message of `bytes` bytes (already compressed) over n workers.
double RingAllReduceSeconds(int workers, double bytes, const LinkModel& link);

// The expected maximum of n independent draws from the empirical distribution
// of `samples` (exactly, by order statistics: sum over the sorted samples x_k,
// k = 1..m, of x_k ((k/m)^n - ((k-1)/m)^n)). A ring allreduce completes only
// once the slowest of the n ranks has computed its gradients, so with step
// times that vary (cores shared with other ranks, stragglers) one iteration's
// compute is this, not the median. 0 for no samples.
double ExpectedMaxOf(std::vector<double> samples, int n);
// One synchronous iteration: `compute` seconds of computation, and the
// buckets' communication (`comm_seconds`, issued in order on one channel),
// bucket b starting once ready_fraction[b] * compute has passed and bucket
// b-1 is done: max(compute, e_B) with e_b = max(f_b compute, e_{b-1}) + c_b.
// An empty ready_fraction means every f_b = 1: compute + the sum of c_b.
double OverlappedIterationSeconds(double compute, const std::vector<double>& ready_fraction,
                                  const std::vector<double>& comm_seconds);
// How long communication runs inside [0, compute] in that schedule.
double CommBusyDuring(double compute, const std::vector<double>& ready_fraction,
                      const std::vector<double>& comm_seconds);
// The compute of one step slowed by `interference` (rho) seconds per second of
// communication inside it: the least T with T = compute + rho * busy(T), where
// busy is nondecreasing and at most `max_busy` (found by iterating from
// `compute`; the result is at most compute + rho * max_busy).
double SlowedCompute(double compute, double interference, double max_busy, const std::function<double(double)>& busy);
// Push and pull of one message through S server links.
double ParameterServerSeconds(int workers, int servers, double bytes, const LinkModel& link);

// The chunked server's synchronous step of `compute` seconds (see above):
// when the last pull ends, and how long pushes and pulls run inside
// [0, compute].
struct ServerChunkSchedule {
  double last_pull_end = 0;
  double busy_during_compute = 0;
  double push_seconds = 0;  // the busiest link's pushes per step (a worker's or a server's), and pulls
  double pull_seconds = 0;
};
ServerChunkSchedule ScheduleServerChunks(double compute, const std::vector<ServerChunk>& chunks, int workers,
                                         int servers, const LinkModel& link, double server_beta);

// Checks the inputs (InvalidArgument naming the field) and applies the model.
absl::StatusOr<TimingPrediction> PredictIteration(const TimingInputs& in);

}  // namespace nereid

#endif  // NEREID_TIMING_TIMING_MODEL_H_
