#!/usr/bin/env bash
# Side-by-side training benchmark, hotpath vs eager PyTorch on the same resolved recipe
# (`hotpath bench train --compare torch`): the Fashion-MNIST default recipe (cnn_small, fp32,
# batch 256) and ResNet-50 at 224 in bf16 autocast on the ImageNet-like JPEG shards, at batch 8 here:
# this AVX2 CPU has no bf16 convolution kernels: PyTorch's autocast takes ATen's slow im2col path
# (~40 s per batch-8 step), hotpath its fp32-math bf16 scheme (models/autocast_ops.h; docs/benchmarks.md).
# Packs the data first when missing (scripts/demo's Fashion-MNIST pack, bench/loader.sh's set).
# Usage: bench/train.sh [repeats]   Output: build/bench/train-fashion-mnist.json, train-resnet50.json
# Takes ~20 minutes on the shared 2-core machine (Fashion-MNIST ~6 with repeats=2, ResNet-50 ~10).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
repeats=${1:-2}
build=$("$root/scripts/build" hotpath | tail -n 1)
venv=$("$root/scripts/setup" | tail -n 1)
hp="$build/hotpath"
out="$build/bench"
mkdir -p "$out"

fm="$build/demo/fashion-mnist"
if [ ! -f "$fm/train.json" ]; then
  "$hp" data pack /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz -o "$fm/train" \
    --max-samples-per-shard 10000 \
    --class-names "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
fi
inet="$out/imagenet-like"
if [ ! -f "$inet/train.json" ]; then
  "$venv/bin/python" "$root/bench/make_imagenet_like.py" --out "$inet/images" --count 2000 --seed 0
  "$hp" data pack "$inet/images" -o "$inet/train" --max-samples-per-shard 500
fi

# The recipes name their shards relative to the repository root, under build/; point them at $build.
cd "$root"
"$hp" bench train configs/fashion_mnist.yaml --set "data.train=['$fm/train-*.tar']" \
  --steps 60 --warmup 5 --repeats "$repeats" --compare torch --json "$out/train-fashion-mnist.json"
"$hp" bench train configs/resnet50_imagenet_like.yaml --set "data.train=['$inet/train-*.tar']" \
  --set train.batch_size=8 --steps 3 --warmup 1 --repeats 1 --compare torch --json "$out/train-resnet50.json"
cat "$out/train-fashion-mnist.json" "$out/train-resnet50.json"
