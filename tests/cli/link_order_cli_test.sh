#!/usr/bin/env bash
# Two oneDNNs in one process (cmake/HotpathTorch.cmake): LibTorch's copy inside libtorch_cpu.so and Debian's
# libdnnl.so.2 (ops/onednn_conv.h) both define the std::call_once thunks of their GEMM kernels' jit_init(), and the
# dynamic linker binds every reference to the first definition in load order. If LibTorch's references bind to
# libdnnl's thunks, LibTorch's call_once runs Debian's initialiser, LibTorch's kernel table stays empty and every
# at::_int_mm runs oneDNN's reference GEMM (BERT-base int8 batch 1: ~30 ms -> ~2 s; no test output changes).
# This checks the binding itself, in each program given, with every symbol bound at start (LD_BIND_NOW):
# no libtorch_cpu -> libdnnl binding of a oneDNN call_once thunk, and libdnnl's bound to LibTorch's instead.
# Usage: link_order_cli_test.sh PROGRAM [ARGS...] [-- PROGRAM [ARGS...]]...
set -uo pipefail
source "$(dirname "$0")/lib.sh"

check() {
  local name=$1
  local deps
  deps=$(ldd "$name") || fail "ldd $name failed"
  if ! grep -q 'libdnnl\.so' <<<"$deps"; then
    echo "skip: $name does not load libdnnl (a build without Debian's oneDNN)"
    return
  fi
  grep -q 'libtorch_cpu\.so' <<<"$deps" || fail "$name loads libdnnl but not libtorch_cpu: nothing to check"
  local log
  log=$(LD_DEBUG=bindings LD_BIND_NOW=1 "$@" 2>&1 >/dev/null)
  local thunks
  thunks=$(grep '_Prepare_execution' <<<"$log" | grep 'dnnl')
  [ -n "$thunks" ] || fail "$name: LD_DEBUG shows no oneDNN call_once thunk binding at all (the check cannot see)"
  local before=$failures bad
  bad=$(grep -E 'binding file [^ ]*libtorch_cpu\.so [^ ]* to [^ ]*libdnnl\.so' <<<"$thunks" | head -3)
  [ -z "$bad" ] || fail "$name: LibTorch's oneDNN call_once thunks bind to Debian's libdnnl (libtorch_cpu.so must \
come before libdnnl.so.2 in DT_NEEDED): $bad"
  grep -Eq 'binding file [^ ]*libdnnl\.so[^ ]* [^ ]* to [^ ]*libtorch_cpu\.so' <<<"$thunks" ||
    fail "$name: libdnnl's thunks do not bind to LibTorch's: load order changed, re-check OneDnnConv's GEMM skip"
  [ "$failures" = "$before" ] || return 0
  echo "ok: $name: $(grep -c . <<<"$thunks") oneDNN thunk bindings, none from LibTorch to libdnnl"
  return 0
}

args=()
for a in "$@" --; do
  if [ "$a" = -- ]; then
    [ ${#args[@]} -gt 0 ] && check "${args[@]}"
    args=()
  else
    args+=("$a")
  fi
done
finish "link_order: all checks passed"
