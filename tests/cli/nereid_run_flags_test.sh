#!/usr/bin/env bash
# `nereid run` refuses bad flags at once, before loading data or training:
# exit 2 and a message naming the flag.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

model=models/logreg_fashion.pbtxt
expect 2 "--threads must be >= 1 (got 0)" "$nereid" run $model --threads 0
expect 2 "--threads must be >= 1 (got -1)" "$nereid" run $model --threads -1
expect 2 "--max-steps must be >= 0 (got -1)" "$nereid" run $model --max-steps -1
expect 2 "--seed must be >= 0 (got -1)" "$nereid" run $model --seed -1
expect 2 "--batch must be >= 1 (got 0)" "$nereid" run $model --batch 0
expect 2 "--epochs must be >= 1 (got 0)" "$nereid" run $model --epochs 0
expect 2 "--test-limit must be >= 0 (got -5)" "$nereid" run $model --test-limit -5
expect 2 "--workers 1000: at most" "$nereid" run $model --workers 1000
expect 2 "--threads 100000: at most" "$nereid" run $model --threads 100000
expect 2 "--threads 100000: at most 1024 even with --oversubscribe" "$nereid" run $model --threads 100000 --oversubscribe
# Mistyped flags: a near name is suggested; a forgotten value is not filled
# with the next flag; a single dash is not taken for a file; switches take
# true or false.
expect 2 "unknown flag --epoch (did you mean --epochs?)" "$nereid" run $model --epoch 2
expect 2 "--epochs needs a value (got the flag --batch)" "$nereid" run $model --epochs --batch 3
expect 2 "unknown flag -epochs: flags start with --" "$nereid" run $model -epochs 2
expect 2 "--quiet=maybe: a switch is true or false" "$nereid" run $model --quiet=maybe
expect 0 "epoch 1/1 step 1/1" "$nereid" run $model --dataset synthetic --max-steps 1 --test-limit 32 --quiet=false
expect 2 "it needs --checkpoint DIR" "$nereid" run $model --workers 2 --max-restarts 1
expect 2 "--max-restarts must be in [0, 1000] (got -1)" "$nereid" run $model --max-restarts -1
expect 2 "--checkpoint-every must be >= 0 and needs --checkpoint DIR" "$nereid" run $model --checkpoint-every 5
expect 2 "--stall-check must be a percent in [0, 100] (got 101)" "$nereid" run $model --stall-check 101
expect 2 "--normalize 'zscore': expected default, none, MEAN/STDDEV" "$nereid" run $model --normalize zscore
expect 2 "--normalize '0.5/0': a stddev must be > 0" "$nereid" run $model --normalize 0.5/0
expect 2 "--transport must be gloo, shm, hierarchical or auto (got 'tcp')" "$nereid" run $model --transport tcp
# The local launcher plans once, before any worker starts: a misspelt pass
# with --workers 4 starts no process (the launcher logs each one it starts at
# debug level), and a good pipeline starts exactly four.
out=$("$nereid" run $model --workers 4 --passes autodif --log-level debug 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a misspelt pass with --workers 4: exit $rc, not 2: $out"
grep -q "unknown pass 'autodif'" <<<"$out" || fail "the misspelt pass is not named: $out"
[ "$(grep -c 'started process' <<<"$out")" -eq 0 ] || fail "workers started before the pipeline was checked: $out"
out=$("$nereid" run $model --dataset synthetic --workers 4 --max-steps 1 --test-limit 32 --quiet --log-level debug 2>&1) \
  || fail "a 4-worker run failed: $out"
[ "$(grep -c 'started process' <<<"$out")" -eq 4 ] || fail "a 4-worker run did not start 4 processes: $out"
# A checkpoint from 2 workers does not resume a run on 1 (or the reverse).
"$nereid" run $model --dataset synthetic --workers 2 --max-steps 2 --test-limit 32 --quiet \
  --checkpoint "$tmp/ckpt2" >/dev/null 2>&1 || fail "the 2-worker run to resume failed"
expect 1 "workers 2 there, 1 here" "$nereid" run $model --dataset synthetic --max-steps 4 --test-limit 32 --quiet \
  --checkpoint "$tmp/ckpt2" --resume
# On a terminal the README's main job redraws its progress bar in place with
# several workers too (the launcher passes the worker's redraws through);
# script(1) gives the run a terminal.
script -qec "$nereid run $model --dataset synthetic --workers 2 --batch 16 --train-limit 1024 --test-limit 64" \
  /dev/null >"$tmp/tty.out" 2>&1 || fail "the run on a terminal failed: $(tail -5 "$tmp/tty.out")"
[ "$(grep -c $'\r\\[rank 0\\] epoch 1/1 \\[' "$tmp/tty.out")" -ge 1 ] ||
  fail "no progress bar redrawn in place on a terminal: $(cat -v "$tmp/tty.out" | head -20)"
! grep -q "epoch 1/1 step" "$tmp/tty.out" || fail "plain progress lines on a terminal: $(cat -v "$tmp/tty.out" | head -20)"
# A launcher killed with SIGKILL leaves its rendezvous directory, unlocked;
# the next launch removes it, and keeps one whose launcher still holds its
# lock (flock(1) stands in for a live launcher here).
mkdir -p "$tmp/nereid-run-dead00" "$tmp/nereid-run-live00"
flock "$tmp/nereid-run-live00" sleep 30 &
holder=$!
sleep 0.3
TMPDIR="$tmp" "$nereid" run $model --dataset synthetic --workers 2 --max-steps 1 --test-limit 32 --quiet >/dev/null 2>&1 \
  || fail "a 2-worker run failed"
[ ! -e "$tmp/nereid-run-dead00" ] || fail "a dead launcher's rendezvous directory was left"
[ -e "$tmp/nereid-run-live00" ] || fail "a live launcher's rendezvous directory was removed"
kill "$holder" 2>/dev/null
touch "$tmp/a_file"
expect 2 "--checkpoint $tmp/a_file is a file, not a directory" "$nereid" run $model --checkpoint "$tmp/a_file"
expect 2 "the directory $tmp/missing does not exist" "$nereid" run $model --metrics-json "$tmp/missing/m.json"
expect 2 "--trace $tmp is a directory, not a file" "$nereid" run $model --trace "$tmp"
# The bounds are not off by one: the smallest good values run.
expect 0 "1 epochs" "$nereid" run $model --dataset synthetic --threads 1 --max-steps 1 --seed 0 --batch 1 \
  --epochs 1 --test-limit 10 --metrics-json "$tmp/m.json" --quiet

# --log-jsonl streams the run: a start line with the run's total (max-steps
# honoured), a line per step with its loss, time and bytes, epoch and end
# lines; progress shows the same total and an ETA.
out=$("$nereid" run $model --dataset synthetic --workers 2 --max-steps 12 --batch 16 --test-limit 64 \
  --log-jsonl "$tmp/run.jsonl" 2>&1) || fail "the --log-jsonl run failed: $out"
grep -q "step 12/12" <<<"$out" || fail "progress does not show --max-steps as the total: $out"
grep -q "ETA [0-9]" <<<"$out" || fail "progress shows no ETA: $out"
python3 - "$tmp/run.jsonl" <<'PY' || fail "--log-jsonl is wrong"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
events = [l["event"] for l in lines]
assert events[0] == "start" and events[-1] == "end", events
assert lines[0]["steps"] == 12 and lines[0]["workers"] == 2, lines[0]
steps = [l for l in lines if l["event"] == "step"]
assert [l["step"] for l in steps] == list(range(1, 13)), steps
assert all(l["loss"] > 0 and l["step_seconds"] > 0 and l["samples"] == 16 for l in steps), steps
assert sum(l["bytes_sent"] for l in steps) > 0, steps  # the gradients' allreduces
assert any(l["event"] == "epoch" and 0 <= l["test_accuracy"] <= 1 for l in lines), lines
assert lines[-1]["steps"] == 12, lines[-1]
PY
expect 2 "--log-jsonl $tmp is a directory, not a file" "$nereid" run $model --log-jsonl "$tmp"

# --config FILE: the settings in a RunConfig text file; the command line
# overrides them; a syntax error names the line and column.
cat > "$tmp/run.cfg" <<CFG
world_size: 2
batch_per_worker: 16
passes: "autodiff,sgd(lr=0.05)"
option { key: "max-steps" value { i: 7 } }
option { key: "dataset" value { s: "synthetic" } }
option { key: "quiet" value { b: true } }
option { key: "metrics-json" value { s: "$tmp/cfg.json" } }
CFG
"$nereid" run $model --config "$tmp/run.cfg" --test-limit 64 >/dev/null 2>&1 || fail "the --config run failed"
grep -q '"steps":7' "$tmp/cfg.json" && grep -q '"workers":2' "$tmp/cfg.json" && grep -q '"batch_per_worker":16' "$tmp/cfg.json" \
  || fail "the --config settings were not applied: $(cat "$tmp/cfg.json")"
"$nereid" run $model --config "$tmp/run.cfg" --max-steps 3 --test-limit 64 >/dev/null 2>&1 || fail "override run failed"
grep -q '"steps":3' "$tmp/cfg.json" || fail "the command line did not override --config: $(cat "$tmp/cfg.json")"
grep -q '"version":"0\.' "$tmp/cfg.json" && grep -q '"finished_unix_seconds":' "$tmp/cfg.json" \
  || fail "the metrics carry no version or time: $(cat "$tmp/cfg.json")"
printf 'epochs: x\n' > "$tmp/bad.cfg"
expect 2 "--config $tmp/bad.cfg:1:9: parse error" "$nereid" run $model --config "$tmp/bad.cfg"
printf 'option { key: "epochz" value { i: 2 } }\n' > "$tmp/unknown.cfg"
expect 2 "epochz" "$nereid" run $model --config "$tmp/unknown.cfg"

# Traces of the ranks of one run share one clock; nereid trace summarises
# and merges them.
"$nereid" run $model --dataset synthetic --workers 2 --max-steps 6 --test-limit 64 --quiet \
  --trace "$tmp/t.json" >/dev/null 2>&1 || fail "the traced run failed"
expect 0 "steps" "$nereid" trace summary "$tmp/t.rank0.json" "$tmp/t.rank1.json"
"$nereid" trace summary "$tmp/t.rank1.json" "$tmp/t.rank0.json" | awk 'NR > 1 && $2 ~ /^[0-9]+$/ { print $1, $2 }' > "$tmp/rows"
printf '0 6\n1 6\n' | cmp -s - "$tmp/rows" || fail "trace summary rows: $(cat "$tmp/rows")"
expect 0 "2 ranks on one clock" "$nereid" trace merge "$tmp/t.rank0.json" "$tmp/t.rank1.json" -o "$tmp/merged.json"
python3 - "$tmp" <<'PY' || fail "the traces do not share a clock, or the merge lost events"
import json, sys
d = sys.argv[1]
ranks = [json.load(open(f"{d}/t.rank{r}.json"))["traceEvents"] for r in (0, 1)]
origins = {ev[0]["args"]["clock_origin_unix_us"] for ev in ranks}
assert len(origins) == 1, origins
merged = json.load(open(f"{d}/merged.json"))["traceEvents"]
assert len(merged) == sum(len(ev) for ev in ranks), (len(merged), [len(ev) for ev in ranks])
assert {e["pid"] for e in merged} == {0, 1}
PY
expect 2 "nereid trace merge TRACE... -o OUT" "$nereid" trace merge "$tmp/t.rank0.json"
echo '{"x": 1}' > "$tmp/not_a_trace.json"
expect 1 "not a trace-event file" "$nereid" trace summary "$tmp/not_a_trace.json"
expect 1 "are both rank 0" "$nereid" trace merge "$tmp/t.rank0.json" "$tmp/t.rank0.json" -o "$tmp/twice.json"

# Under a launcher (torchrun's variables here): a world of 2 with no way to
# meet is refused, never trained alone.
expect 2 "there is no way to meet the others" env -u MASTER_ADDR -u MASTER_PORT RANK=0 WORLD_SIZE=2 \
  "$nereid" run $model --dataset synthetic --max-steps 1 --quiet
# Two processes started as torchrun starts them meet at MASTER_ADDR and the
# port after MASTER_PORT (torchrun's agent holds MASTER_PORT: a listener here
# stands in for it) and train together. The store takes MASTER_PORT + 1, so
# both must be free (a port chosen alone once found its successor taken).
port=$(python3 -c '
import socket
for _ in range(100):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
    finally:
        a.close(); b.close()
')
timeout 60 python3 -c 'import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$port" &
agent=$!
sleep 0.5
pids=()
for r in 0 1; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 TORCHELASTIC_RUN_ID="flags-$$" timeout 120 \
    "$nereid" run $model --dataset synthetic --max-steps 5 --test-limit 64 --quiet --comm-timeout 30 \
    --metrics-json "$tmp/torchrun$r.json" > "$tmp/torchrun$r.log" 2>&1 &
  pids+=($!)
done
for r in 0 1; do wait "${pids[$r]}" || fail "torchrun-style rank $r exited non-zero: $(cat "$tmp/torchrun$r.log")"; done
kill "$agent" 2>/dev/null
grep -q '"workers": *2' "$tmp/torchrun0.json" || fail "the torchrun-style run did not train as 2 workers: $(cat "$tmp/torchrun0.json")"
# Two "machines" on loopback, each a local launcher of 2 workers: ranks 0-1
# and 2-3 of one 4-worker run meeting at node 0's TCP store. Named as two
# hosts, auto picks the hierarchical transport: each machine's pair through
# shared memory, its first rank (node 1's is not the store's rank 0) over TCP.
expect 2 "every machine needs the same --rendezvous" "$nereid" run $model --nnodes 2 --node-rank 0 --workers 2
expect 2 "--node-rank in [0, nnodes)" "$nereid" run $model --nnodes 2 --node-rank 2 --rendezvous tcp://127.0.0.1:1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for k in 0 1; do
  NEREID_HOST_ID=node$k timeout 120 "$nereid" run $model --dataset synthetic --max-steps 5 --test-limit 64 --quiet \
    --comm-timeout 30 --nnodes 2 --node-rank $k --workers 2 --threads 1 --rendezvous "tcp://127.0.0.1:$port" \
    --transport auto \
    --metrics-json "$tmp/node$k.json" > "$tmp/node$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1; do wait "${pids[$k]}" || fail "node $k exited non-zero: $(cat "$tmp/node$k.log")"; done
grep -q '"workers": *4' "$tmp/node0.json" || fail "the two launchers did not train as 4 workers: $(cat "$tmp/node0.json")"
grep -q '"transport": *"hierarchical"' "$tmp/node0.json" || fail "auto across machines: $(cat "$tmp/node0.json")"
[ ! -e "$tmp/node1.json" ] || fail "node 1 wrote rank 0's metrics"
# The standardisation is explicit and reported.
expect 0 "1 epochs" "$nereid" run $model --dataset synthetic --max-steps 1 --test-limit 32 --threads 1 \
  --normalize 0.5/0.25 --metrics-json "$tmp/normalized.json"
grep -q '"normalization": *"(x - 0.5) / 0.25"' "$tmp/normalized.json" ||
  fail "the metrics do not say how the inputs were normalised: $(cat "$tmp/normalized.json")"
# [N, D] data feeds an image model when the element counts agree: npy and
# CSV rows of 784 values train lenet (an Input [-1, 1, 28, 28]).
/usr/bin/python3 - "$tmp/flat" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
for split, n in (("train", 64), ("test", 32)):
    x = rng.random((n, 784), dtype=np.float32)
    y = np.arange(n) % 10
    np.savez(f"{d}/{split}.npz", images=x, labels=y.astype(np.int64))
    np.savetxt(f"{d}/{split}.csv", np.column_stack([x, y]), delimiter=",", fmt="%.4f")
PY
expect 0 "1 epochs, 1 steps" "$nereid" run models/lenet_fashion.pbtxt --dataset "npy:$tmp/flat" --threads 1 --quiet
expect 0 "1 epochs, 1 steps" "$nereid" run models/lenet_fashion.pbtxt --dataset "csv:$tmp/flat" --threads 1 --quiet
# A tagger: int64 token ids [N, 6] and one label per position ([N, 6],
# -100 where a position is padding) train an embedding + linear model whose
# logits are [B, 6, 5]; the accuracy counts positions, skipping padding.
# The task (label = id mod 5) is learnable exactly; chance is 20%.
/usr/bin/python3 - "$tmp/tagged" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(1)
for split, n in (("train", 512), ("test", 128)):
    ids = rng.integers(0, 20, size=(n, 6)).astype(np.int64)
    labels = ids % 5
    labels[:, 5] = -100  # the last position is padding
    np.savez(f"{d}/{split}.npz", images=ids, labels=labels)
with open(f"{d}/tagger.pbtxt", "w") as f:
    f.write("""
attr { key: "loss" value { s: "loss" } }
attr { key: "logits" value { s: "logits" } }
attr { key: "num_classes" value { i: 5 } }
node { name: "ids" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 6 } } }
       attr { key: "dtype" value { type: DT_INT64 } } attr { key: "feed" value { s: "images" } } }
node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 6 } } }
       attr { key: "dtype" value { type: DT_INT32 } } attr { key: "feed" value { s: "labels" } } }
node { name: "table" op: "Parameter" attr { key: "shape" value { shape { dim: 20 dim: 16 } } } }
node { name: "embedded" op: "Gather" input: "table" input: "ids" }
node { name: "w" op: "Parameter" attr { key: "shape" value { shape { dim: 16 dim: 5 } } } }
node { name: "logits" op: "BatchMatMul" input: "embedded" input: "w" }
node { name: "loss" op: "SoftmaxCrossEntropy" input: "logits" input: "labels" }
""")
PY
expect 0 "3 epochs" "$nereid" run "$tmp/tagged/tagger.pbtxt" --dataset "npy:$tmp/tagged" --epochs 3 --batch 32 --passes "autodiff,sgd(lr=0.5)" \
  --threads 1 --quiet --metrics-json "$tmp/tagged/metrics.json"
/usr/bin/python3 - "$tmp/tagged/metrics.json" <<'PY' || fail "the tagger did not learn its positions"
import json, sys
m = json.load(open(sys.argv[1]))
acc = m["final_test_accuracy"]
print(f"tagger: test accuracy over positions {acc:.3f} (chance 0.2)")
assert acc > 0.9, acc
PY
# Text as a character-level task: windows of T byte ids with next-byte labels
# (text:PATH; "fortunes" is Debian's fortune files, installed by setup.sh).
# An embedding + linear model is a bigram model; chance is 8 bits per byte.
/usr/bin/python3 - "$tmp/chars" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
with open(f"{d}/corpus.txt", "w") as f:
    f.write("the quick brown fox jumps over the lazy dog. " * 400)
with open(f"{d}/bigram.pbtxt", "w") as f:
    f.write("""
attr { key: "loss" value { s: "loss" } }
attr { key: "logits" value { s: "logits" } }
attr { key: "num_classes" value { i: 256 } }
node { name: "ids" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 32 } } }
       attr { key: "dtype" value { type: DT_INT64 } } attr { key: "feed" value { s: "images" } } }
node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 32 } } }
       attr { key: "dtype" value { type: DT_INT32 } } attr { key: "feed" value { s: "labels" } } }
node { name: "table" op: "Parameter" attr { key: "shape" value { shape { dim: 256 dim: 32 } } } }
node { name: "embedded" op: "Gather" input: "table" input: "ids" }
node { name: "w" op: "Parameter" attr { key: "shape" value { shape { dim: 32 dim: 256 } } } }
node { name: "logits" op: "BatchMatMul" input: "embedded" input: "w" }
node { name: "loss" op: "SoftmaxCrossEntropy" input: "logits" input: "labels" }
""")
PY
expect 0 "2 epochs" "$nereid" run "$tmp/chars/bigram.pbtxt" --dataset "text:$tmp/chars/corpus.txt" --epochs 2 \
  --batch 16 --passes "autodiff,adam(lr=0.02)" --threads 1 --quiet --metrics-json "$tmp/chars/metrics.json" \
  --eval-every 3
/usr/bin/python3 - "$tmp/chars/metrics.json" <<'PY' || fail "the bigram model did not learn the text"
import json, math, sys
m = json.load(open(sys.argv[1]))
bits = m["per_epoch"][-1]["test_loss"] / math.log(2)
print(f"bigram on a repeated sentence: {bits:.2f} bits per character on the held-out 10%")
assert bits < 2.0, bits
# --eval-every 3: scores within the epochs at multiples of 3 steps, in bits
# per position too; tokens per second are positions, not windows.
scored = m["evaluations"]
assert scored and all(e["step"] % 3 == 0 for e in scored), scored
assert all(abs(e["test_bits_per_token"] - e["test_loss"] / math.log(2)) < 1e-9 for e in scored), scored
assert abs(m["tokens_per_second"] / m["samples_per_second"] - 32) < 1e-6, m["tokens_per_second"]
print(f"{len(scored)} evaluations within epochs, at steps {[e['step'] for e in scored]}")
PY
expect 2 "--eval-every must be >= 0" "$nereid" run "$tmp/chars/bigram.pbtxt" --eval-every -1
# The byte transformer of models/ (generate_models.char_transformer), made
# tiny: causal (logits before a position do not change when the text after it
# does; without the mask they would), and it uses its context (far below the
# bigram's bits on the repeated sentence).
/usr/bin/python3 - "$tmp/chars" <<'PY'
import sys
import numpy as np
sys.path.insert(0, "models")
from generate_models import char_transformer
d = sys.argv[1]
char_transformer(layers=1, width=32, heads=2, context=16, name="tiny_lm", dataset="text").save(f"{d}/tiny_lm.pbtxt")
a = np.random.default_rng(0).integers(97, 123, size=(2, 16)).astype(np.int64)
b = a.copy()
b[:, 10:] = 32
np.savez(f"{d}/a.npz", ids=a)
np.savez(f"{d}/b.npz", ids=b)
PY
for x in a b; do
  expect 0 "logits: float32[2,16,256]" "$nereid" infer "$tmp/chars/tiny_lm.pbtxt" --inputs "$tmp/chars/$x.npz" \
    -o "$tmp/chars/$x.out.npz"
done
expect 0 "2 epochs" "$nereid" run "$tmp/chars/tiny_lm.pbtxt" --dataset "text:$tmp/chars/corpus.txt" --epochs 2 \
  --batch 16 --passes "autodiff,adam(lr=0.01)" --threads 1 --quiet --metrics-json "$tmp/chars/lm.json" \
  --checkpoint "$tmp/chars/ckpt"
# nereid generate continues a prompt with the trained model (greedy here).
expect 0 "the quick brown fox jumps over the lazy dog. the quick" "$nereid" generate "$tmp/chars/ckpt" \
  --model "$tmp/chars/tiny_lm.pbtxt" --prompt "the quick" --tokens 50 --temperature 0
expect 1 "not a byte-level language model" "$nereid" generate "$tmp/chars/ckpt" --model models/mlp_fashion.pbtxt \
  --prompt "x"
expect 2 "give one CHECKPOINT" "$nereid" generate --model "$tmp/chars/tiny_lm.pbtxt" --prompt "x"
/usr/bin/python3 - "$tmp/chars" <<'PY' || fail "the transformer is not causal, or did not use its context"
import json, math, sys
import numpy as np
d = sys.argv[1]
ya, yb = np.load(f"{d}/a.out.npz")["logits"], np.load(f"{d}/b.out.npz")["logits"]
before, after = np.abs(ya[:, :10] - yb[:, :10]).max(), np.abs(ya[:, 10:] - yb[:, 10:]).max()
print(f"transformer: logits before the changed text moved {before}, after it {after:.3f}")
assert before == 0 and after > 0, (before, after)
bits = json.load(open(f"{d}/lm.json"))["per_epoch"][-1]["test_loss"] / math.log(2)
print(f"transformer on the repeated sentence: {bits:.3f} bits per character (the bigram: about 0.9)")
assert bits < 0.5, bits
PY
if [ -d /usr/share/games/fortunes ]; then
  expect 0 "step 2 (epoch 1): test accuracy" "$nereid" run "$tmp/chars/bigram.pbtxt" --dataset fortunes \
    --train-limit 64 --test-limit 16 --batch 16 --threads 1 --eval-every 2
  expect 0 "bits/char)" "$nereid" run "$tmp/chars/bigram.pbtxt" --dataset fortunes --train-limit 64 \
    --test-limit 16 --batch 16 --threads 1 --eval-every 2
fi
finish "nereid run flag checks"
