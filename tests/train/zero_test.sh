#!/usr/bin/env bash
# ZeRO-1/2 (train.zero) under the real torchrun of the venv (2 ranks, Gloo on loopback), one case per call:
#   zero_equal_image  cnn_small: ZeRO-1 and ZeRO-2 == DDP (train.zero 0) over 20 steps, losses and every
#                     weight within 1e-5, with SGD momentum, then with AdamW + clipping + no-sync accumulation
#   zero_equal_text   LoRA BERT (hidden, attention and LoRA dropout 0.1): the same with AdamW, then with SGD momentum + clipping + accumulation
#   zero_kill_resume  ZeRO-2: kill -9 rank 1 at a random step past the first checkpoint; the checkpoint holds one
#                     optimizer shard per rank and optimizer.json; --resume on 2 ranks == an uninterrupted
#                     ZeRO-2 run, metrics and weights byte for byte
#   zero_reshard      a ZeRO-1 checkpoint of 2 ranks: resumed by 1 rank → one line naming both world sizes;
#                     resumed on 2 ranks as DDP (train.zero 0) and as ZeRO-2 → the shards are assembled and
#                     resliced, and the runs end within 1e-5 of the uninterrupted ZeRO-1 run
# Usage: zero_test.sh CASE HOTPATH PYTHON [SEED]
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
norms = [abs(x["grad_norm"] - y["grad_norm"]) / max(x["grad_norm"], 1e-12) for x, y in zip(la, lb) if "grad_norm" in x]
wa, wb = load_file(f"{a}/{model}"), load_file(f"{b}/{model}")
assert wa.keys() == wb.keys(), "different tensors"
# BatchNorm running statistics: rank 0's own batches in both runs (per-rank statistics)
wworst = max(float(abs(wa[k].astype("float64") - wb[k].astype("float64")).max()) for k in wa if wa[k].size)
moved = max(float(abs(wa[k].astype("float64")).max()) for k in wa if wa[k].size)
print(f"{len(la)} steps: max |loss diff| {worst:.2e}, max |weight diff| {wworst:.2e}"
      + (f", max relative grad-norm diff {max(norms):.1e}" if norms else "")
      + f" (first loss {la[0]['loss']:.4f}, last {la[-1]['loss']:.4f})")
assert la[-1]["loss"] != la[0]["loss"] and moved > 0, "nothing trained"
sys.exit(0 if worst <= tol and wworst <= tol else 1)
PY
}

# NAME RECIPE MODEL_FILE [--set ...]: DDP, ZeRO-1 and ZeRO-2 on 2 ranks with the same settings; ZeRO == DDP.
zero_equal() {
  local name=$1 recipe=$2 model=$3
  shift 3
  for z in 0 1 2; do
    trun "$hp" train "$recipe" --quiet --set "output_dir=$work/$name-z$z" --set "train.zero=$z" "$@" >"$name-z$z.log" 2>&1 ||
      { fail "$name: train.zero=$z failed: $(tail -5 "$name-z$z.log")"; return; }
  done
  for z in 1 2; do
    grep -q "\"zero\": $z" "$name-z$z/profile.json" || fail "$name: profile.json of train.zero=$z has no zero block"
    echo -n "$name, ZeRO-$z vs DDP: "
    compare "$name-z0" "$name-z$z" "$model" 1e-5 || fail "$name: ZeRO-$z differs from DDP"
  done
  "$python" - "$name-z0/profile.json" "$name-z1/profile.json" "$name-z2/profile.json" <<'PY' || fail "$name: optimizer state not sharded"
import json, sys
d = [json.load(open(p))["distributed"] for p in sys.argv[1:]]
whole = d[0]["optimizer_state_bytes"]
for z in (1, 2):
    print(f"  ZeRO-{z}: optimizer state {d[z]['optimizer_state_bytes']} bytes on rank 0 vs DDP {whole} "
          f"({d[z]['optimizer_state_bytes'] / whole:.3f}), gradients kept {d[z]['gradient_bytes_kept']} bytes")
    assert d[z]["optimizer_state_bytes"] < 0.55 * whole
assert d[2]["gradient_bytes_kept"] < 0.55 * d[1]["gradient_bytes_kept"]
PY
}

case "$case_" in
  zero_equal_image)
    image_fixture zero
    zero_equal image-sgd image.yaml model.safetensors
    zero_equal image-adamw image.yaml model.safetensors --set optimizer.name=adamw --set optimizer.lr=0.002 \
      --set train.clip_grad_norm=0.5 --set train.accum_steps=2
    grep -q '"grad_norm"' image-adamw-z2/metrics.jsonl || fail "the clipping run logged no grad_norm"
    ;;
  zero_equal_text)
    text_fixture zero 0.1 "{name: adamw, lr: 0.003, weight_decay: 0.01}"
    zero_equal text-adamw text.yaml model/model.safetensors
    zero_equal text-sgd text.yaml model/model.safetensors --set optimizer.name=sgd --set optimizer.lr=0.05 \
      --set optimizer.momentum=0.9 --set train.clip_grad_norm=0.5 --set train.accum_steps=2
    ;;
  zero_kill_resume)
    image_fixture zero
    set_=(--set train.zero=2 --set optimizer.name=adamw --set optimizer.lr=0.002)
    trun "$hp" train image.yaml --quiet "${set_[@]}" --set "output_dir=$work/a" >a.log 2>&1 || fail "uninterrupted run: $(tail -5 a.log)"
    trun "$hp" train image.yaml --quiet "${set_[@]}" --set "output_dir=$work/b" >b.log 2>&1 &
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
    kill -9 "$victim"
    wait "$tr_pid" && fail "the job exited 0 after rank 1 was killed"
    echo "killed rank 1 at step >= $want"
    # the latest finished checkpoint: a kill during a save leaves step-N.tmp/, which --resume skips and removes
    ck=$(ls -d b/checkpoints/step-* | grep -v '\.tmp$' | tail -1)
    leftover=$(ls -d b/checkpoints/step-*.tmp 2>/dev/null | tr '\n' ' ')
    echo "latest checkpoint: $ck: $(ls "$ck" | tr '\n' ' ')${leftover:+ (unfinished: $leftover)}"
    [ -f "$ck/optimizer.json" ] && [ -f "$ck/optimizer-shard-00000-of-00002.safetensors" ] &&
      [ -f "$ck/optimizer-shard-00001-of-00002.safetensors" ] && [ ! -e "$ck/optimizer.safetensors" ] ||
      fail "$ck: expected optimizer.json and one optimizer shard per rank"
    trun "$hp" train image.yaml --quiet "${set_[@]}" --resume --set "output_dir=$work/b" >>b.log 2>&1 || fail "resume: $(tail -5 b.log)"
    cmp -s a/metrics.jsonl b/metrics.jsonl || fail "metrics.jsonl differs after kill + resume: $(diff a/metrics.jsonl b/metrics.jsonl | head -4)"
    cmp -s a/model.safetensors b/model.safetensors || fail "model.safetensors differs after kill + resume"
    [ "$failures" -eq 0 ] && echo "ZeRO-2: kill -9 + --resume on 2 ranks == uninterrupted: metrics.jsonl and model.safetensors identical"
    ;;
  zero_reshard)
    image_fixture zero
    set_=(--set optimizer.name=adamw --set optimizer.lr=0.002)
    trun "$hp" train image.yaml --quiet "${set_[@]}" --set train.zero=1 --set "output_dir=$work/a" >a.log 2>&1 ||
      fail "uninterrupted ZeRO-1 run: $(tail -5 a.log)"
    trun "$hp" train image.yaml --quiet "${set_[@]}" --set train.zero=1 --set train.max_steps=8 --set "output_dir=$work/b" \
      >b.log 2>&1 || fail "ZeRO-1 run to step 8: $(tail -5 b.log)"
    "$hp" train image.yaml "${set_[@]}" --set train.zero=1 --resume --set "output_dir=$work/b" >w.log 2>&1 &&
      fail "1 rank resumed a 2-rank ZeRO checkpoint"
    grep -q "made by 2 rank(s), this run has 1" w.log || fail "world-size resume: $(tail -2 w.log)"
    echo "1 rank: $(tail -1 w.log)"
    for z in 0 2; do
      rm -rf "c$z" && cp -r b "c$z"
      trun "$hp" train image.yaml --quiet "${set_[@]}" --set train.zero=$z --resume --set "output_dir=$work/c$z" >"c$z.log" 2>&1 ||
        { fail "resume as train.zero=$z: $(tail -5 "c$z.log")"; continue; }
      echo -n "ZeRO-1 checkpoint resumed as train.zero=$z vs uninterrupted ZeRO-1: "
      compare a "c$z" model.safetensors 1e-5 || fail "resumed as train.zero=$z differs"
    done
    ;;
  *) echo "unknown case $case_" >&2; exit 2 ;;
esac

[ "$failures" -eq 0 ] && echo "zero_test $case_: all passed" || exit 1
