#!/usr/bin/env bash
# Every CUDA entry point of the CLI on a machine without a GPU: one line on stderr naming the problem and a
# non-zero exit, no trace (docs/gpu.md). On a GPU machine this test has nothing to check (exit 77 = skipped).
# Usage: cuda_cli_test.sh HOTPATH
set -uo pipefail
hp=$1
source "$(dirname "$0")/lib.sh"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is present: the refusals cannot be seen here"
  exit 77
fi
make_work_dir
# expect_one_line TEXT CMD...: CMD fails, stderr's last line contains TEXT, and no line looks like a C++ trace.
expect_one_line() {
  local want=$1
  shift
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  [ $rc -ne 0 ] || die "exit 0 for: $*"
  [[ $(printf '%s\n' "$err" | tail -n 1) == *"$want"* ]] || die "'$want' not in the last line for: $*: $err"
  ! printf '%s\n' "$err" | grep -q 'Exception raised from\|frame #' || die "a C++ trace for: $*: $err"
}
printf '%s\n' '{"model_type": "bert", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 1,
  "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu", "max_position_embeddings": 64,
  "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0, "num_labels": 2}' >"$work/bert.json"
"$hp" export --config "$work/bert.json" --random-init --max-length 16 --out "$work/pkg" >/dev/null 2>&1 \
  || die "export of a tiny BERT failed"

expect_one_line "cuda:0 was asked for but no CUDA device is available" \
  "$hp" bench infer "$work/pkg" --device cuda --min-queries 1 --min-seconds 0
expect_one_line "unknown peer engine 'torch_fp32' in --engines for --device cuda (known: ort_cuda_fp16, torch_fp16_cuda)" \
  "$hp" bench infer "$work/pkg" --device cuda --engines torch_fp32
expect_one_line "train.device: cuda was asked for but no CUDA device is available" \
  "$hp" bench text --part finetune --device cuda --precision fp16 --config "$work/bert.json" --seq-len 8 \
  --batch-size 2 --steps 1 --warmup 0
expect_one_line "fp16 needs a CUDA device" \
  "$hp" bench text --part finetune --device cpu --precision fp16 --config "$work/bert.json" --seq-len 8 \
  --batch-size 2 --steps 1 --warmup 0
# The loader's CUDA mode (data bench side by side with the CPU path).
expect_one_line "data bench: --device cuda was asked for but no CUDA device is available" \
  "$hp" data bench "$work/none-*.tar" --device cuda --decode nvjpeg
expect_one_line "data bench: --decode nvjpeg needs --device cuda" "$hp" data bench "$work/none-*.tar" --decode nvjpeg
echo ok
