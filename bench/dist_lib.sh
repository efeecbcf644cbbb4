# Sourced by bench/distributed_measure.sh and bench/zero_measure.sh after they set hp, py and w (the directory
# they run in): trun (torchrun, 2 local ranks on a free port), the fixtures both train on, made once per
# directory (Fashion-MNIST shards, a BERT-base-shape model directory, text shards), and their recipes:
#   image_recipe MODEL BATCH STEPS OPTIMIZER > r18.yaml   # on 28×28 Fashion-MNIST; OPTIMIZER as '{name: sgd, lr: 0.01}'
#   text_recipe STEPS > bert.yaml                          # the BERT-base shape, batch 4 per rank, AdamW
tr=$(dirname "$py")/torchrun
trun() { "$tr" --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 --no-python "$@"; }
[ -f fm-000000.tar ] || "$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$w/fm" --max-samples-per-shard 256 >/dev/null 2>&1
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
image_recipe() { cat <<YAML
name: m
model: {name: $1, num_classes: 10}
data: {train: ["$w/fm-00000{0..3}.tar"], image_size: 28, channels: 1, train_crop: resize, eval_crop: resize, resize_shorter: 28, mean: [0.286], std: [0.353], workers: 1}
train: {epochs: 1, batch_size: $2, threads: 1, log_every: 1, max_steps: $3}
optimizer: $4
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
}
text_recipe() { cat <<YAML
name: t
model: {name: bert, pretrained: $w/bert, num_classes: 2}
data: {kind: text, train: "$w/tx-*.tar", max_length: 16, workers: 1, bucket: false}
train: {epochs: 1, batch_size: 4, threads: 1, log_every: 1, max_steps: $1}
optimizer: {name: adamw, lr: 0.0001}
schedule: {name: constant}
checkpoint: {every_epochs: 0, keep_best: false}
YAML
}
