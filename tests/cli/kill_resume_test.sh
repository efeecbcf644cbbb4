#!/usr/bin/env bash
# kill -9 at random moments, then `--resume` until the run completes: metrics.jsonl and the trained
# model must equal an uninterrupted run's byte for byte, for an image and a text recipe (the one loop
# of train/trainer.cpp). Usage: kill_resume_test.sh HOTPATH PYTHON [SEED]
set -uo pipefail
hp=$(realpath "$1")
python=$2
seed=${3:-$RANDOM}
source "$(dirname "$0")/lib.sh"
make_work_dir
echo "kill_resume_test: seed $seed (pass it as the third argument to repeat these kill times)"
RANDOM=$seed

# Image: Fashion-MNIST (Debian dataset-fashion-mnist), a small CNN, checkpoints every few steps.
"$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$work/fm" \
  --max-samples-per-shard 500 >/dev/null 2>&1 || die "cannot pack the image fixture"
cat > image.yaml <<YAML
name: kill-image
model: {name: cnn_small, num_classes: 10}
data:
  train: $work/fm-000000.tar
  eval: $work/fm-000019.tar
  image_size: 28
  channels: 1
  train_crop: resize
  eval_crop: resize
  resize_shorter: 28
  mean: [0.286]
  std: [0.353]
  workers: 1
train: {epochs: 3, batch_size: 64, accum_steps: 2, threads: 1, log_every: 4, ema_decay: 0.9}
optimizer: {name: sgd, lr: 0.05}
schedule: {name: warmup_cosine, warmup_epochs: 0.5}
checkpoint: {every_steps: 3, keep_last: 2}
YAML

# Text: a tiny seeded BERT (transformers in the venv) and a two-class task packed as text shards.
"$python" - "$work/bert" <<'PY' || die "cannot make the tiny BERT"
import os, sys, torch
from transformers import BertConfig, BertModel
out = sys.argv[1]
torch.manual_seed(0)
words = ["good", "bad", "movie", "film", "very", "really", "the", "a", "was", "is"]
config = BertConfig(vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
BertModel(config).save_pretrained(out, safe_serialization=True)
with open(os.path.join(out, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
PY
for i in $(seq 1 768); do
  w=$([ $((i % 3)) -eq 0 ] && echo bad || echo good)
  echo "{\"text\": \"the movie was really $w\", \"label\": $([ "$w" = good ] && echo 1 || echo 0)}"
done > text.jsonl
"$hp" data pack-text text.jsonl --format jsonl -o "$work/tx" >/dev/null 2>&1 || die "cannot pack text"
cat > text.yaml <<YAML
name: kill-text
model: {name: bert, pretrained: $work/bert, num_classes: 2, lora_r: 4}
data: {kind: text, train: "$work/tx-*.tar", eval: "$work/tx-*.tar", max_length: 16, workers: 1}
train: {epochs: 6, batch_size: 16, accum_steps: 2, threads: 1, log_every: 2}
optimizer: {name: adamw, lr: 0.003}
schedule: {name: constant}
checkpoint: {every_steps: 2, keep_last: 2}
YAML

# run_killed NAME RECIPE MODEL_FILE: an uninterrupted run, then one killed (SIGKILL) at random moments
# and resumed until it completes; both runs' metrics.jsonl and model must be identical.
# Under ctest -j the machine's load changes between runs, so a killed run can outpace the uninterrupted
# one and finish before its kills land: such an attempt is started again from nothing (up to 4 times),
# its start-up kill drawn against the quickest run time seen so far.
run_killed() {
  local name=$1 recipe=$2 model=$3
  local start end ms
  start=$(date +%s%N)
  "$hp" train "$recipe" --set "output_dir=$work/$name-a" >"$name-a.log" 2>&1 || { fail "$name: the uninterrupted run failed: $(tail -3 "$name-a.log")"; return; }
  end=$(date +%s%N)
  ms=$(( (end - start) / 1000000 ))
  local lines
  lines=$(wc -l <"$name-a/metrics.jsonl")
  local attempt kills rounds done_ first_ms
  for attempt in 1 2 3 4; do
    rm -rf "$work/$name-b" "$name-b.log"
    kills=0 rounds=0 done_=0 first_ms=0
    while [ "$rounds" -lt 12 ] && [ "$done_" -eq 0 ]; do
      rounds=$((rounds + 1))
      local args=(train "$recipe" --set "output_dir=$work/$name-b")
      [ -d "$work/$name-b/checkpoints" ] && ls "$work/$name-b/checkpoints" | grep -qv '\.tmp$' && args+=(--resume)
      start=$(date +%s%N)
      "$hp" "${args[@]}" >>"$name-b.log" 2>&1 &
      local pid=$!
      if [ "$kills" -lt 3 ]; then
        if [ "$kills" -eq 0 ]; then
          # During start-up and the first steps (LibTorch's load, data planning, model build, resume): a
          # random moment in the first 60 % of the quickest run time seen.
          sleep "$(awk -v r=$RANDOM -v ms="$ms" 'BEGIN { printf "%.3f", (0.05 + 0.55 * r / 32767) * ms / 1000 }')"
        else
          # Mid-run: once metrics.jsonl has a random number of the uninterrupted run's lines, plus a random
          # few milliseconds (the kill lands inside a step, a checkpoint write or a metrics line).
          local want=$(( 1 + RANDOM % (lines - 1) ))
          for _ in $(seq 1 3000); do
            [ "$(cat "$name-b/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$want" ] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.01
          done
          sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.1 * r / 32767 }')"
        fi
        if kill -9 "$pid" 2>/dev/null; then
          kills=$((kills + 1))
          wait "$pid" 2>/dev/null
          continue
        fi
      fi
      if wait "$pid"; then
        done_=1
        [ "$rounds" -eq 1 ] && first_ms=$(( ($(date +%s%N) - start) / 1000000 ))
      elif tail -1 "$name-b.log" | grep -q "the run already finished"; then
        done_=1  # killed after its last checkpoint (model written before it), e.g. while writing profile.json
      else
        fail "$name: a resumed run failed: $(tail -3 "$name-b.log")"
        return
      fi
    done
    [ "$done_" -eq 1 ] || { fail "$name: did not complete in $rounds rounds"; return; }
    [ "$kills" -ge 2 ] && break
    # A run too quick to be killed tests nothing: start again, the start-up kill drawn against this run's time.
    [ "$first_ms" -gt 0 ] && [ "$first_ms" -lt "$ms" ] && ms=$first_ms
    echo "$name: attempt $attempt finished after $kills kill(s); starting again (run time ${ms} ms)"
  done
  [ "$kills" -ge 2 ] || { fail "$name: only $kills kill(s) landed before the run completed, in 4 attempts"; return; }
  echo "$name: $kills kills (uninterrupted run ${ms} ms)"
  cmp -s "$name-a/metrics.jsonl" "$name-b/metrics.jsonl" ||
    fail "$name: metrics.jsonl differs after $kills kills: $(diff "$name-a/metrics.jsonl" "$name-b/metrics.jsonl" | head -5)"
  cmp -s "$name-a/$model" "$name-b/$model" || fail "$name: $model differs after $kills kills"
}

run_killed image image.yaml model.safetensors
run_killed text text.yaml model/model.safetensors

finish "kill_resume_test: all passed"
