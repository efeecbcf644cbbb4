# Sourced by the CLI test scripts (tests/cli/*_test.sh) after `set -uo pipefail` and their arguments:
#   source "$(dirname "$0")/lib.sh"
#   make_work_dir                      # $work: a fresh folder, the cwd and TMPDIR, removed on exit
#   fail "what"                        # a FAIL line on stderr, counted; the script goes on
#   die "what"                         # a FAIL line on stderr, exit 1 now (a fixture that cannot be made)
#   finish "name: all checks passed"   # that line and exit 0 when nothing failed, else the count and exit 1
#   one_line_error NAME TEXT CMD...    # CMD must exit 1 with one line on stderr holding TEXT ("" for any)
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
die() { echo "FAIL: $*" >&2; exit 1; }

# on_exit CMD: CMD runs when the script exits, before the work dir goes (e.g. kill a server left running).
_exit_hooks=()
on_exit() { _exit_hooks+=("$1"); }
_run_exit_hooks() {
  local hook
  for hook in "${_exit_hooks[@]}"; do eval "$hook"; done
  if [ -n "${work:-}" ]; then rm -rf "$work"; fi
}
trap _run_exit_hooks EXIT

make_work_dir() {
  work=$(mktemp -d) || die "mktemp -d failed"
  cd "$work" || die "cannot enter $work"
  export TMPDIR="$work"
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$(basename "$0" .sh): $failures failure(s)" >&2
    exit 1
  fi
  echo "$1"
  exit 0
}

one_line_error() {
  local name=$1 pattern=$2
  shift 2
  "$@" > /dev/null 2> err.txt
  local rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit $rc (expected 1): $(cat err.txt)"
  [ "$(wc -l < err.txt)" -eq 1 ] || fail "$name: stderr is not one line: $(cat err.txt)"
  grep -qF -- "$pattern" err.txt || fail "$name: expected '$pattern' in: $(cat err.txt)"
}
