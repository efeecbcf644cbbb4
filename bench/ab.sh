#!/usr/bin/env bash
# Two hotpath binaries (e.g. before and after a change, the old one built in a git worktree) on the same
# inputs, alternating, ROUNDS rounds: loader images/s, Fashion-MNIST training samples/s, MiniLM embeddings
# sentences/s. Run bench/suite.sh (or make demo) first for the inputs.
# Usage: bench/ab.sh OLD_HOTPATH NEW_HOTPATH [ROUNDS]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
old=$1 new=$2 rounds=${3:-2}
out=$root/build/bench
for round in $(seq 1 "$rounds"); do
  for side in old new; do
    hp=${!side}
    echo "== $(date +%T) load $(cut -d' ' -f1 /proc/loadavg) round $round $side ($hp)"
    "$hp" data bench "$out/imagenet-like/train-*.tar" --batch-size 256 --workers 2 --size 224 --batches 16 \
      --warmup-batches 2 --repeats 1 --json "$out/ab-loader-$side-$round.json" 2>&1 | grep "hotpath loader:"
    "$hp" bench train configs/fashion_mnist.yaml --set "data.train=['build/demo/fashion-mnist/train-*.tar']" \
      --steps 40 --warmup 5 --repeats 1 --json "$out/ab-train-$side-$round.json" 2>&1 | grep "hotpath:" | cut -c1-60
    "$hp" bench text --part embed --input "$out/tokenizer-corpus.txt" --embed-lines 2048 --threads 2 --repeats 1 \
      --json "$out/ab-embed-$side-$round.json" 2>&1 | grep -i "run 1\|hotpath" | tail -1 | cut -c1-80
  done
done
