#!/usr/bin/env bash
# End-to-end checks of `nereid model`: the table, the JSON, usage errors and
# bad input files. The trace and the bench report are written here by hand.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

# Four steps of 10 ms; the first is warm-up. conv1/conv takes 4 ms a step.
# busy_trace.json: the same steps taking 20 ms, as beside a busy link.
python3 - "$tmp/trace.json" "$tmp/busy_trace.json" <<'PY'
import json, sys
for path, step_us in zip(sys.argv[1:], (10000.0, 20000.0)):
    events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}}]
    for s in range(4):
        t = s * 30000.0
        events.append({"name": "step %d" % s, "cat": "step", "ph": "X", "pid": 0, "tid": 1, "ts": t, "dur": step_us,
                       "args": {"step": s, "epoch": 0}})
        events.append({"name": "conv1/conv", "cat": "Conv2D", "ph": "X", "pid": 0, "tid": 2, "ts": t + 10,
                       "dur": 4000.0, "args": {"step": s}})
    json.dump({"displayTimeUnit": "ms", "traceEvents": events}, open(path, "w"))
PY
echo '{"world":2,"alpha_seconds":1e-4,"beta_bytes_per_second":1.25e8,"sizes":[]}' >"$tmp/bench.json"

# lenet_fashion: 246,824 bytes of gradients in one bucket (the default 1 MB cap).
# 4 workers, 100 us, 1 Gbit/s: ring 6 * (100 us + 246824 / 5e8 s) = 3.562 ms.
expect 0 "13.562" \
  "$nereid" model models/lenet_fashion.pbtxt --workers 4 --batch 32 --profile "$tmp/trace.json" \
  --warmup-steps 1 --latency-us 100 --bandwidth-gbit 1 --json "$tmp/model.json"
expect 0 "conv1/conv" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --profile "$tmp/trace.json" \
  --link "$tmp/bench.json"
expect 0 "25600" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --link "$tmp/bench.json"  # Pipe-SGD: max(10 ms, 3.562 ms); 4 x 64 samples / 10 ms
# A compressed plan is priced by what it sends: fp16's wire halves lenet's
# 246,824 bytes; QSGD's 8-bit codes (allgathered, per-bucket norms, the
# small gradients left dense) are about a quarter.
expect 0 "gradients: 123412 bytes" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 10 \
  --link "$tmp/bench.json" --passes "autodiff,compress(method=fp16),sgd(lr=0.01)"
"$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 10 --link "$tmp/bench.json" \
  --passes "autodiff,compress(method=qsgd,bits=8,coding=fixed),sgd(lr=0.01)" --json "$tmp/qsgd.json" >/dev/null ||
  fail "model of a QSGD plan failed"
python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["bytes_per_step"]; sys.exit(not 246824/4.5 < b < 246824/3.5)' \
  "$tmp/qsgd.json" || fail "a QSGD plan is not priced at about a quarter of the float32 bytes"
# PowerSGD's two rounds (P, then Q) are two collectives, each paying the
# ring's latency: its fused 44.4 KiB is two 22.2 KiB messages beside the dense 4 KiB.
expect 0 "gradients: 49608 bytes in 3 buckets (4.0 KiB, 22.2 KiB, 22.2 KiB)" "$nereid" model \
  models/mlp_fashion.pbtxt --workers 2 --compute-ms 10 --link "$tmp/bench.json" \
  --passes "autodiff,compress(method=powersgd,rank=4),sgd(lr=0.01)"
# A worker 5 ms slower per step holds every strategy to its pace: the same
# rows as 15 ms of compute, and the report says so.
expect 0 "straggler: one worker 5.000 ms slower per step" "$nereid" model models/lenet_fashion.pbtxt --workers 4 \
  --compute-ms 10 --straggler-ms 5 --link "$tmp/bench.json" --json "$tmp/straggler.json"
"$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 15 --link "$tmp/bench.json" \
  --json "$tmp/no_straggler.json" >/dev/null || fail "model with 15 ms of compute failed"
python3 - "$tmp/straggler.json" "$tmp/no_straggler.json" <<'PY' || fail "a straggler is not its extra compute"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["straggler_seconds"] == 0.005 and b["straggler_seconds"] == 0, (a["straggler_seconds"], b["straggler_seconds"])
rows = lambda r: {s["name"]: s["seconds_per_iteration"] for s in r["strategies"]}
assert rows(a) == rows(b) and rows(a)["sync_allreduce"] > 0.015, (rows(a), rows(b))
PY
expect 2 "--straggler-ms must be >= 0" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --straggler-ms -1 --link "$tmp/bench.json"
# Hybrid on mlp_fashion, 2 workers, batch 32, 10 ms compute, 100 us, 1 Gbit/s (timing/hybrid_timing.h):
# data parallel: 10 ms + 2 * (100 us + 2678824 / 2.5e8 s) = 31.631 ms; hybrid: 10 ms + exchanges of 784, 512
# and 512 floats per sample (3 * 100 us + 4 * 32 * 1808 / 1.25e8 s = 2.151 ms) and of the row layer's bias,
# 256 floats a shard, gathered and its gradient reduce-scattered (2 * (100 us + 1024 / 1.25e8 s) = 0.216 ms)
# + the replicated 20520 bytes (2 * (100 us + 20520 / 2.5e8 s) = 0.364 ms) = 12.732 ms.
expect 0 "data parallel 31.631 ms per iteration (2.7 MB sent per worker), hybrid 12.732 ms (2.368 ms" \
  "$nereid" model models/mlp_fashion.pbtxt --workers 2 --batch 32 --compute-ms 10 --latency-us 100 \
  --bandwidth-gbit 1 --passes "hybrid_partition,autodiff,sgd(lr=0.01)"
python3 - "$tmp/model.json" <<'PY' || fail "JSON report is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
for key in ["model", "workers", "batch", "compute_seconds", "comm_seconds", "bytes_per_step", "buckets",
            "alpha_seconds", "beta_bytes_per_second", "strategies"]:
    assert key in r, key
assert r["workers"] == 4 and r["batch"] == 32 and r["buckets"] == 1, r
assert r["bucket_bytes"] == [246824], r["bucket_bytes"]
assert abs(r["compute_seconds"] - 0.010) < 1e-9, r["compute_seconds"]
assert r["bytes_per_step"] == 370236, r["bytes_per_step"]  # 2(n-1)/n * M
s = {x["name"]: x for x in r["strategies"]}
assert set(s) == {"sync_allreduce", "parameter_server", "parameter_server_ssp", "pipe_sgd", "sgp", "sgp_overlap"}, s
# The chunked server: lenet's 10 parameters, each one chunk of at most 256 KiB, ready when the step ends (the
# profile has not timed their producers). A chunk's pieces take 4 m / 1.25e8 s of the server's link (4 workers
# through it; each worker's own link carries its m in a quarter of that): the server takes the pushes back to
# back, 4 x 246824 / 1.25e8 s = 7.898 ms from the 10 ms compute on, and sends each pull once its push is in;
# the last, fc1's weight (192000 bytes: 6.144 ms), after the last push: 10 + 7.898 + 0.1 + 6.144 + 0.1 ms with
# the 100 us latency of each (latency delays a message; it does not occupy the link). SSP: max(10, 7.898) ms.
assert r["server_chunks"] == 10 and r["ps_staleness"] == 1, r
assert abs(s["parameter_server"]["seconds_per_iteration"] - 0.0242424) < 1e-6, s["parameter_server"]
assert abs(s["parameter_server_ssp"]["seconds_per_iteration"] - 0.010) < 1e-9, s["parameter_server_ssp"]
assert s["sgp"]["bytes_sent_per_worker"] == 246824 + 4, s["sgp"]  # one model's worth and the weight to one peer
assert s["sgp_overlap"]["seconds_per_iteration"] <= s["sgp"]["seconds_per_iteration"], s
assert abs(s["sync_allreduce"]["seconds_per_iteration"] - 0.0135617) < 1e-6, s
assert s["sync_allreduce"]["speedup"] == 1
assert s["pipe_sgd"]["speedup"] > 1 > s["parameter_server"]["speedup"], s
assert r["profile"]["warmup_steps"] == 1 and r["profile"]["measured_steps"] == 3, r["profile"]
assert r["profile"]["nodes"][0]["name"] == "conv1/conv", r["profile"]
# conv1/conv ends 4.01 ms into each 10 ms step.
node = r["profile"]["nodes"][0]
assert abs(node["end_seconds"] - 0.00401) < 1e-9 and abs(node["end_fraction"] - 0.401) < 1e-9, node
PY

# Smaller buckets: more messages, each paying its latency.
expect 0 "in 4 buckets" "$nereid" model models/mlp_fashion.pbtxt --workers 8 --compute-ms 5 --latency-us 50 \
  --bandwidth-gbit 10 --passes 'autodiff,data_parallel(bucket_kb=256),sgd(lr=0.01)'
# A planned graph is read as it is.
"$nereid" plan models/lenet_fashion.pbtxt --passes 'autodiff,data_parallel(bucket_kb=64),sgd(lr=0.01)' \
  -o "$tmp/plan.pbtxt" >/dev/null || fail "plan failed"
expect 0 "in 3 buckets" "$nereid" model "$tmp/plan.pbtxt" --workers 2 --compute-ms 5 --link "$tmp/bench.json"
"$nereid" plan models/lenet_fashion.pbtxt --passes 'autodiff,sgd(lr=0.01)' -o "$tmp/plan1.pbtxt" >/dev/null
expect 1 "plan without gradient communication" "$nereid" model "$tmp/plan1.pbtxt" --workers 2 --compute-ms 5 \
  --link "$tmp/bench.json"
# Servers behind 10 Gbit/s links: a chunk's transfer is the worker's link's.
expect 0 "10 chunks on 1 server, whose links carry 10.000 Gbit/s" "$nereid" model models/lenet_fashion.pbtxt \
  --workers 4 --compute-ms 10 --link "$tmp/bench.json" --server-bandwidth-gbit 10
# The servers' links as a benchmark measured them: its payload rate (1.25e9 B/s is 10 Gbit/s).
echo '{"world":2,"alpha_seconds":2e-5,"beta_bytes_per_second":1.25e9,"sizes":[]}' >"$tmp/server_bench.json"
expect 0 "whose links carry 10.000 Gbit/s (measured $tmp/server_bench.json)" "$nereid" model \
  models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 --link "$tmp/bench.json" --server-link "$tmp/server_bench.json"
expect 2 "give the servers' links one way" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --link "$tmp/bench.json" --server-link "$tmp/server_bench.json" --server-bandwidth-gbit 10
expect 0 "parameter server, SSP (s=3)" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --link "$tmp/bench.json" --staleness 3 --chunk-kb 16
expect 2 "--chunk-kb must be >= 1" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --link "$tmp/bench.json" --chunk-kb 0.5
expect 0 "parameter server (2 shards)" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --compute-ms 10 \
  --link "$tmp/bench.json" --servers 2 --compression-ratio 4 --codec-ms 1
expect 0 "Usage: nereid model" "$nereid" model --help
expect 0 "overlap: none assumed" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 5 \
  --link "$tmp/bench.json"

# Overlap: a real one-worker trace times every gradient producer, so in a plan
# of three buckets (fc3+fc2, fc1, the convolutions) the first two start during
# the backward pass and synchronous SGD hides part of its communication.
"$nereid" run models/lenet_fashion.pbtxt --batch 32 --threads 1 --max-steps 8 --epochs 1 --test-limit 10 \
  --passes 'autodiff,sgd(lr=0.01)' --quiet --trace "$tmp/lenet_trace.json" >/dev/null || fail "profiling run failed"
expect 0 "synchronous SGD hides" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --batch 32 \
  --profile "$tmp/lenet_trace.json" --warmup-steps 2 --latency-us 100 --bandwidth-gbit 0.01 \
  --passes 'autodiff,data_parallel(bucket_kb=64),sgd(lr=0.01)' --json "$tmp/overlap.json"
python3 - "$tmp/overlap.json" <<'PY' || fail "overlap JSON is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
f, sizes, n = r["bucket_ready_fraction"], r["bucket_bytes"], r["workers"]
assert len(f) == len(sizes) == 3 and r["unprofiled_producers"] == 0, r
assert 0 < f[0] <= f[1] < f[2] <= 1, f  # fc3 and fc2's gradients come before fc1's, the convolutions' last
# The recurrence of docs/TIMING_MODEL.md from the report's own numbers.
compute, end = r["compute_seconds"], 0.0
for fb, m in zip(f, sizes):
    end = max(fb * compute, end) + 2 * (n - 1) * (r["alpha_seconds"] + m / (n * r["beta_bytes_per_second"]))
s = {x["name"]: x for x in r["strategies"]}
sync = s["sync_allreduce"]["seconds_per_iteration"]
assert abs(sync - max(compute, end)) < 1e-9, (sync, compute, end)
assert r["sync_hidden_comm_seconds"] > 0 and abs(compute + r["comm_seconds"] - sync - r["sync_hidden_comm_seconds"]) < 1e-9, r
PY

printf '{"traceEvents": [' >"$tmp/truncated.json"

# Beside a busy link the steps take twice as long: each ms of communication
# inside a step delays it by (20 - 10) / 20 ms, so the pipelined step, which the
# 3.562 ms allreduce overlaps throughout, takes 10 + 0.5 * 3.562 ms.
expect 0 "delays it by 0.500 ms" "$nereid" model models/lenet_fashion.pbtxt --workers 4 --batch 32 \
  --profile "$tmp/trace.json" --busy-link-profile "$tmp/busy_trace.json" --compute-stat median \
  --warmup-steps 1 --latency-us 100 --bandwidth-gbit 1 --json "$tmp/busy.json"
python3 - "$tmp/busy.json" <<'PY' || fail "busy-link JSON is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["interference_source"] == "busy_link_profile" and abs(r["comm_interference"] - 0.5) < 1e-12, r
assert abs(r["busy_link_compute_seconds"] - 0.020) < 1e-12, r
s = {x["name"]: x for x in r["strategies"]}
assert abs(s["pipe_sgd"]["seconds_per_iteration"] - (0.010 + 0.5 * r["comm_seconds"])) < 1e-12, s
assert abs(s["sync_allreduce"]["seconds_per_iteration"] - 0.0135617) < 1e-6, s  # one bucket at the end
PY
# Ranks that share cores (the link's report: 4 ranks on 2 cores) take the
# profiles' median as the step's compute; beside busy compute the link is a
# quarter as fast, and only the overlapped rows (Pipe-SGD) run on it.
echo '{"world":4,"alpha_seconds":1e-4,"beta_bytes_per_second":1.25e8,"ranks_on_host":4,"host_cores":2,
  "comm_cpu_seconds_per_byte":0,"cores_per_rank":0.5,"sizes":[]}' >"$tmp/shared.json"
echo '{"world":4,"alpha_seconds":1e-4,"beta_bytes_per_second":3.125e7,"sizes":[]}' >"$tmp/slow.json"
expect 0 "the median (ranks share cores: 0.50 each)" "$nereid" model models/lenet_fashion.pbtxt --workers 4 \
  --batch 32 --profile "$tmp/trace.json" --warmup-steps 1 --link "$tmp/shared.json" \
  --busy-compute-link "$tmp/slow.json" --json "$tmp/shared_out.json"
python3 - "$tmp/shared_out.json" <<'PY' || fail "busy-compute link JSON is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
s = {x["name"]: x for x in r["strategies"]}
assert abs(r["overlapped_comm_seconds"] - 4 * r["comm_seconds"] + 18 * 1e-4) < 1e-9, r  # 6 latencies, 4x the bytes' time
assert abs(s["pipe_sgd"]["seconds_per_iteration"] - max(r["compute_seconds"], r["overlapped_comm_seconds"])) < 1e-12, s
assert abs(s["sync_allreduce"]["comm_seconds"] - r["comm_seconds"]) < 1e-12, s
PY
expect 2 "--busy-compute-link needs --link" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --compute-ms 1 --latency-us 1 --bandwidth-gbit 1 --busy-compute-link "$tmp/slow.json"
expect 2 "--busy-link-profile needs --profile" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --compute-ms 1 --busy-link-profile "$tmp/busy_trace.json" --link "$tmp/bench.json"
expect 1 "truncated.json: not valid JSON" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --profile "$tmp/trace.json" --busy-link-profile "$tmp/truncated.json" --link "$tmp/bench.json"

# Usage errors: exit 2.
expect 2 "no model given" "$nereid" model
expect 2 "--workers is required" "$nereid" model models/lenet_fashion.pbtxt --compute-ms 1 --link "$tmp/bench.json"
expect 2 "--workers must be" "$nereid" model models/lenet_fashion.pbtxt --workers 1 --compute-ms 1 \
  --link "$tmp/bench.json"
expect 2 "give the compute time" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --link "$tmp/bench.json"
expect 2 "give the compute time" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1 \
  --profile "$tmp/trace.json" --link "$tmp/bench.json"
expect 2 "give the link" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1
expect 2 "give the link" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1 \
  --link "$tmp/bench.json" --latency-us 1 --bandwidth-gbit 1
expect 2 "go together" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1 --latency-us 1
expect 2 "is not a number" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms fast \
  --link "$tmp/bench.json"
expect 2 "unknown pass" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1 \
  --link "$tmp/bench.json" --passes bogus

# Bad files: exit 1 with the file named.
expect 1 "truncated.json: not valid JSON" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --profile "$tmp/truncated.json" --link "$tmp/bench.json"
expect 1 "bench.json: not a Chrome trace" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --profile "$tmp/bench.json" --link "$tmp/bench.json"
expect 1 "trace.json: no numeric alpha_seconds" "$nereid" model models/lenet_fashion.pbtxt --workers 2 \
  --compute-ms 1 --link "$tmp/trace.json"
expect 1 "cannot read" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 1 \
  --link "$tmp/missing.json"

finish "nereid model checks"
