#!/usr/bin/env bash
# Side-by-side distributed measurements of docs/benchmarks.md (issue 14), run in an empty directory:
# overlap (HOTPATH_DDP_OVERLAP=1 vs its reference twin 0) for ResNet-18 and a BERT-base-shape model on
# 2 ranks, bytes all-reduced per step, scaling 1 rank × 1 thread vs 2 ranks × 1 thread on the same samples.
# Usage: bench/distributed_measure.sh HOTPATH PYTHON
set -euo pipefail
hp=$1; py=$2; tr=$(dirname "$py")/torchrun; w=$(pwd)
trun() { "$tr" --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --no-python "$@"; }
[ -f fm-000000.tar ] || "$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$w/fm" --max-samples-per-shard 256 >/dev/null 2>&1
img() { cat <<YAML
name: m
model: {name: $1, num_classes: 10}
data: {train: ["$w/fm-00000{0..3}.tar"], image_size: 28, channels: 1, train_crop: resize, eval_crop: resize, resize_shorter: 28, mean: [0.286], std: [0.353], workers: 1}
train: {epochs: 1, batch_size: $2, threads: 1, log_every: 1, max_steps: $3}
optimizer: {name: sgd, lr: 0.01}
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
}
[ -d bert ] || "$py" - "$w/bert" <<'PY'
import os, sys, torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
words = ["good", "bad", "movie", "film", "very", "really", "the", "a", "was", "is"]
BertModel(BertConfig(vocab_size=15, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).save_pretrained(sys.argv[1])
open(os.path.join(sys.argv[1], "vocab.txt"), "w").write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
PY
[ -f tx-000000.tar ] || { for i in $(seq 1 256); do echo "{\"text\": \"the movie was really good\", \"label\": $((i % 2))}"; done > t.jsonl; "$hp" data pack-text t.jsonl --format jsonl -o "$w/tx" >/dev/null 2>&1; }
txt() { cat <<YAML
name: t
model: {name: bert, pretrained: $w/bert, num_classes: 2}
data: {kind: text, train: "$w/tx-*.tar", max_length: 16, workers: 1, bucket: false}
train: {epochs: 1, batch_size: 4, threads: 1, log_every: 1, max_steps: 6}
optimizer: {name: adamw, lr: 0.0001}
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
}
img resnet18 16 10 > r18.yaml; txt > bert.yaml
for m in r18 bert; do
  for ov in 1 0; do
    HOTPATH_DDP_OVERLAP=$ov trun "$hp" train $m.yaml --quiet --overwrite --set output_dir=$w/$m-ov$ov > $m-ov$ov.log 2>&1
    "$py" -c "import json,sys; p=json.load(open('$w/$m-ov$ov/profile.json')); d=p['distributed']; print('$m overlap=$ov', json.dumps(d), 'step_ms', round(p['step_ms'],1), 'backward_s', round(p['seconds']['backward'],3))"
  done
done
# Scaling: the same 20 steps of 64 samples, 1 rank × 1 thread vs 2 ranks × 1 thread (global batch 64 both).
img cnn_small 64 20 > c1.yaml; img cnn_small 32 20 > c2.yaml
"$hp" train c1.yaml --quiet --overwrite --set output_dir=$w/c1 2>&1 | grep '^trained'
trun "$hp" train c2.yaml --quiet --overwrite --set output_dir=$w/c2 2>&1 | grep '^trained' | head -1
img resnet18 32 10 > s1.yaml; img resnet18 16 10 > s2.yaml
"$hp" train s1.yaml --quiet --overwrite --set output_dir=$w/s1 2>&1 | grep '^trained'
trun "$hp" train s2.yaml --quiet --overwrite --set output_dir=$w/s2 2>&1 | grep '^trained' | head -1
