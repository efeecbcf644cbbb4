#!/usr/bin/env bash
# `hotpath bench serve` end to end on tiny packages made here (`hotpath export --random-init`): the real
# `hotpath serve` as a child under a bounded loopback load (every answer its own request's), the engine offline
# beside it, an overload run that gets 503s at once, and a clean SIGTERM drain (exit 0) after each. Few
# requests: a smoke test of the benchmark, not a measurement.
# Usage: bench_serve_cli_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$1
py=$2
source "$(dirname "$0")/lib.sh"
make_work_dir

"$hp" export --model cnn_small --random-init --num-classes 5 --channels 1 --image-size 16 --out cnn_pkg > export.log 2>&1 \
  || die "hotpath export of cnn_small: $(tail -3 export.log)"
cat > tiny_bert.json <<'JSON'
{"model_type": "bert", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu",
 "layer_norm_eps": 1e-12, "num_labels": 3}
JSON
"$hp" export --config tiny_bert.json --random-init --out bert_pkg > export.log 2>&1 \
  || die "hotpath export of the tiny BERT: $(tail -3 export.log)"

check() {  # check REPORT KIND
  "$py" - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["name"] == "serve" and r["kind"] == sys.argv[2], r
load, off = r["load"], r["offline"]
assert load["sent"] == 120 and load["ok"] == 120 and load["lost"] == 0 and load["mismatched"] == 0, load
assert load["refused_503"] == 0 and load["other_errors"] == 0 and r["load_errors"] == 0, load
assert 0 < load["p50_ms"] <= load["p90_ms"] <= load["p99_ms"], load
assert load["qps"] > 0 and off["per_s"] > 0 and off["batch"] == 4, (load, off)
assert abs(r["ratio_server_vs_offline"] - r["contenders"]["hotpath"]["best_per_s"] / r["contenders"]["offline"]["best_per_s"]) < 1e-9, r
assert r["server_exit_code_after_sigterm"] == 0, r
assert r["server_rows"] == 120 and 1 <= r["server_mean_batch_size"] <= 4, r  # the server's own /metrics count
o = r["overload"]
assert o["clients"] == 12 and o["max_queue_size"] == 4 and o["lost"] == 0 and o["mismatched"] == 0, o
assert o["sent"] == 300 and o["ok"] + o["refused_503"] + o["other_errors"] == 300, o
assert o["ok"] > 0 and o["server_exit_code_after_sigterm"] == 0, o
if o["refused_503"]:
    assert o["share_503"] == o["refused_503"] / 300 and o["p99_503_ms"] > 0, o
assert o["p99_accepted_under_queue_timeout"], o
PY
}

common=(--clients 3 --requests 120 --overload-clients 12 --overload-requests 300 --max-batch-size 4 --threads 1
        --repeats 1 --queue-timeout-ms 20000)
"$hp" bench serve cnn_pkg "${common[@]}" --json cnn.json > cnn.md 2> cnn.err \
  || fail "bench serve cnn: exit $? $(tail -5 cnn.err)"
check cnn.json image_classifier || fail "bench serve cnn: bad report: $(head -c 3000 cnn.json)"
grep -q "| serve" cnn.md || fail "bench serve cnn: no markdown row: $(cat cnn.md)"
"$hp" bench serve bert_pkg "${common[@]}" --seq-len 12 --json bert.json > bert.md 2> bert.err \
  || fail "bench serve bert: exit $? $(tail -5 bert.err)"
check bert.json text_classifier || fail "bench serve bert: bad report: $(head -c 3000 bert.json)"

# Bad options are one line, non-zero.
if "$hp" bench serve cnn_pkg --clients 0 > bad.out 2> bad.err; then fail "--clients 0 accepted"; fi
[ "$(wc -l < bad.err)" -le 2 ] || fail "--clients 0: more than one line: $(cat bad.err)"

finish "bench serve: all checks passed"
