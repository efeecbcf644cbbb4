#!/usr/bin/env bash
# scripts/gpu-check's CPU-side behaviour (it runs for real only on a GPU machine, docs/gpu.md): on a machine
# without a GPU it stops at once with one line and exit code 2; bad arguments are one line; the script parses;
# the GPU peers of the benchmarks run their CPU path (infer_peers.py skips its CUDA engines with the reason,
# hf_text_peer.py refuses fp16 without CUDA in one line).
# Usage: gpu_check_cli_test.sh SOURCE_DIR PYTHON
set -uo pipefail
src=$1
py=$2
source "$(dirname "$0")/lib.sh"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is present: scripts/gpu-check is the real check here, not this test"
  exit 77
fi
bash -n "$src/scripts/gpu-check" || die "scripts/gpu-check does not parse"

err=$("$src/scripts/gpu-check" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || die "exit code $rc without a GPU, expected 2 ($err)"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || die "more than one line without a GPU: $err"
[[ $err == "gpu-check: no GPU: "* ]] || die "unexpected message: $err"

err=$("$src/scripts/gpu-check" --bogus 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [[ $err == "gpu-check: usage: "* ]] || die "bad argument: exit $rc, '$err'"

make_work_dir
"$py" -c "import numpy as np; np.save('$work/x.npy', np.random.default_rng(0).standard_normal((2, 3, 32, 32), dtype=np.float32))"
out=$("$py" "$src/bench/peers/infer_peers.py" --model resnet18 --num-classes 4 --image-size 32 --input "$work/x.npy" \
  --engines torch_fp16_cuda,ort_cuda_fp16 --threads 1 2>/dev/null | tail -n 1) || die "infer_peers.py failed"
"$py" - "$out" <<'PY' || die "infer_peers.py did not skip its CUDA engines with the reason: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["engines"] == {}, r
for e in ("torch_fp16_cuda", "ort_cuda_fp16"):
    assert r["skipped"][e].startswith("skipped: no CUDA device"), r["skipped"]
PY
err=$("$py" "$src/bench/peers/hf_text_peer.py" --precision fp16 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$err" = "hf_text_peer: --precision fp16 needs --device cuda" ] || die "hf_text_peer fp16 on CPU: $err"
echo "ok"
