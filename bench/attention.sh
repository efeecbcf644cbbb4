#!/usr/bin/env bash
# Side-by-side attention benchmark: hotpath's fused kernel vs its ATen reference vs
# at::scaled_dot_product_attention (LibTorch's CPU flash kernel), BERT-base shapes (batch 32,
# 12 heads, head_dim 64, sequence 128 and 512, a padding mask), forward and forward+backward,
# fp32 and bf16, at each thread count; runs interleaved, best of each. A dropout probability (BERT
# training: 0.1) applies it in all three and adds the fused kernel without it (the dropout's cost).
# Usage: bench/attention.sh [threads, e.g. 1,2] [repeats] [lengths, e.g. 128,512] [dropout, e.g. 0.1] [more flags]
#   more flags go to hotpath_attention_bench, e.g. --impls fused,sdpa --cpu-time (threads 1, loaded machine)
# Output: a markdown table on stdout and $build/bench/attention.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-1,2}
repeats=${2:-3}
lengths=${3:-128,512}
dropout=${4:-0}
build=$("$root/scripts/build" hotpath_attention_bench | tail -n 1)
mkdir -p "$build/bench"
"$build/hotpath_attention_bench" --batch 32 --heads 12 --dim 64 --lengths "$lengths" --threads "$threads" \
  --repeats "$repeats" --dropout "$dropout" --json "$build/bench/attention.json" "${@:5}"
