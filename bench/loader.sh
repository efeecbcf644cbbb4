#!/usr/bin/env bash
# Side-by-side loader benchmark on the ImageNet-like set: 2000 JPEGs (~500x375, q90, 4:2:0) cut
# from the real photos of Debian's wallpaper packages, packed into shards, then
# `hotpath data bench --compare torch` (same shards, batch, workers, transform).
# Usage: bench/loader.sh [workers] [batches]   Output: build/bench/loader-w<workers>.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
workers=${1:-2}
batches=${2:-16}
build=$("$root/scripts/build" hotpath | tail -n 1)
hp="$build/hotpath"
venv=$("$root/scripts/setup" | tail -n 1)
out="$build/bench"
mkdir -p "$out"
if [ ! -f "$out/imagenet-like/train.json" ]; then
  "$venv/bin/python" "$root/bench/make_imagenet_like.py" --out "$out/imagenet-like/images" --count 2000 --seed 0
  "$hp" data pack "$out/imagenet-like/images" -o "$out/imagenet-like/train" --max-samples-per-shard 500
fi
"$hp" data bench "$out/imagenet-like/train-*.tar" --batch-size 256 --workers "$workers" --size 224 \
  --batches "$batches" --warmup-batches 2 --compare torch --json "$out/loader-w$workers.json"
cat "$out/loader-w$workers.json"
