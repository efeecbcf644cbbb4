#!/usr/bin/env bash
# `hotpath predict` on a text_classifier package as a user runs it: --text (with --text-pair) and --texts FILE give
# one answer per text in input order, the same as the Python TextClassifier; the default k is the package's
# (config.json postprocess.top_k); the wrong kind of input for a package is exit 1 with ONE line on stderr.
# Usage: PYTHONPATH=BUILD/python predict_text_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir

"$src/tests/serve/make_packages.sh" "$hp" "$work" || die "cannot make the packages"
printf '%s\n' "the cat sat on the mat" "a dog ran far away and then came back home to sleep" "z" > texts.txt

"$hp" predict --model-dir txt --texts texts.txt --json > file.jsonl || fail "predict --texts: exit $?"
"$hp" predict --model-dir txt --text "the cat sat on the mat" --text "a dog ran far away and then came back home to sleep" \
  --text z --json > flags.jsonl || fail "predict --text: exit $?"
cmp -s file.jsonl flags.jsonl || fail "--texts and --text answer differently"
"$hp" predict --model-dir txt --text "the cat" --text-pair "sat on the mat" -k 1 --json > pair.jsonl \
  || fail "predict --text-pair: exit $?"
"$hp" predict --model-dir txt --text "the cat sat" > plain.txt || fail "predict text output: exit $?"
grep -q "^the cat sat$" plain.txt || fail "the plain output does not name the text: $(head -2 plain.txt)"

"$py" - <<'PY' || fail "the CLI's answers differ from hotpath.infer.TextClassifier"
import json
from hotpath.infer import TextClassifier
rows = [json.loads(line) for line in open("file.jsonl")]
texts = [line.rstrip("\n") for line in open("texts.txt")]
assert [r["text"] for r in rows] == texts, rows
for r in rows:
    top = r["top"]
    assert len(top) == 3, top                                   # 3 labels: the default k (5) clamped
    assert all(a["prob"] >= b["prob"] for a, b in zip(top, top[1:])), top
    assert abs(sum(t["prob"] for t in top) - 1) < 1e-4, top
clf = TextClassifier.from_dir("txt")
want = clf.predict(texts, k=3)
for r, w in zip(rows, want):
    assert [t["label"] for t in r["top"]] == [p.label for p in w], (r, w)
    assert all(abs(t["prob"] - p.prob) < 1e-6 for t, p in zip(r["top"], w)), (r, w)
pair = json.loads(open("pair.jsonl").read())
assert len(pair["top"]) == 1, pair
assert pair["top"][0]["label"] == clf.predict(["the cat"], text_pair=["sat on the mat"], k=1)[0][0].label
PY

# The package's own default k.
"$py" - <<'PY' || fail "cannot edit config.json"
import json
c = json.load(open("txt/config.json"))
c["postprocess"]["top_k"] = 2
json.dump(c, open("txt/config.json", "w"))
PY
"$hp" predict --model-dir txt --text "the cat" --json > k2.jsonl || fail "predict with the package's k: exit $?"
"$py" -c 'import json; t = json.loads(open("k2.jsonl").read())["top"]; assert len(t) == 2, t' \
  || fail "the default k is not the package's top_k (2)"

# Errors: one line on stderr, exit 1.
"$py" -c 'from PIL import Image; Image.new("RGB", (32, 32)).save("x.png")' || die "cannot write an image"
one_line_error "image for a text package" "is a text_classifier: give --text or --texts FILE, not image files" "$hp" predict --model-dir txt x.png
one_line_error "text for an image package" "is an image_classifier: give image files, not --text" "$hp" predict --model-dir img --text "the cat"
one_line_error "an embedder" "is a sentence_embedder package: hotpath embed --model emb" "$hp" predict --model-dir emb --text "a"
one_line_error "pairs per text" "2 --text-pair for 1 texts" "$hp" predict --model-dir txt --text "a" --text-pair b --text-pair c
one_line_error "images and texts" "give image files, or --text / --texts FILE, not both" "$hp" predict --model-dir txt --text a x.png
finish "predict_text_cli_test: all checks passed"
