#!/usr/bin/env bash
# `hotpath serve` end to end with real clients (issue 13): tiny packages exported here (an image classifier, a
# text classifier, a sentence embedder; random weights), one server for all three on a free port, then
# tests/serve/serve_client_test.py: tritonclient[http] JSON and binary inference equal to the engine's answers
# (`hotpath predict`, `hotpath embed`, the /v1 routes), the KServe v2 metadata/health/readiness endpoints, curl,
# every bad input of the issue answered 4xx JSON while the server keeps serving, /metrics. Then the drain:
# SIGTERM → exit 0.
# Usage: serve_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
src=$3
source "$(dirname "$0")/lib.sh"
make_work_dir
server_pid=
on_exit 'if [ -n "$server_pid" ]; then kill -9 "$server_pid" 2>/dev/null; fi'

"$src/tests/serve/make_packages.sh" "$hp" "$work" || die "make_packages.sh: exit $?"

"$hp" serve img txt emb --port 0 --threads 1 --max-batch-size 8 --max-queue-delay-us 2000 \
  --request-timeout-ms 1500 --max-body-bytes 200000 > server.out 2> server.err &
server_pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/^serve: ready on http:\/\/127.0.0.1:\([0-9]*\) .*/\1/p' server.out)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || die "the server exited: $(tail -3 server.err)"
  sleep 0.1
done
[ -n "$port" ] || die "no ready line within 60 s: $(tail -3 server.err)"
grep -q "(models: img, txt, emb)" server.out || die "ready line: $(cat server.out)"

"$py" "$src/tests/serve/serve_client_test.py" "127.0.0.1:$port" "$hp" "$work" || fail "serve_client_test.py: exit $?"

# The one-line curl of the README.
out=$(curl -s -X POST "http://127.0.0.1:$port/v2/models/emb/infer" -H 'Content-Type: application/json' \
  -d '{"inputs":[{"name":"input_ids","shape":[1,4],"datatype":"INT64","data":[2,5,6,3]},{"name":"attention_mask","shape":[1,4],"datatype":"INT64","data":[1,1,1,1]},{"name":"token_type_ids","shape":[1,4],"datatype":"INT64","data":[0,0,0,0]}]}')
case $out in
  *'"name":"sentence_embedding","datatype":"FP32","shape":[1,16],"data":['*) ;;
  *) fail "curl infer: $out" ;;
esac
# [2, 5, 6, 3] is "[CLS] the cat [SEP]": curl's answer = the engine's through `hotpath embed`.
echo "the cat" | "$hp" embed --model emb --threads 1 > embed_the_cat.jsonl 2> embed.err \
  || fail "hotpath embed: $(cat embed.err)"
"$py" - "$out" embed_the_cat.jsonl <<'PY' || fail "curl's embedding differs from hotpath embed's"
import json, sys
import numpy as np
served = np.array(json.loads(sys.argv[1])["outputs"][0]["data"], np.float32)
engine = np.array(json.loads(open(sys.argv[2]).readline()), np.float32)
assert served.shape == engine.shape and np.allclose(served, engine, atol=1e-5), (served, engine)
PY

# curl uploading a body over --max-body-bytes (200000) sees the 413 and its JSON, not "connection reset" (issue 28):
# the server reads and drops the rest of the body before it closes.
head -c 3000000 /dev/zero > big.bin
code=$(curl -s -o big.out -w '%{http_code}' -H 'Expect:' --data-binary @big.bin "http://127.0.0.1:$port/v2/models/emb/infer")
rc=$?
[ "$rc" -eq 0 ] && [ "$code" = 413 ] && grep -q -- '--max-body-bytes' big.out \
  || fail "curl 3 MB upload: curl exit $rc, HTTP $code: $(head -c 300 big.out 2>/dev/null)"

# One JSON log line per request, with the fields the issue names.
"$py" - server.err <<'PY' || fail "the JSON request log lacks lines or fields"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(lines) > 50, len(lines)
for l in lines:
    assert set(l) >= {"id", "model", "status", "batch", "queue_us", "compute_us", "total_us"}, l
ok = [l for l in lines if l["status"] == 200 and l["model"] == "img" and l["path"].endswith("/infer")]
assert ok and all(l["batch"] >= 1 and l["compute_us"] > 0 for l in ok), ok[:3]
assert any(l["status"] == 400 for l in lines) and any(l["status"] == 404 for l in lines)
# Answers the transport gave itself (the slow client's 408, the oversized body's 413) are logged too.
assert any(l["status"] == 408 and "--request-timeout-ms" in l["error"] for l in lines), "no 408 line"
assert any(l["status"] == 413 and "max-body-bytes" in l["error"] for l in lines), "no 413 line"
PY

# SIGTERM: readiness goes away, the process drains and exits 0.
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
server_pid=
[ "$rc" -eq 0 ] || fail "exit $rc after SIGTERM: $(tail -3 server.err)"
grep -q "serve: drained" server.err || fail "no drain line: $(tail -3 server.err)"

# One-line CLI errors.
"$hp" serve --port 0 > /dev/null 2> e1.err && fail "serve without packages exited 0"
grep -q "no model packages" e1.err || fail "$(cat e1.err)"
"$hp" serve img --name img=emb --port 0 > /dev/null 2> e2.err && fail "two models named img: exit 0"
grep -q "two models named 'img'" e2.err || fail "$(cat e2.err)"
"$hp" serve does-not-exist --port 0 > /dev/null 2> e3.err && fail "a package that does not exist: exit 0"
[ "$(wc -l < e3.err)" -eq 1 ] && grep -q "does-not-exist" e3.err || fail "$(cat e3.err)"

if [ "$failures" -ne 0 ]; then
  echo "server log tail:" >&2
  tail -5 server.err >&2
fi
finish "serve_cli_test: ok"
