#!/usr/bin/env bash
# Data-parallel training under the real torchrun of the venv (Gloo on loopback), one case per call:
#   equal_image  cnn_small (BatchNorm) with model.sync_batchnorm: 2 ranks × batch B == 1 rank × ONE batch of 2B
#                (statistics of the global batch), flips drawn by global position: losses, parameters AND running
#                statistics within 1e-5 over 20 steps; then per-rank statistics (the default): 2 ranks × B == 1 rank
#                × 2B in micro-batches of B (running statistics are rank 0's alone, not compared); the same for
#                efficientnet_b0 (classifier dropout 0.2, stochastic depth up to 0.2, keyed by the sample's global
#                position): 2 ranks × 8 == 1 rank × 16 in micro-batches of 8 within 1e-5
#   equal_text   2 ranks × batch B == 1 rank × batch 2B for a LoRA BERT text recipe with dropout on (hidden 0.1,
#                attention 0.1, LoRA 0.1: masks keyed by the run seed, the epoch and the sample); no-sync accumulation too
#   kill_resume  kill -9 one rank at a random step: the job stops within the timeout with a line naming
#                the rank; --resume on 2 ranks == an uninterrupted 2-rank run (metrics and weights, byte for byte)
#   (both also run `hotpath train --nproc 2`, which must train the very model torchrun's ranks do)
#   resume_world a 2-rank run (× B) stopped at step 8 and resumed on 1 rank (× 2B, the same global batch), and the
#                reverse, == the uninterrupted 2-rank run within 1e-5 (losses, weights, running statistics); resuming
#                at another global batch is refused with one line naming both world sizes and global batches, and a
#                text checkpoint on another world size at all (its batches are planned per rank)
#   sigterm      SIGTERM to rank 1 alone: every rank finishes the same step, rank 0 checkpoints, all exit 130;
#                --resume == an uninterrupted run byte for byte
#   two_nodes    two network namespaces joined by a veth pair, `torchrun --nnodes 2` with one rank in each
#                (GLOO_SOCKET_IFNAME = its veth end) == the same 2 ranks on one host (skips with one line where
#                network namespaces are not permitted)
#   bad_input    another recipe on one rank, an unreachable master, a checkpoint from another world size; a rank
#                that fails early (a bad recipe, before the store) stops the other well within the timeout with
#                one line naming it and its error (plain RANK/WORLD_SIZE launch: no torchrun to kill it)
#   timeouts     train.dist_timeout_s T=4: the surviving rank exits non-zero within T + 3 s with one line naming what
#                it waited for and the timeout, when rank 1 never starts (torchrun, and rank 0 alone in a plain
#                launch), rank 0 never starts (rank 1 alone: the store), rank 1 is SIGSTOPped or killed mid-run,
#                rank 0 hosting the store (plain launch) is SIGSTOPped mid-run, the store's address accepts but never
#                answers
# Usage: distributed_test.sh CASE HOTPATH PYTHON [SEED]
set -uo pipefail
case_=$1
hp=$(realpath "$2")
python=$3
seed=${4:-$RANDOM}
# shellcheck source=dist_lib.sh
source "$(dirname "$0")/dist_lib.sh"

# compare RUN_A RUN_B MODEL_FILE TOL: train losses line by line and every tensor of the model within TOL.
compare() {
  "$python" - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
from safetensors.numpy import load_file
a, b, model, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
la = [json.loads(l) for l in open(f"{a}/metrics.jsonl") if '"train"' in l]
lb = [json.loads(l) for l in open(f"{b}/metrics.jsonl") if '"train"' in l]
assert len(la) == len(lb) and len(la) >= 20, f"{len(la)} vs {len(lb)} train lines"
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(la, lb))
wa, wb = load_file(f"{a}/{model}"), load_file(f"{b}/{model}")
assert wa.keys() == wb.keys(), "different tensors"
# BatchNorm running statistics: rank 0's own batches unless synchronised (COMPARE_BUFFERS=TOL: compared within TOL)
import os
buffer_tol = float(os.environ.get("COMPARE_BUFFERS", "inf"))
def diff(k): return float(abs(wa[k].astype("float64") - wb[k].astype("float64")).max())
buffer = lambda k: "running_" in k or "num_batches" in k
wworst = max(diff(k) for k in wa if wa[k].size and not buffer(k))
bworst = max([diff(k) for k in wa if wa[k].size and buffer(k)] if buffer_tol != float("inf") else [0.0])
print(f"{len(la)} steps: max |loss diff| {worst:.2e}, max |weight diff| {wworst:.2e}" +
      (f", max |running statistics diff| {bworst:.2e}" if buffer_tol != float("inf") else "") +
      f" (first loss {la[0]['loss']:.4f}, last {la[-1]['loss']:.4f})")
sys.exit(0 if worst <= tol and wworst <= tol and bworst <= buffer_tol else 1)
PY
}

# NAME RECIPE MODEL_FILE BATCH ONE_RANK_ACCUM [KEY=VALUE for the accumulation pair]: 1 rank × 2B in
# ONE_RANK_ACCUM micro-batches against 2 ranks × B; then 2 ranks accumulating against 1 rank.
equal_case() {
  local name=$1 recipe=$2 model=$3 b=$4 acc=$5 extra=()
  [ -n "${6:-}" ] && [ "$6" != none ] && extra=(--set "$6")
  "$hp" train "$recipe" --quiet --set "output_dir=$work/$name-one" --set "train.batch_size=$((2 * b))" \
    --set "train.accum_steps=$acc" >"$name-one.log" 2>&1 || { fail "$name: 1 rank failed: $(tail -3 "$name-one.log")"; return; }
  trun "$hp" train "$recipe" --quiet --set "output_dir=$work/$name-two" >"$name-two.log" 2>&1 ||
    { fail "$name: 2 ranks failed: $(tail -5 "$name-two.log")"; return; }
  grep -q "all-reduce wait" "$name-two.log" || fail "$name: no all-reduce wait phase in the step-time summary"
  # hotpath's own launcher (--nproc 2) == torchrun's, byte for byte.
  "$hp" train "$recipe" --quiet --nproc 2 --set "output_dir=$work/$name-nproc" >"$name-nproc.log" 2>&1 ||
    fail "$name: --nproc 2 failed: $(tail -3 "$name-nproc.log")"
  cmp -s "$work/$name-two/$model" "$work/$name-nproc/$model" && echo "$name: --nproc 2 == torchrun --nproc-per-node 2" ||
    fail "$name: --nproc 2 trained another model than torchrun"
  echo -n "$name, 1 rank × $((2 * b)) vs 2 ranks × $b: "
  compare "$name-one" "$name-two" "$model" 1e-5 || fail "$name: 2 ranks × $b differ from 1 rank × $((2 * b))"
  [ "${6:-}" = none ] && return
  local ref="$name-one"
  if [ "$acc" -gt 1 ]; then  # BatchNorm: the reference takes micro-batches of B/2 too
    ref="$name-one4"
    "$hp" train "$recipe" --quiet --set "output_dir=$work/$ref" --set "train.batch_size=$((2 * b))" \
      --set "train.accum_steps=$((2 * acc))" "${extra[@]}" >"$ref.log" 2>&1 || { fail "$name: 1 rank failed: $(tail -3 "$ref.log")"; return; }
  fi
  trun "$hp" train "$recipe" --quiet --set "output_dir=$work/$name-accum" --set train.accum_steps=2 "${extra[@]}" \
    >"$name-accum.log" 2>&1 || { fail "$name: 2 ranks with accumulation failed: $(tail -5 "$name-accum.log")"; return; }
  echo -n "$name, 1 rank × $((2 * b)) vs 2 ranks × 2 micro-batches of $((b / 2)) (no-sync): "
  compare "$ref" "$name-accum" "$model" 1e-5 || fail "$name: no-sync accumulation differs from the large batch"
}

case "$case_" in
  equal_image)
    image_fixture
    # No accumulation pair here: on 2 ranks the micro-batches' gradients are summed in another order (each
    # rank's, then the ranks'), 1e-7 apart at step 1, and this small BatchNorm CNN amplifies that about
    # 10× a step (1e-3 by step 20 at lr 0.05, 1e-4 at lr 0.01, measured). The text case and
    # distributed_tests' NoSyncAccumulationEqualsTheLargeBatch check no-sync.
    # sync_batchnorm: one batch of 2B on 1 rank has no micro-batch order to mirror (its conv weight gradients
    # are reduced over 2B rows at once, 2 ranks reduce B then add), so the runs differ by fp32 rounding from
    # step 2 (1e-7) and this CNN amplifies it with the learning rate (max |loss diff| over 20 steps, measured:
    # lr 0.05 7.9e-4, 0.01 2.7e-5, 0.003 1.0e-5, 0.001 3.0e-6); hence lr 0.001 here. Running statistics
    # (activation means) carry the weights' drift: 6e-8 after step 1, 2.4e-7 after 5, 3.1e-5 after 20 at
    # lr 0.001 — compared within 1e-4. Without sync_batchnorm the same pair differs by 2e-3 at step 1.
    sed -e 's/model: {name: cnn_small, num_classes: 10}/model: {name: cnn_small, num_classes: 10, sync_batchnorm: true}/' \
      -e 's/lr: 0.05,/lr: 0.001,/' image.yaml > image-sync.yaml
    grep -q "sync_batchnorm: true" image-sync.yaml && grep -q "lr: 0.001," image-sync.yaml ||
      { echo "cannot write the sync_batchnorm recipe" >&2; exit 1; }
    export COMPARE_BUFFERS=1e-4
    equal_case image-sync image-sync.yaml model.safetensors 32 1 none
    unset COMPARE_BUFFERS
    equal_case image image.yaml model.safetensors 32 2 none
    # Dropout and stochastic depth: efficientnet_b0 (classifier dropout 0.2, block b's stochastic depth 0.2 × b/16)
    # at 28×28, 2 ranks × 8 vs 1 rank × 16 in micro-batches of 8 (per-rank BatchNorm statistics), masks keyed by
    # (seed, epoch, the sample's global position). Measured (seed 1234): max |loss diff| 2.4e-7, weights
    # identical; the build before keyed image dropout (each rank drawing from its own default generator) fails
    # it at 3.5 / 2.1. Not with sync_batchnorm: one batch of 16 vs 2 × 8 through EfficientNet's 49 BatchNorm
    # layers on maps down to 1×1 already differs by 3.5e-5 at step 1 (fp32 rounding, amplified; no dropout in that).
    sed -e 's/model: {name: cnn_small, num_classes: 10}/model: {name: efficientnet_b0, num_classes: 10}/' \
      -e 's/lr: 0.05,/lr: 0.001,/' -e 's/batch_size: 32,/batch_size: 8,/' image.yaml > image-dropout.yaml
    grep -q "efficientnet_b0" image-dropout.yaml && grep -q "batch_size: 8," image-dropout.yaml ||
      { echo "cannot write the dropout recipe" >&2; exit 1; }
    equal_case image-dropout image-dropout.yaml model.safetensors 8 2 none
    ;;
  equal_text)
    text_fixture
    equal_case text text.yaml model/model.safetensors 8 1
    ;;
  kill_resume)
    image_fixture
    trun "$hp" train image.yaml --quiet --set "output_dir=$work/a" >a.log 2>&1 || fail "uninterrupted run: $(tail -5 a.log)"
    trun "$hp" train image.yaml --quiet --set "output_dir=$work/b" >b.log 2>&1 &
    tr_pid=$!
    want=$((5 + RANDOM % 10))  # a random step past the first checkpoint (step 4)
    for _ in $(seq 1 3000); do
      [ "$(cat b/metrics.jsonl 2>/dev/null | grep -c '"train"')" -ge "$want" ] && break
      kill -0 "$tr_pid" 2>/dev/null || break
      sleep 0.01
    done
    victim=""
    for p in $(pgrep -f "output_dir=$work/b"); do  # the ranks (and torchrun): pick RANK=1
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$p
    done
    [ -n "$victim" ] || fail "no rank 1 process found under torchrun $tr_pid (did the run end before step $want?)"
    start=$(date +%s)
    kill -9 "$victim"
    wait "$tr_pid" && fail "the job exited 0 after rank 1 was killed"
    took=$(( $(date +%s) - start ))
    echo "killed rank 1 at step >= $want; the job stopped after ${took} s"
    [ "$took" -le "$HOTPATH_DIST_TIMEOUT_S" ] || fail "the job took ${took} s to stop (timeout $HOTPATH_DIST_TIMEOUT_S s)"
    grep -E "rank 1 stopped answering|rank: 1 \(local_rank: 1\)" b.log | head -2
    grep -qE "rank 1 stopped answering|rank: 1 \(local_rank: 1\)" b.log || fail "no line names rank 1: $(tail -5 b.log)"
    trun "$hp" train image.yaml --quiet --resume --set "output_dir=$work/b" >>b.log 2>&1 || fail "resume: $(tail -5 b.log)"
    cmp -s a/metrics.jsonl b/metrics.jsonl || fail "metrics.jsonl differs after kill + resume: $(diff a/metrics.jsonl b/metrics.jsonl | head -4)"
    cmp -s a/model.safetensors b/model.safetensors || fail "model.safetensors differs after kill + resume"
    [ "$failures" -eq 0 ] && echo "kill -9 + --resume on 2 ranks == uninterrupted: metrics.jsonl and model.safetensors identical"
    # A checkpoint of 2 ranks resumed by 1: refused with one line.
    "$hp" train image.yaml --resume --set "output_dir=$work/b" --set train.max_steps=30 >w.log 2>&1 && fail "1 rank resumed a 2-rank checkpoint"
    grep -q "made by 2 rank(s), this run has 1" w.log || fail "world-size resume: $(tail -2 w.log)"
    tail -1 w.log
    ;;
  resume_world)
    image_fixture
    # sync_batchnorm and lr 0.001 as in equal_image: 1 rank × 64 == 2 ranks × 32 within 1e-5 (fp32 summation order).
    sed -e 's/model: {name: cnn_small, num_classes: 10}/model: {name: cnn_small, num_classes: 10, sync_batchnorm: true}/' \
      -e 's/lr: 0.05,/lr: 0.001,/' image.yaml > image-sync.yaml
    grep -q "sync_batchnorm: true" image-sync.yaml || { echo "cannot write the sync_batchnorm recipe" >&2; exit 1; }
    export COMPARE_BUFFERS=1e-4
    trun "$hp" train image-sync.yaml --quiet --set "output_dir=$work/a" >a.log 2>&1 || fail "uninterrupted: $(tail -5 a.log)"
    # 2 ranks × 32 for 8 steps, then 1 rank × 64.
    trun "$hp" train image-sync.yaml --quiet --set "output_dir=$work/b" --set train.max_steps=8 >b.log 2>&1 ||
      fail "2 ranks, 8 steps: $(tail -5 b.log)"
    "$hp" train image-sync.yaml --quiet --resume --set "output_dir=$work/b" --set train.batch_size=64 >>b.log 2>&1 ||
      fail "resume on 1 rank × 64: $(tail -3 b.log)"
    echo -n "2 ranks × 32 for 8 steps, resumed on 1 rank × 64, vs 2 ranks × 32 throughout: "
    compare a b model.safetensors 1e-5 || fail "resumed on 1 rank differs from the uninterrupted 2-rank run"
    # 1 rank × 64 for 8 steps, then 2 ranks × 32.
    "$hp" train image-sync.yaml --quiet --set "output_dir=$work/c" --set train.batch_size=64 --set train.max_steps=8 \
      >c.log 2>&1 || fail "1 rank, 8 steps: $(tail -3 c.log)"
    trun "$hp" train image-sync.yaml --quiet --resume --set "output_dir=$work/c" >>c.log 2>&1 ||
      fail "resume on 2 ranks × 32: $(tail -5 c.log)"
    echo -n "1 rank × 64 for 8 steps, resumed on 2 ranks × 32, vs 2 ranks × 32 throughout: "
    compare a c model.safetensors 1e-5 || fail "resumed on 2 ranks differs from the uninterrupted 2-rank run"
    # A ZeRO-1 checkpoint (sharded momentum) resumed on 1 rank × 64: the shards assemble into the one optimizer.
    trun "$hp" train image-sync.yaml --quiet --set "output_dir=$work/z" --set train.zero=1 --set train.max_steps=8 \
      >z.log 2>&1 || fail "ZeRO-1, 2 ranks, 8 steps: $(tail -5 z.log)"
    ls z/checkpoints/step-00000008/optimizer-shard-00001-of-00002.safetensors >/dev/null 2>&1 ||
      fail "no ZeRO shard in the step-8 checkpoint: $(ls z/checkpoints/step-00000008)"
    "$hp" train image-sync.yaml --quiet --resume --set "output_dir=$work/z" --set train.batch_size=64 >>z.log 2>&1 ||
      fail "ZeRO-1 checkpoint resumed on 1 rank × 64: $(tail -3 z.log)"
    echo -n "ZeRO-1 2 ranks × 32 for 8 steps, resumed on 1 rank × 64, vs DDP 2 ranks × 32 throughout: "
    compare a z model.safetensors 1e-5 || fail "a ZeRO-1 checkpoint resumed on 1 rank differs from the uninterrupted run"
    unset COMPARE_BUFFERS
    # Another global batch (1 rank × 32 after 2 × 32: c's last checkpoint is the 2 ranks'): refused with one line
    # naming both and what to set.
    "$hp" train image-sync.yaml --resume --set "output_dir=$work/c" --set train.max_steps=30 >w.log 2>&1 &&
      fail "1 rank × 32 resumed a checkpoint of 2 ranks × 32"
    tail -1 w.log
    grep -q "made by 2 rank(s), this run has 1: global batch 64 (2 × train.batch_size=32) then, 32 (1 × train.batch_size=32) now, so each step would take other samples; set train.batch_size=64 (the same global batch) or resume with 2 rank(s)" w.log ||
      fail "another global batch: $(tail -2 w.log)"
    # Text recipes plan their batches per rank: another world size is refused even at the same global batch.
    text_fixture
    trun "$hp" train text.yaml --quiet --set "output_dir=$work/t" --set train.max_steps=4 >t.log 2>&1 ||
      fail "text, 2 ranks, 4 steps: $(tail -5 t.log)"
    "$hp" train text.yaml --resume --set "output_dir=$work/t" --set train.batch_size=16 >tw.log 2>&1 &&
      fail "1 rank × 16 resumed a text checkpoint of 2 ranks × 8"
    tail -1 tw.log
    grep -q "made by 2 rank(s), this run has 1: text batches are planned per rank" tw.log ||
      fail "text, another world size: $(tail -2 tw.log)"
    ;;
  sigterm)
    image_fixture
    trun "$hp" train image.yaml --quiet --set "output_dir=$work/a" >a.log 2>&1 || fail "uninterrupted run: $(tail -5 a.log)"
    trun "$hp" train image.yaml --quiet --set "output_dir=$work/b" >b.log 2>&1 &
    tr_pid=$!
    want=$((2 + RANDOM % 12))
    for _ in $(seq 1 3000); do
      [ "$(cat b/metrics.jsonl 2>/dev/null | grep -c '"train"')" -ge "$want" ] && break
      kill -0 "$tr_pid" 2>/dev/null || break
      sleep 0.01
    done
    victim=""
    for p in $(pgrep -f "output_dir=$work/b"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$p
    done
    [ -n "$victim" ] || fail "no rank 1 process found (did the run end before step $want?)"
    kill -TERM "$victim"
    wait "$tr_pid" && fail "the job exited 0 after SIGTERM"
    steps=$(grep -o 'interrupted at step [0-9]*' b.log | sort -u)
    echo "SIGTERM to rank 1 at step >= $want: $(grep -c 'interrupted at step' b.log) ranks said: $steps"
    [ "$(grep -c 'interrupted at step' b.log)" -eq 2 ] && [ "$(echo "$steps" | wc -l)" -eq 1 ] ||
      fail "the ranks did not stop together: $(grep -E 'interrupted|error' b.log | head -4)"
    trun "$hp" train image.yaml --quiet --resume --set "output_dir=$work/b" >>b.log 2>&1 || fail "resume: $(tail -5 b.log)"
    cmp -s a/metrics.jsonl b/metrics.jsonl || fail "metrics.jsonl differs after SIGTERM + resume: $(diff a/metrics.jsonl b/metrics.jsonl | head -4)"
    cmp -s a/model.safetensors b/model.safetensors || fail "model.safetensors differs after SIGTERM + resume"
    ;;
  two_nodes)
    image_fixture
    ns=(hpn0-$$ hpn1-$$)
    if ! ip netns add "${ns[0]}" 2>/dev/null; then
      echo "SKIP: network namespaces are not permitted here (ip netns add failed)"
      exit 0
    fi
    trap 'ip netns del "${ns[0]}" 2>/dev/null; ip netns del "${ns[1]}" 2>/dev/null; rm -rf "$work"' EXIT
    ip netns add "${ns[1]}"
    ip link add "hpv0-$$" type veth peer name "hpv1-$$"
    for n in 0 1; do
      ip link set "hpv$n-$$" netns "${ns[$n]}"
      ip -n "${ns[$n]}" addr add "10.231.0.$((n + 1))/24" dev "hpv$n-$$"
      ip -n "${ns[$n]}" link set "hpv$n-$$" up
      ip -n "${ns[$n]}" link set lo up
    done
    trun "$hp" train image.yaml --quiet --set "output_dir=$work/one-host" >one-host.log 2>&1 || fail "one host: $(tail -3 one-host.log)"
    pids=()
    for n in 0 1; do
      ip netns exec "${ns[$n]}" env GLOO_SOCKET_IFNAME="hpv$n-$$" "$torchrun" --nnodes 2 --node-rank "$n" \
        --nproc-per-node 1 --master-addr 10.231.0.1 --master-port 29517 --max-restarts 0 --no-python \
        "$hp" train image.yaml --quiet --set "output_dir=$work/two-nodes" >"node$n.log" 2>&1 &
      pids+=($!)
    done
    for n in 0 1; do wait "${pids[$n]}" || fail "node $n failed: $(tail -3 "node$n.log")"; done
    cmp -s one-host/metrics.jsonl two-nodes/metrics.jsonl || fail "2 nodes: metrics differ from one host: $(diff one-host/metrics.jsonl two-nodes/metrics.jsonl | head -4)"
    cmp -s one-host/model.safetensors two-nodes/model.safetensors || fail "2 nodes: another model than one host"
    [ "$failures" -eq 0 ] && echo "torchrun --nnodes 2 across two network namespaces (veth, GLOO_SOCKET_IFNAME) == one host, byte for byte"
    ;;
  bad_input)
    image_fixture
    # Rank 1 with another learning rate: both ranks refuse at start naming the key.
    cat > other.sh <<SH
#!/usr/bin/env bash
extra=()
[ "\$RANK" = 1 ] && extra=(--set optimizer.lr=0.2)
exec "$hp" train "$work/image.yaml" --quiet --set "output_dir=$work/bad" "\${extra[@]}"
SH
    chmod +x other.sh
    trun ./other.sh >other.log 2>&1 && fail "ranks with different recipes trained"
    grep -m1 "differs from rank 0's at optimizer.lr" other.log || fail "different recipe: $(tail -5 other.log)"
    # --resume given to rank 1 only: refused at start-up naming it (not a wait for the timeout).
    sed -e 's/optimizer.lr=0.2/--resume/' -e 's/extra=(--set --resume)/extra=(--resume)/' other.sh > resume1.sh
    chmod +x resume1.sh
    grep -q 'extra=(--resume)' resume1.sh || { echo "cannot write resume1.sh" >&2; exit 1; }
    start=$(date +%s)
    trun ./resume1.sh >resume1.log 2>&1 && fail "--resume on rank 1 only trained"
    took=$(( $(date +%s) - start ))
    echo "--resume on rank 1 only, stopped after ${took} s: $(grep -m1 "at --resume" resume1.log)"
    grep -q "rank 1's command line differs from rank 0's at --resume (true on rank 1, false on rank 0)" resume1.log ||
      fail "--resume on one rank: $(tail -5 resume1.log)"
    [ "$took" -le 30 ] || fail "--resume on one rank took ${took} s to refuse (timeout $HOTPATH_DIST_TIMEOUT_S s)"
    # An unreachable master: a clear line within the (short) timeout.
    start=$(date +%s)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=9 HOTPATH_DIST_TIMEOUT_S=3 \
      "$hp" train image.yaml --quiet --set "output_dir=$work/unreach" >unreach.log 2>&1 && fail "no master, but it trained"
    took=$(( $(date +%s) - start ))
    tail -1 unreach.log
    grep -q "could not reach the store at 127.0.0.1:9 within 3 s" unreach.log || fail "unreachable master: $(tail -2 unreach.log)"
    [ "$took" -le 30 ] || fail "unreachable master took ${took} s with a 3 s timeout"
    [ "$(grep -c . unreach.log)" -eq 1 ] || fail "unreachable master: more than one line: $(cat unreach.log)"
    # A rank that fails early stops the other at once, naming it (ranks launched by hand: nobody kills the other).
    early() {  # NAME RANK1_SETTING EXPECTED_LINE (rank 1 alone gets --set RANK1_SETTING)
      local port=$((20000 + RANDOM % 20000)) start took
      start=$(date +%s)
      RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$hp" train image.yaml --quiet --set "output_dir=$work/$1" >"$1-0.log" 2>&1 &
      local r0=$!
      RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$hp" train image.yaml --quiet --set "output_dir=$work/$1" --set "$2" >"$1-1.log" 2>&1 &
      local r1=$!
      wait "$r1" && fail "$1: rank 1 trained"
      wait "$r0" && fail "$1: rank 0 trained although rank 1 failed"
      took=$(( $(date +%s) - start ))
      echo "$1: rank 0 stopped after ${took} s: $(tail -1 "$1-0.log")"
      grep -q "$3" "$1-0.log" || fail "$1: rank 0 does not name rank 1's error: $(tail -2 "$1-0.log")"
      [ "$(grep -c . "$1-0.log")" -eq 1 ] || fail "$1: rank 0 said more than one line: $(cat "$1-0.log")"
      [ "$took" -le 30 ] || fail "$1: rank 0 took ${took} s to stop (timeout $HOTPATH_DIST_TIMEOUT_S s)"
    }
    early early-recipe optimizer.lr=-1 "rank 1 stopped with an error: .*optimizer.lr"
    ;;
  timeouts)
    image_fixture
    T=4
    bound=$((T + 3))
    # rank_pid DIR RANK: the pid of the hotpath (or stand-in) process with that RANK whose command line names DIR.
    rank_pid() {
      local p
      for p in $(pgrep -f "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return; }
      done
    }
    # survivor NAME PID START_NS: waits for PID to exit (killed after 60 s: a hang fails, it does not block the test);
    # prints and checks the seconds since START_NS.
    survivor() {
      local i
      for i in $(seq 1 1200); do kill -0 "$2" 2>/dev/null || break; sleep 0.05; done
      local took_ms=$(( ($(date +%s%N) - $3) / 1000000 ))
      kill -9 "$2" 2>/dev/null
      echo "$1: the surviving rank stopped after $((took_ms / 1000)).$(printf %03d $((took_ms % 1000))) s (timeout $T s, bound $bound s)"
      [ "$took_ms" -le $((bound * 1000)) ] || fail "$1: the surviving rank took ${took_ms} ms (timeout $T s, bound $bound s)"
    }
    # one_line NAME LOG REGEX: the log has exactly one hotpath error line, and it matches REGEX.
    one_line() {
      local lines
      lines=$(grep "hotpath: error" "$2")
      echo "$1: $lines"
      [ "$(echo "$lines" | grep -c .)" -eq 1 ] || fail "$1: not one error line: $(tail -5 "$2")"
      echo "$lines" | grep -qE "$3" || fail "$1: the line does not say /$3/: $lines"
    }
    # Under torchrun; with NEVER=1 rank 1 is a sleep named after the run (it never starts), else hotpath.
    cat > ranks.sh <<SH
#!/usr/bin/env bash
[ "\$RANK" = 1 ] && [ "\${NEVER:-0}" = 1 ] && exec -a "never-\$OUT" sleep 600
exec "$hp" train "$work/image.yaml" --quiet --set train.epochs=1000 --set train.max_steps=100000 --set "output_dir=\$OUT"
SH
    chmod +x ranks.sh
    # torchrun_case NAME MODE: MODE never (rank 1 is `sleep`), stop or kill (rank 1 SIGSTOPped / killed at step 3).
    torchrun_case() {
      local name=$1 mode=$2 out="$work/t-$2" r0="" r1="" start i
      NEVER=$([ "$mode" = never ] && echo 1 || echo 0) OUT=$out HOTPATH_DIST_TIMEOUT_S=$T "$torchrun" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint "127.0.0.1:0" --max-restarts 0 --shutdown-timeout 1 --no-python ./ranks.sh >"t-$mode.log" 2>&1 &
      local tr_pid=$!
      for i in $(seq 1 1200); do
        r0=$(rank_pid "$out" 0); r1=$(rank_pid "$out" 1)
        [ -n "$r0" ] && [ -n "$r1" ] && break
        sleep 0.02
      done
      [ -n "$r0" ] && [ -n "$r1" ] || { fail "$name: the ranks did not start: $(tail -3 "t-$mode.log")"; return; }
      if [ "$mode" != never ]; then
        for i in $(seq 1 3000); do
          [ "$(cat "$out/metrics.jsonl" 2>/dev/null | grep -c '"train"')" -ge 3 ] && break
          kill -0 "$r0" 2>/dev/null || break
          sleep 0.02
        done
        [ "$mode" = stop ] && kill -STOP "$r1" || kill -9 "$r1"
      fi
      start=$(date +%s%N)
      survivor "$name" "$r0" "$start"
      wait "$tr_pid" && fail "$name: torchrun exited 0"
      kill -9 "$r1" 2>/dev/null
    }
    torchrun_case "rank 1 never starts (torchrun)" never
    one_line "rank 1 never starts (torchrun)" t-never.log \
      "rank 0: start-up \(the recipe agreement\): no answer within $T s"
    torchrun_case "rank 1 SIGSTOPped mid-run (torchrun)" stop
    one_line "rank 1 SIGSTOPped mid-run (torchrun)" t-stop.log \
      "rank 0: .* failed: rank 1 stopped answering \(died or hung\) \(timeout $T s, train.dist_timeout_s\)"
    torchrun_case "rank 1 killed mid-run (torchrun)" kill
    one_line "rank 1 killed mid-run (torchrun)" t-kill.log \
      "rank 0: .* failed: rank 1 stopped answering \(died or hung\) \(timeout $T s"
    # Plain RANK/WORLD_SIZE launches: rank 0 alone (it hosts the store and waits for rank 1 in the agreement),
    # rank 1 alone (nothing listens at the store's address).
    for r in 0 1; do
      port=$((20000 + RANDOM % 20000))
      start=$(date +%s%N)
      RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HOTPATH_DIST_TIMEOUT_S=$T \
        "$hp" train image.yaml --quiet --set "output_dir=$work/alone$r" >"alone$r.log" 2>&1 &
      pid=$!
      survivor "rank $r alone" "$pid" "$start"
      wait "$pid" && fail "rank $r alone: exited 0"
    done
    # Plain launch, rank 0 (the store's host) SIGSTOPped mid-run: rank 1's collective times out, and the store calls
    # that name the silent ranks get no reply (c10d's client would block in recv() for ever: bounded since).
    port=$((20000 + RANDOM % 20000))
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HOTPATH_DIST_TIMEOUT_S=$T "$hp" train image.yaml \
        --quiet --set train.epochs=1000 --set train.max_steps=100000 --set "output_dir=$work/host" >"host$r.log" 2>&1 &
      eval "host$r=\$!"
    done
    for i in $(seq 1 3000); do
      [ "$(cat host/metrics.jsonl 2>/dev/null | grep -c '"train"')" -ge 3 ] && break
      kill -0 "$host1" 2>/dev/null || break
      sleep 0.02
    done
    kill -STOP "$host0"
    survivor "rank 0 (the store's host) SIGSTOPped mid-run" "$host1" "$(date +%s%N)"
    wait "$host1" && fail "store host stopped: rank 1 exited 0"
    kill -9 "$host0" 2>/dev/null; wait "$host0" 2>/dev/null
    one_line "rank 0 (the store's host) SIGSTOPped mid-run" host1.log \
      "rank 1: .* failed: rank 0 stopped answering \(died or hung\) \(timeout $T s, train.dist_timeout_s\)"
    # A listener that accepts but never answers (a store host stopped after opening the store, or another program):
    # c10d's constructor would wait in its validation for ever.
    port=$((20000 + RANDOM % 20000))
    "$python" -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); s.settimeout(60); held = []
while True: held.append(s.accept()[0])' "$port" 2>/dev/null &
    silent=$!
    for i in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
    start=$(date +%s%N)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HOTPATH_DIST_TIMEOUT_S=$T \
      "$hp" train image.yaml --quiet --set "output_dir=$work/silent" >silent.log 2>&1 &
    pid=$!
    survivor "a store that never answers" "$pid" "$start"
    wait "$pid" && fail "a store that never answers: rank 1 exited 0"
    kill "$silent" 2>/dev/null; wait "$silent" 2>/dev/null
    one_line "a store that never answers" silent.log \
      "rank 1 could not reach the store at 127.0.0.1:$port within $T s .*it accepted the connection but did not answer"
    one_line "rank 0 alone" alone0.log "rank 0: start-up \(the recipe agreement\): no answer within $T s"
    one_line "rank 1 alone" alone1.log "rank 1 could not reach the store at 127.0.0.1:[0-9]+ within $T s"
    ;;
  *) echo "unknown case $case_" >&2; exit 2 ;;
esac

[ "$failures" -eq 0 ] && echo "distributed_test $case_: all passed" || exit 1
