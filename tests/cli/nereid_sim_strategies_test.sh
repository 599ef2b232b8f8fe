#!/usr/bin/env bash
# Every strategy, run by `nereid run` with real worker processes, trains the
# same on the simulated device as on the host: the plan with
# place(device=sim, 3 compute streams, random launch delays) appended ends
# with the same parameters (fingerprint) and the same loss at every step as
# the plan without it, and so does the plan with comm=device, where the
# collectives and the sends and receives of planned shapes (the parameter
# server's chunks) run on the sim's streams too, the transfers issued in the
# rank's order of device transfers, as NCCL needs them. The sim runs
# the CPU's kernels on its own memory, so any difference is a scheduling bug
# (a missing wait, a block reused early). A case with `place_also` adds those
# options to the comm=device placement.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

# Prints what a run's metrics say it learnt (parameter fingerprint, the loss
# of every step, the final train loss, test loss and accuracy), or FAILED and
# the run's output.
run() {  # json, args...
  local json=$1
  shift
  local out
  if ! out=$("$nereid" run "$@" --max-steps 6 --train-limit 1024 --test-limit 256 --batch 32 --quiet \
    --metrics-json "$json" 2>&1); then
    echo "FAILED: $out"
    return
  fi
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["parameter_fingerprint"], d["state_fingerprint"], d["step_losses"], d["final_train_loss"], d["per_epoch"][-1]["test_loss"], d["final_test_accuracy"])' "$json"
}

check() {  # name, passes, args...
  local name=$1 passes=$2
  shift 2
  local host sim comm
  host=$(run "$tmp/$name.host.json" "$@" --passes "$passes")
  sim=$(run "$tmp/$name.sim.json" "$@" --passes "$passes,place(device=sim,streams=3,sim_delay_us=100,sim_seed=${#name})")
  comm=$(run "$tmp/$name.comm.json" "$@" \
    --passes "$passes,place(device=sim,streams=3,sim_delay_us=100,sim_seed=${#name},comm=device${place_also:-})")
  if [[ "$host" == FAILED* ]]; then
    fail "$name on the host: $host"
    return
  fi
  [ "$host" == "$sim" ] || fail "$name: the sim differs from the host:\n  host $host\n  sim  $sim"
  [ "$host" == "$comm" ] ||
    fail "$name: the sim with communication on its streams differs from the host:\n  host $host\n  sim  $comm"
  echo "$name: $host"
}

mlp=models/mlp_fashion.pbtxt
logreg=models/logreg_fashion.pbtxt
check data_parallel "autodiff,sgd(lr=0.05,momentum=0.9)" $mlp --workers 2
check pipe_sgd "autodiff,pipeline(width=2),sgd(lr=0.05)" $mlp --workers 2
check qsgd "autodiff,compress(method=qsgd),sgd(lr=0.05)" $mlp --workers 2
# The compressed bucket kept on the host beside the dense one on the sim's
# stream: the world's collectives split in two shares, each issued by engines
# of its own (as host_ops=CompressedAllReduce runs on cuda).
place_also=",host_ops=CompressedAllReduce" check qsgd_split "autodiff,compress(method=qsgd),sgd(lr=0.05)" $mlp \
  --workers 2
check hybrid "hybrid_partition(group_size=2),autodiff,sgd(lr=0.05)" $mlp --workers 2
# A declared group split: its reduce-scatters on the host, its all-gathers
# (evaluated too) on the sim.
place_also=",host_ops=GroupReduceScatter" check hybrid_split "hybrid_partition(group_size=2),autodiff,sgd(lr=0.05)" \
  $mlp --workers 2
check sgp "autodiff,sgd(lr=0.05,momentum=0.9),gossip" $mlp --workers 3
check sgp_bf16 "autodiff,sgd(lr=0.05,momentum=0.9),gossip,compress(method=bf16)" $mlp --workers 3
check parameter_server "autodiff,sgd(lr=0.05),parameter_server(servers=1)" $logreg --workers 2 --servers 1
check coded "autodiff,sgd(lr=0.05),coded(scheme=rlnc,k=2,degree=2)" $logreg --workers 3
check colocated_collective "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(colocated=true,exchange=collective,chunk_kb=64)" \
  $mlp --workers 2
# Its transfers, some to the rank itself, in each rank's transfer order.
check colocated_p2p "autodiff,sgd(lr=0.05,momentum=0.9),parameter_server(colocated=true,exchange=p2p,chunk_kb=64)" \
  $mlp --workers 2

# Checkpoints are portable: two epochs on one side and the third on the
# other end where three on the host do, both ways.
portable() {  # first side's placement, second side's placement
  local dir="$tmp/ckpt$RANDOM"
  local common=(models/mlp_fashion.pbtxt --train-limit 512 --test-limit 128 --batch 32 --quiet --checkpoint "$dir")
  local opt="autodiff,sgd(lr=0.05,momentum=0.9)"
  "$nereid" run "${common[@]}" --epochs 2 --passes "$opt$1" >/dev/null 2>&1 || fail "2 epochs with '$1' failed"
  local out
  out=$("$nereid" run "${common[@]}" --epochs 3 --passes "$opt$2" --resume --metrics-json "$dir/resumed.json" 2>&1) ||
    fail "resuming with '$2' a checkpoint written with '$1': $out"
  "$nereid" run "${common[@]/$dir/$dir.fresh}" --epochs 3 --passes "$opt" --metrics-json "$dir/fresh.json" >/dev/null 2>&1
  local resumed fresh
  resumed=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameter_fingerprint"])' "$dir/resumed.json")
  fresh=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameter_fingerprint"])' "$dir/fresh.json")
  [ -n "$fresh" ] && [ "$resumed" == "$fresh" ] || fail "'$1' then '$2': parameters $resumed, not the host's $fresh"
}
portable ",place(device=sim,streams=2,sim_delay_us=50)" ""
portable "" ",place(device=sim,streams=3)"
finish "sim strategy checks"
