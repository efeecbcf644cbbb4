#!/usr/bin/env bash
# `hotpath train|eval|predict` as a user runs them: bad inputs give exit code 1 and ONE line on stderr
# naming the problem; SIGINT mid-epoch leaves a resumable checkpoint. Usage: train_cli_test.sh HOTPATH
set -uo pipefail
hp=$1
source "$(dirname "$0")/lib.sh"
make_work_dir

# Real data: Fashion-MNIST test split (Debian dataset-fashion-mnist), 2000 samples per shard.
"$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$work/fm" \
  --max-samples-per-shard 2000 >/dev/null 2>&1 || die "cannot pack fixture"
cat > recipe.yaml <<YAML
name: cli
output_dir: $work/run
model: {name: cnn_small, num_classes: 10}
data:
  train: $work/fm-{000000..000004}.tar
  eval: $work/fm-000004.tar
  image_size: 28
  channels: 1
  train_crop: resize
  eval_crop: resize
  resize_shorter: 28
  mean: [0.286]
  std: [0.353]
train: {epochs: 1, batch_size: 64, threads: 1, log_every: 1}
optimizer: {name: sgd, lr: 0.05}
schedule: {name: constant}
YAML

# expect_error NAME PATTERN ARGS...: exit 1, exactly one stderr line, containing PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  "$hp" "$@" >out.txt 2>err.txt
  local rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit code $rc, expected 1"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "$name: expected one stderr line, got: $(cat err.txt)"
  grep -q -- "$pattern" err.txt || fail "$name: stderr lacks '$pattern': $(cat err.txt)"
}

expect_error unknown-key "unknown key 'train.epochz'" train recipe.yaml --set train.epochz=3
expect_error wrong-type "train.epochs (from --set): expected an integer, got 'three'" train recipe.yaml --set train.epochs=three
expect_error missing-shard "data.train: shard '$work/none-000000.tar' does not exist" train recipe.yaml --set "data.train=$work/none-000000.tar"
head -c 100 /dev/urandom >bad.safetensors
expect_error truncated-weights "bad.safetensors" train recipe.yaml --set model.weights=bad.safetensors
printf 'model: [unclosed\n' >broken.yaml
expect_error invalid-yaml "broken.yaml:" train broken.yaml
expect_error other-task-key "model.lora_r applies to text recipes; this one has data.kind image" train recipe.yaml \
  --set model.lora_r=8
expect_error bounds 'train.zero: expected an integer in \[0, 2\], got 3' train recipe.yaml --set train.zero=3

# --help-recipe: the key table, exit 0, no recipe needed.
"$hp" train --help-recipe >keys.md 2>keys.err || fail "--help-recipe: exit $? ($(cat keys.err))"
grep -q '^| `model.lora_r` | integer | `0` | \[0, 65536\] | text | yes |' keys.md ||
  fail "--help-recipe lacks the model.lora_r row: $(grep lora_r keys.md)"
[ "$(grep -c '^| `' keys.md)" -ge 90 ] || fail "--help-recipe: $(grep -c '^| `' keys.md) rows"

# SIGINT mid-epoch: checkpoint, exit 130; the checkpoint resumes; a wrong-shape resume is refused.
"$hp" train recipe.yaml >train.out 2>train.err &
pid=$!
for _ in $(seq 1 600); do
  [ -f run/metrics.jsonl ] && [ "$(wc -l <run/metrics.jsonl)" -ge 5 ] && break
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "sigint: exit code $rc, expected 130 ($(tail -n 2 train.err))"
ckpt=$(ls -d run/checkpoints/step-* 2>/dev/null | tail -n 1)
[ -n "$ckpt" ] || fail "sigint: no checkpoint written"
[ -f "$ckpt/model.safetensors" ] && [ -f "$ckpt/trainer.json" ] || fail "sigint: incomplete checkpoint $ckpt"
grep -q "Resume with" train.err || fail "sigint: no resume hint: $(tail -n 2 train.err)"
expect_error resume-wrong-shape "step-[0-9]*/model.safetensors: .* does not match the model" train recipe.yaml --resume --set model.name=cnn_medium
step=$(sed 's/.*step-0*//' <<<"$ckpt")
"$hp" train recipe.yaml --resume --set train.max_steps=$((step + 3)) --quiet >resume.out 2>resume.err ||
  fail "resume failed: $(cat resume.err)"
grep -q "resuming from" resume.err || true
last=$(tail -n 1 run/metrics.jsonl)
grep -q "\"step\":$((step + 3))" <<<"$last" || fail "resume: last metrics line is not step $((step + 3)): $last"

# eval / predict on the run directory.
"$hp" train recipe.yaml --set train.max_steps=20 --set output_dir=$work/run2 --quiet >/dev/null 2>&1 || fail "short train failed"
"$hp" eval --model-dir run2 "$work/fm-000004.tar" --json >eval.json 2>eval.err || fail "eval failed: $(cat eval.err)"
grep -q '"top1"' eval.json || fail "eval: no top1 in $(cat eval.json)"
tar -xf "$work/fm-000000.tar" --wildcards '*.png' 2>/dev/null
img=$(ls ./*.png | head -n 1)
"$hp" predict --model-dir run2 "$img" --json -k 3 >pred.json 2>pred.err || fail "predict failed: $(cat pred.err)"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); assert len(d["top"])==3 and "label" in d["top"][0] and "prob" in d["top"][0], d' pred.json ||
  fail "predict: bad JSON $(cat pred.json)"
expect_error predict-missing-model-dir "nothing: not a directory" predict --model-dir "$work/nothing" "$img"
echo "not an image" >fake.png
expect_error predict-bad-image "fake.png" predict --model-dir run2 fake.png

# export --recipe: a YAML map of export flags (cli/flags_file.h); a flag on the command line wins; an unknown key,
# a value of the wrong shape, QAT data that matches nothing: one line each.
printf 'precision: int8\nqat-steps: 4\nqat-batch-size: 8\nqat-crop-scale: 1.0\n' >qat.yaml
"$hp" export --recipe qat.yaml --model-dir run2 --out qat --calibration "$work/fm-000004.tar" \
  --qat-data "$work/fm-000000.tar" --qat-steps 3 --allow-accuracy-loss >qat.out 2>qat.err || fail "export --recipe: $(tail -3 qat.err)"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["precision"]=="int8" and r["qat"]["steps"]==3 and r["quantization"]["totals"]["kept_float"]==0, r.get("qat")' \
  qat/quantization_report.json || fail "export --recipe: the report is not a 3-step QAT int8 export"
printf 'precison: int8\n' >typo.yaml
expect_error recipe-unknown-key "typo.yaml:1: 'precison' is no flag of \`hotpath export\`" export --recipe typo.yaml --model-dir run2 --out typo
printf 'qat-steps: [1, [2]]\n' >nested.yaml
expect_error recipe-nested "nested.yaml:1: qat-steps: expected a value or a list of values" export --recipe nested.yaml --model-dir run2 --out nested
printf 'precision: int8\nqat-steps: -3\n' >negative.yaml
expect_error recipe-bounds "negative.yaml:2: qat-steps: " export --recipe negative.yaml --model-dir run2 --out negative
expect_error qat-no-data "shard pattern '$work/none-\*.tar' matches no files" export --model-dir run2 --out nodata --precision int8 --qat-data "$work/none-*.tar"

# Structured pruning (infer/prune.h): a package at half the multiply-adds, fine-tuned 3 steps, runs in predict and as
# ONNX; bad pruning settings are one line each.
# The repository's pruning recipes, their keys read here (the command line wins over the file).
configs=$(cd "$(dirname "$0")/../../configs" && pwd)
"$hp" export --recipe "$configs/prune_fashion_mnist.yaml" --model-dir run2 --out pruned --calibration "$work/fm-000004.tar" \
  --prune-round-to 8 --prune-data "$work/fm-000000.tar" --prune-finetune-steps 3 --prune-batch-size 8 \
  >pruned.out 2>pruned.err || fail "export --prune-macs: $(tail -3 pruned.err)"
"$hp" export --recipe "$configs/prune_resnet50.yaml" --model resnet50 --random-init --image-size 64 --num-classes 10 \
  --out r50_pruned >r50.out 2>r50.err || fail "export --recipe prune_resnet50.yaml: $(tail -3 r50.err)"
grep -q "resnet50 pruned to 4[0-9.]* % of the MACs" r50.out || fail "prune_resnet50.yaml: $(cat r50.out)"
grep -q "pruned to [0-9.]* % of the MACs" pruned.out || fail "export --prune-macs: $(cat pruned.out)"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["prune"]; assert p["macs"]["kept"] <= 0.5 and len(p["finetune"]) == 1 and all(g["kept"] % 8 == 0 for g in p["prunable_groups"]), p' \
  pruned/quantization_report.json || fail "export --prune-macs: the report does not show the cut"
"$hp" predict --model-dir pruned "$img" --json >/dev/null 2>predict.err || fail "predict pruned: $(cat predict.err)"
"$hp" export --model-dir pruned --format onnx --out pruned.onnx >/dev/null 2>onnx.err || fail "onnx of the pruned package: $(cat onnx.err)"
expect_error prune-ratio-one "ratio must be in (0, 1) (1 would remove every channel)" export --model-dir run2 --out p1 --prune-ratio 1
expect_error prune-no-amount "add --prune-macs FRACTION or --prune-ratio R" export --model-dir run2 --out p2 --prune-data "$work/fm-000000.tar"
expect_error prune-taylor-no-data "taylor weighs the weights by their gradients on --prune-data" export --model-dir run2 --out p3 --prune-ratio 0.3 --prune-importance taylor
expect_error prune-ignore "ignore names 'nope', which is no conv2d or linear node" export --model-dir run2 --out p4 --prune-ratio 0.3 --prune-ignore nope
expect_error bench-pruned-peers "is pruned (structurally or to zero weights); the peers would run the unpruned" bench infer pruned --compare onnxruntime
expect_error onnx-int8-package "the package qat is int8" export --model-dir qat --format onnx --out qat.onnx

# The real pretrained EfficientNet-Lite0 (converted by scripts/setup) on darknet's dog photo.
if [ -f /usr/share/darknet/data/dog.jpg ]; then
  "$hp" predict --model efficientnet_lite0 --pretrained /usr/share/darknet/data/dog.jpg --json -k 5 >lite.json 2>lite.err ||
    fail "predict --pretrained failed: $(cat lite.err)"
  grep -q '"label":"German shepherd"' lite.json || fail "predict --pretrained: expected German shepherd in the top 5: $(cat lite.json)"
fi

finish "all CLI checks passed"
