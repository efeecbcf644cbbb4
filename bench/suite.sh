#!/usr/bin/env bash
# The side-by-side suite in one go (docs/benchmarks.md, "After issue 11"): loader vs PyTorch, Fashion-MNIST
# training vs eager PyTorch, BERT-base fine-tune vs transformers, MiniLM embeddings vs sentence-transformers.
# Usage: bench/suite.sh [HOTPATH]   (default: build/hotpath; `make demo` packs the Fashion-MNIST shards first)
# Output: build/bench/{loader-w2,train-fashion-mnist,text-embed,text-finetune-fp32}.json + one table row each.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$("$root/scripts/setup" | tail -n 1)
hp=${1:-$("$root/scripts/build" hotpath | tail -n 1)/hotpath}
out=$root/build/bench
mkdir -p "$out"
if [ ! -f "$out/imagenet-like/train.json" ]; then
  "$venv/bin/python" bench/make_imagenet_like.py --out "$out/imagenet-like/images" --count 2000 --seed 0 >/dev/null
  "$hp" data pack "$out/imagenet-like/images" -o "$out/imagenet-like/train" --max-samples-per-shard 500
fi
[ -f "$out/tokenizer-corpus.txt" ] || "$venv/bin/python" bench/peers/tokenizer_peer.py --write-corpus "$out/tokenizer-corpus.txt"
run() { echo "== $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; "$@" 2>&1 | grep -v "^epoch\|it/s\]" | tail -8; }
run "$hp" data bench "$out/imagenet-like/train-*.tar" --batch-size 256 --workers 2 --size 224 --batches 16 \
  --warmup-batches 2 --compare torch --json "$out/loader-w2.json"
run "$hp" bench train configs/fashion_mnist.yaml --set "data.train=['build/demo/fashion-mnist/train-*.tar']" \
  --steps 60 --warmup 5 --repeats 2 --compare torch --json "$out/train-fashion-mnist.json"
run "$hp" bench text --part embed --input "$out/tokenizer-corpus.txt" --threads 2 --repeats 3 --compare hf \
  --json "$out/text-embed.json"
run "$hp" bench text --part finetune --precision fp32 --steps 2 --warmup 1 --repeats 2 --compare hf \
  --json "$out/text-finetune-fp32.json"
