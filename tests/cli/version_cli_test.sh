#!/usr/bin/env bash
# `hotpath --version`: versions and the CPU dispatch report (every op with its kernel and why), the cap
# HOTPATH_MAX_ISA, HOTPATH_VERBOSE=dispatch, and one-line errors for bad HOTPATH_MAX_ISA / HOTPATH_BF16_MATH.
# Usage: version_cli_test.sh HOTPATH
set -uo pipefail
hp=$1
source "$(dirname "$0")/lib.sh"
unset HOTPATH_MAX_ISA HOTPATH_BF16_MATH HOTPATH_VERBOSE ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA MKL_ENABLE_INSTRUCTIONS

out=$("$hp" --version) || fail "--version: exit $?"
for want in '^hotpath [0-9]' '^LibTorch [0-9]' '^cpu: ' '^  attention  ' '^  batch_norm_relu  ' '^  bf16_math  ' \
            '^  dropout  ' '^  resample  ' '^  store_sample  '; do
  grep -Eq "$want" <<<"$out" || fail "--version lacks /$want/: $out"
done

# Capped to scalar: every op runs its portable loops and says why (on a CPU with AVX2).
out=$(HOTPATH_MAX_ISA=scalar "$hp" --version) || fail "HOTPATH_MAX_ISA=scalar --version: exit $?"
grep -q '^  attention *portable' <<<"$out" || fail "capped attention is not portable: $out"
grep -q '^  dropout *portable' <<<"$out" || fail "capped dropout is not portable: $out"
grep -q '^  resample *reference' <<<"$out" || fail "capped resample is not the reference: $out"
grep -q 'avx2: this CPU lacks\|avx2: capped by HOTPATH_MAX_ISA=scalar' <<<"$out" || fail "no reason for the cap: $out"
grep -q '^LibTorch kernels: ATEN_CPU_CAPABILITY=default' <<<"$out" || fail "LibTorch is not capped: $out"

# HOTPATH_VERBOSE=dispatch: each choice on stderr, once.
err=$(HOTPATH_VERBOSE=dispatch "$hp" --version 2>&1 >/dev/null) || fail "HOTPATH_VERBOSE=dispatch: exit $?"
[ "$(grep -c '^hotpath: dispatch: attention -> ' <<<"$err")" = 1 ] || fail "verbose attention choice not once: $err"

# One-line errors.
for env in HOTPATH_MAX_ISA=avx3 HOTPATH_BF16_MATH=fast; do
  err=$(env "$env" "$hp" --version 2>&1 >/dev/null); rc=$?
  [ "$rc" = 1 ] || fail "$env: exit $rc, expected 1"
  [ "$(wc -l <<<"$err")" = 1 ] && grep -q "^hotpath: error: ${env%%=*}: expected .*, got '${env#*=}'$" <<<"$err" \
    || fail "$env: not one clear line: $err"
done

finish "version_cli_test: all passed"
