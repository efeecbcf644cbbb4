#!/usr/bin/env bash
# `hotpath serve` under bounded loopback load (issue 13), on the tiny text embedder of make_packages.sh:
#  1. load: 8 keep-alive clients x 100 requests (JSON and binary alternating), every response exactly its own answer;
#  2. overload: a 2-request queue and 16 clients: 503 + Retry-After + JSON error at once, every 200 still right;
#  3. SIGTERM during load: every request sent before the signal is answered (200 or 503), the server's log counts
#     as many 200s as the clients received, the process exits 0;
#  4. hostile clients (issue 28): trickled headers, 14 MB JSON bodies, held 60 MB bodies, more connections than
#     --max-connections: a health check and a small infer stay within 25x their idle medians of the same run, every
#     refusal is a one-line JSON 408/503, the peak RSS grows by less than --max-buffered-bytes + 256 MB.
# Prints throughput and latencies for information (a loaded machine); asserts only ratios within one run.
# Usage: serve_load_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir
server_pid=
on_exit 'if [ -n "$server_pid" ]; then kill -9 "$server_pid" 2>/dev/null; fi'
"$src/tests/serve/make_packages.sh" "$hp" "$work" || die "make_packages.sh: exit $?"

# start_server NAME ARGS...: runs `hotpath serve emb ARGS` in the background; sets server_pid and port.
start_server() {
  local name=$1
  shift
  "$hp" serve emb --port 0 --threads 1 "$@" > "$name.out" 2> "$name.err" &
  server_pid=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/^serve: ready on http:\/\/127.0.0.1:\([0-9]*\) .*/\1/p' "$name.out")
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  die "$name: no ready line: $(tail -3 "$name.err")"
}

stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid"
  local rc=$?
  server_pid=
  [ "$rc" -eq 0 ] || fail "$1: exit $rc after SIGTERM: $(tail -3 "$1.err")"
}

start_server load --max-batch-size 8 --max-queue-delay-us 2000 --max-queue-size 256
"$py" "$src/tests/serve/serve_load_test.py" load "127.0.0.1:$port" 8 100 || fail "load: exit $?"
stop_server load

start_server overload --max-batch-size 2 --max-queue-delay-us 20000 --max-queue-size 2
"$py" "$src/tests/serve/serve_load_test.py" overload "127.0.0.1:$port" 16 10 || fail "overload: exit $?"
stop_server overload

start_server sigterm --max-batch-size 8 --max-queue-delay-us 20000 --max-queue-size 256 --drain-timeout-s 60
"$py" "$src/tests/serve/serve_load_test.py" sigterm "127.0.0.1:$port" 8 "$server_pid" sigterm.err \
  || fail "sigterm: exit $?"
wait "$server_pid"
rc=$?
server_pid=
[ "$rc" -eq 0 ] || fail "sigterm: exit $rc: $(tail -3 sigterm.err)"
grep -q "serve: drained, every accepted request answered" sigterm.err \
  || fail "sigterm: no drain line: $(tail -3 sigterm.err)"

start_server hostile --max-connections 32 --max-buffered-bytes $((160 << 20)) --request-timeout-ms 3000
"$py" "$src/tests/serve/serve_load_test.py" hostile "127.0.0.1:$port" "$server_pid" 160 || fail "hostile: exit $?"
stop_server hostile

finish "serve_load_cli_test: ok"
