#!/usr/bin/env bash
# ZeRO measurements of docs/benchmarks.md (issue 14), run in an empty directory: ResNet-18 and a BERT-base-shape
# model with AdamW on 2 ranks (torchrun, Gloo on loopback) under train.zero 0 (DDP), 1 and 2, side by side:
# optimizer-state bytes and gradient bytes kept per rank (profile.json's distributed block), bytes handed to
# the collectives per step, step time, and each rank's peak RSS (/usr/bin/time).
# Usage: bench/zero_measure.sh HOTPATH PYTHON
set -euo pipefail
hp=$(realpath "$1"); py=$2; tr=$(dirname "$py")/torchrun; w=$(pwd)
trun() { "$tr" --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --no-python "$@"; }
[ -f fm-000000.tar ] || "$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$w/fm" --max-samples-per-shard 256 >/dev/null 2>&1
cat > r18.yaml <<YAML
name: m
model: {name: resnet18, num_classes: 10}
data: {train: ["$w/fm-00000{0..3}.tar"], image_size: 28, channels: 1, train_crop: resize, eval_crop: resize, resize_shorter: 28, mean: [0.286], std: [0.353], workers: 1}
train: {epochs: 1, batch_size: 16, threads: 1, log_every: 1, max_steps: 8}
optimizer: {name: adamw, lr: 0.0001}
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
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
cat > bert.yaml <<YAML
name: t
model: {name: bert, pretrained: $w/bert, num_classes: 2}
data: {kind: text, train: "$w/tx-*.tar", max_length: 16, workers: 1, bucket: false}
train: {epochs: 1, batch_size: 4, threads: 1, log_every: 1, max_steps: 4}
optimizer: {name: adamw, lr: 0.0001}
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
# Each rank under /usr/bin/time: its peak RSS lands in rss-<run>-<rank>.
cat > timed.sh <<SH
#!/usr/bin/env bash
exec /usr/bin/time -f "%M" -o "$w/rss-\$RUN-\$RANK" "$hp" "\$@"
SH
chmod +x timed.sh
for m in r18 bert; do
  for z in 0 1 2; do
    RUN=$m-z$z trun ./timed.sh train $m.yaml --quiet --overwrite --set train.zero=$z --set output_dir=$w/$m-z$z > $m-z$z.log 2>&1
    "$py" - "$w/$m-z$z/profile.json" "$m" "$z" "$w/rss-$m-z$z-0" "$w/rss-$m-z$z-1" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); d = p["distributed"]
rss = [int(open(f).read().split()[-1]) / 1024 for f in sys.argv[4:6]]
mb = lambda b: f"{b / 1e6:.1f} MB"
print(f"{sys.argv[2]} zero={sys.argv[3]}: optimizer state/rank {mb(d['optimizer_state_bytes'])}, "
      f"gradients kept {mb(d.get('gradient_bytes_kept', d['allreduce_bytes_per_step']))}, "
      f"all-reduce {mb(d['allreduce_bytes_per_step'])}/step, all-gather {mb(d.get('allgather_bytes_per_step', 0))}/step, "
      f"step {p['step_ms']:.0f} ms (optimizer {p['fractions']['optimizer'] * 100:.0f} %, wait {p['fractions']['allreduce_wait'] * 100:.0f} %), "
      f"peak RSS rank 0/1 {rss[0]:.0f}/{rss[1]:.0f} MiB")
PY
  done
done
