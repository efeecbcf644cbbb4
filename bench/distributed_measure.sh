#!/usr/bin/env bash
# Side-by-side distributed measurements of docs/benchmarks.md (issue 14), run in an empty directory:
# overlap (HOTPATH_DDP_OVERLAP=1 vs its reference twin 0) for ResNet-18 and a BERT-base-shape model on
# 2 ranks, bytes all-reduced per step, scaling 1 rank × 1 thread vs 2 ranks × 1 thread on the same samples.
# Usage: bench/distributed_measure.sh HOTPATH PYTHON
set -euo pipefail
hp=$1; py=$2; w=$(pwd)
source "$(dirname "$0")/dist_lib.sh"
sgd='{name: sgd, lr: 0.01}'
image_recipe resnet18 16 10 "$sgd" > r18.yaml; text_recipe 6 > bert.yaml
for m in r18 bert; do
  for ov in 1 0; do
    HOTPATH_DDP_OVERLAP=$ov trun "$hp" train $m.yaml --quiet --overwrite --set output_dir=$w/$m-ov$ov > $m-ov$ov.log 2>&1
    "$py" -c "import json,sys; p=json.load(open('$w/$m-ov$ov/profile.json')); d=p['distributed']; print('$m overlap=$ov', json.dumps(d), 'step_ms', round(p['step_ms'],1), 'backward_s', round(p['seconds']['backward'],3))"
  done
done
# Scaling: the same 20 steps of 64 samples, 1 rank × 1 thread vs 2 ranks × 1 thread (global batch 64 both).
image_recipe cnn_small 64 20 "$sgd" > c1.yaml; image_recipe cnn_small 32 20 "$sgd" > c2.yaml
"$hp" train c1.yaml --quiet --overwrite --set output_dir=$w/c1 2>&1 | grep '^trained'
trun "$hp" train c2.yaml --quiet --overwrite --set output_dir=$w/c2 2>&1 | grep '^trained' | head -1
image_recipe resnet18 32 10 "$sgd" > s1.yaml; image_recipe resnet18 16 10 "$sgd" > s2.yaml
"$hp" train s1.yaml --quiet --overwrite --set output_dir=$w/s1 2>&1 | grep '^trained'
trun "$hp" train s2.yaml --quiet --overwrite --set output_dir=$w/s2 2>&1 | grep '^trained' | head -1
