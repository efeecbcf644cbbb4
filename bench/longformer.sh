#!/usr/bin/env bash
# Long-document training memory and speed: one Longformer training step (forward + backward, fp32, batch 1, the
# first token global) at each length, hotpath's fused sliding-window kernel vs its dense O(L²) twin vs
# transformers' LongformerForSequenceClassification, each run in its own process (its peak memory its own).
# Model: MiniLM-L6-sized (hidden 384, 6 layers, 12 heads, intermediate 1536), attention_window 512.
# Usage: bench/longformer.sh [lengths, e.g. 1024,2048,4096] [threads] [steps] [impls, e.g. fused,dense,hf]
# Output: a markdown table on stdout and $build/bench/longformer.jsonl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lengths=${1:-1024,2048,4096}
threads=${2:-2}
steps=${3:-2}
impls=${4:-fused,dense,hf}
build=$("$root/scripts/build" hotpath_longformer_bench | tail -n 1)
python=$("$root/scripts/setup" | tail -n 1)/bin/python
mkdir -p "$build/bench"
out="$build/bench/longformer.jsonl"
: > "$out"
shape=(--hidden 384 --layers 6 --heads 12 --intermediate 1536 --window 512 --threads "$threads" --steps "$steps")
echo "| length | impl | step s | peak step MiB |"
echo "|---|---|---|---|"
for len in ${lengths//,/ }; do
  for impl in ${impls//,/ }; do
    case $impl in
      fused|dense) line=$("$build/hotpath_longformer_bench" --length "$len" --kernel "$impl" "${shape[@]}") ;;
      hf) line=$("$python" "$root/bench/peers/longformer_peer.py" --length "$len" "${shape[@]}" 2>/dev/null) ;;
      *) echo "unknown impl $impl (fused, dense, hf)" >&2; exit 2 ;;
    esac
    echo "$line" >> "$out"
    "$python" -c 'import json, sys; r = json.loads(sys.argv[1])
print("| {} | {} | {:.2f} | {:.0f} |".format(r["length"], r["impl"], r["step_s"], r["peak_step_mib"]))' "$line"
  done
done
