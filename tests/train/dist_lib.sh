# Sourced by distributed_test.sh and zero_test.sh after they set case_, hp, python and seed: a work dir
# removed on exit, fail() counting failures, trun (torchrun, 2 local ranks on a free port) and the two recipe
# fixtures the cases train (image.yaml, text.yaml in the work dir).
torchrun=$(dirname "$python")/torchrun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
export HOTPATH_DIST_TIMEOUT_S=60
RANDOM=$seed
echo "$(basename "$0" .sh) $case_: seed $seed"

# torchrun on a free port, one thread per rank (the machine has 2 cores).
trun() {
  "$torchrun" --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:0" --max-restarts 0 \
    --no-python "$@"
}

# image_fixture [PREFIX]: image.yaml (cnn_small on Fashion-MNIST shards, 20 steps); PREFIX names the run.
image_fixture() {
  local prefix=${1:-dist}
  "$hp" data pack /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz -o "$work/fm" \
    --max-samples-per-shard 256 >/dev/null 2>&1 || { echo "cannot pack the image fixture" >&2; exit 1; }
  cat > image.yaml <<YAML
name: $prefix-image
model: {name: cnn_small, num_classes: 10}
data:
  train: ["$work/fm-00000{0..3}.tar"]
  eval: $work/fm-000010.tar
  image_size: 28
  channels: 1
  train_crop: resize
  eval_crop: resize
  resize_shorter: 28
  flip: 0.5
  mean: [0.286]
  std: [0.353]
  workers: 1
  shuffle_buffer: 300
train: {epochs: 2, batch_size: 32, threads: 1, log_every: 1, max_steps: 20}
optimizer: {name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0005}
schedule: {name: warmup_cosine, warmup_epochs: 0.2}
checkpoint: {every_steps: 4, keep_last: 2}
YAML
}

# text_fixture [PREFIX] [DROPOUT] [OPTIMIZER]: text.yaml (LoRA on a tiny BERT made here, 20 steps) with hidden,
# attention and LoRA dropout DROPOUT (default 0.1) and the flow-style OPTIMIZER mapping.
text_fixture() {
  local prefix=${1:-dist} dropout=${2:-0.1} optimizer=${3:-"{name: adamw, lr: 0.003}"}
  "$python" - "$work/bert" "$dropout" <<'PY' || { echo "cannot make the tiny BERT" >&2; exit 1; }
import os, sys, torch
from transformers import BertConfig, BertModel
out = sys.argv[1]
torch.manual_seed(0)
words = ["good", "bad", "movie", "film", "very", "really", "the", "a", "was", "is"]
config = BertConfig(vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=float(sys.argv[2]),
                    attention_probs_dropout_prob=float(sys.argv[2]))
BertModel(config).save_pretrained(out, safe_serialization=True)
with open(os.path.join(out, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
PY
  for i in $(seq 1 512); do
    w=$([ $((i % 3)) -eq 0 ] && echo bad || echo good)
    extra=$([ $((i % 5)) -eq 0 ] && echo " very very" || echo "")
    echo "{\"text\": \"the movie was really$extra $w\", \"label\": $([ "$w" = good ] && echo 1 || echo 0)}"
  done > text.jsonl
  "$hp" data pack-text text.jsonl --format jsonl -o "$work/tx" >/dev/null 2>&1 || { echo "cannot pack text" >&2; exit 1; }
  cat > text.yaml <<YAML
name: $prefix-text
model: {name: bert, pretrained: $work/bert, num_classes: 2, lora_r: 4, lora_dropout: $dropout}
data: {kind: text, train: "$work/tx-*.tar", eval: "$work/tx-*.tar", max_length: 16, workers: 1, bucket: false}
train: {epochs: 2, batch_size: 8, threads: 1, log_every: 1, max_steps: 20}
optimizer: $optimizer
schedule: {name: constant}
checkpoint: {every_steps: 4, keep_last: 2}
YAML
}

