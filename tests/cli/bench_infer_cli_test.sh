#!/usr/bin/env bash
# `hotpath bench infer` end to end on tiny packages made here (`hotpath export --random-init`): each scenario
# writes valid JSON with a row for hotpath and every requested peer engine (or the reason it was skipped),
# ratios, percentiles in order, the dispatch report and the engine's description; the peers agree with torch
# fp32 on the same inputs; a bad --compare is one line; a tiny vocabulary; exports never replace a run, leave no
# stale file with --overwrite and leave the old package intact when they fail. Few iterations: a smoke test.
# Usage: bench_infer_cli_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$1
py=$2
source "$(dirname "$0")/lib.sh"
make_work_dir

cat > tiny_bert.json <<'JSON'
{"model_type": "bert", "vocab_size": 1200, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu",
 "layer_norm_eps": 1e-12, "num_labels": 3}
JSON
"$hp" export --config tiny_bert.json --random-init --out bert_pkg > export.log 2>&1 \
  || die "hotpath export of the tiny BERT: $(tail -3 export.log)"

quick=(--threads 1 --warmup 1 --min-queries 3 --min-seconds 0 --max-seconds 2)

# Offline, every peer group: a row per engine (or skipped with a reason), ratios, accuracy of the peers.
"$hp" bench infer bert_pkg --scenario offline --batch 4 --seq-len 16 --compare torch,onnxruntime,openvino \
  "${quick[@]}" --json offline.json > table.md 2> offline.err || fail "bench infer offline: exit $? $(tail -5 offline.err)"
"$py" - offline.json table.md <<'PY' || fail "bench infer offline: bad report: $(head -c 3000 offline.json)"
import json, sys
r = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read()
assert r["benchmark"] == "infer" and r["scenario"] == "offline" and r["batch"] == 4 and r["seq_len"] == 16, r
assert r["kind"] == "text_classifier" and r["threads"] == 1, r
engines, skipped = r["engines"], r["skipped"]
assert list(engines)[0] == "hotpath", list(engines)
for name in ("torch_fp32", "torch_bf16", "ort_fp32", "ort_int8", "openvino_fp32", "openvino_default"):
    assert (name in engines) != (name in skipped), (name, list(engines), skipped)
    if name in skipped:
        assert skipped[name].startswith("skipped: "), skipped[name]
        assert name in table, name
    else:
        assert r[f"ratio_vs_{name}"] > 0, name
        assert engines[name]["accuracy"]["max_abs_diff"] >= 0, engines[name]
        assert f"| {name} |" in table, (name, table)
for name in ("torch_fp32", "ort_fp32", "ort_int8", "openvino_fp32"):
    assert name in engines, name  # these always run
for name, e in engines.items():
    assert e["per_s"] > 0 and e["queries"] >= 3 and e["batch"] == 4, (name, e)
    assert 0 < e["p50_ms"] <= e["p90_ms"] <= e["p99_ms"], (name, e)
    assert len(e["runs_per_s"]) == 1 and e["runs"], (name, e)
# torch fp32 is the reference; fp32 peers compute the same logits.
assert engines["torch_fp32"]["accuracy"]["max_abs_diff"] == 0, engines["torch_fp32"]
for name in ("ort_fp32", "openvino_fp32"):
    acc = engines[name]["accuracy"]
    assert acc["max_abs_diff"] < 1e-3 and acc["top1_agreement"] == 1.0, (name, acc)
best = max((e["per_s"], n) for n, e in engines.items() if n != "hotpath")
assert r["best_peer"] == best[1] and abs(r["ratio_vs_best_peer"] - engines["hotpath"]["per_s"] / best[0]) < 1e-9, r
assert r["dispatch"] and r["engine_describe"] and r["host"]["cores"] >= 1, r
assert "precision" in r["engine_describe"], r["engine_describe"]
assert table.startswith("| engine |") and "| hotpath |" in table, table
# A --random-init package: the peers get the same weights (rebuilt as export builds them), so hotpath's fp32
# logits are torch's.
assert r["accuracy_comparable"] is True and "random-init" in r["peer_weights"], r["peer_weights"]
acc = engines["hotpath"]["accuracy"]
assert acc["top1_agreement"] == 1.0 and acc["max_abs_diff"] < 1e-4, acc
PY

# An int8 package against ONNX Runtime's int8: the package's precision in the report, hotpath's accuracy too.
"$hp" export --config tiny_bert.json --random-init --precision int8 --out bert_int8 > export8.log 2>&1 \
  || fail "hotpath export --precision int8: $(tail -3 export8.log)"
"$hp" bench infer bert_int8 --batch 4 --seq-len 16 --engines ort_int8 "${quick[@]}" --json int8.json > /dev/null \
  2> int8.err || fail "bench infer int8: exit $? $(tail -5 int8.err)"
"$py" - int8.json <<'PY' || fail "bench infer int8: bad report: $(head -c 2000 int8.json)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["precision"] == "int8" and set(r["engines"]) == {"hotpath", "ort_int8"}, r
assert r["ratio_vs_ort_int8"] > 0 and r["best_peer"] == "ort_int8", r
acc = r["engines"]["hotpath"]["accuracy"]
assert 0 <= acc["top1_agreement"] <= 1 and acc["max_abs_diff"] >= 0, acc
assert "int8" in r["engine_describe"], r["engine_describe"]
PY

# Single-stream: batch-1 queries for every engine; one peer.
"$hp" bench infer bert_pkg --scenario singlestream --batch 3 --seq-len 8 --engines ort_fp32 "${quick[@]}" \
  --json single.json > /dev/null 2> single.err || fail "bench infer singlestream: exit $? $(tail -5 single.err)"
"$py" - single.json <<'PY' || fail "bench infer singlestream: bad report: $(head -c 2000 single.json)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["scenario"] == "singlestream" and r["batch"] == 1 and r["samples"] == 3, r
assert set(r["engines"]) == {"hotpath", "ort_fp32"} and r["skipped"] == {}, r
for e in r["engines"].values():
    assert e["batch"] == 1 and e["queries"] >= 3 and e["per_s"] > 0, e
PY

# Server: a QPS search under an explicit bound, hotpath alone (no peer: no python needed).
"$hp" bench infer bert_pkg --scenario server --batch 2 --seq-len 8 --p99-ms 2000 --server-queries 10 \
  --server-steps 2 "${quick[@]}" --json server.json > /dev/null 2> server.err \
  || fail "bench infer server: exit $? $(tail -5 server.err)"
"$py" - server.json <<'PY' || fail "bench infer server: bad report: $(head -c 2000 server.json)"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["scenario"] == "server" and r["server_p99_bound_ms"] == 2000, r
h = r["engines"]["hotpath"]
assert list(r["engines"]) == ["hotpath"] and r["best_peer"] is None, r
assert h["p99_bound_ms"] == 2000 and 1 <= len(h["trials"]) <= 2 and h["capacity_qps"] > 0, h
assert h["per_s"] > 0 and h["p99_ms"] <= 2000, h
PY

# Bad input: one line naming what was wrong.
out=$("$hp" bench infer bert_pkg --compare tensorflow --json bad.json 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "bench infer --compare tensorflow: exit $rc, expected 1"
[ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && printf '%s' "$out" | grep -q "'tensorflow'" \
  || fail "bench infer --compare tensorflow: expected one line naming it, got: $out"
[ ! -e bad.json ] || fail "bench infer --compare tensorflow: wrote a report anyway"

# A vocabulary under BERT's 103 ids (issue 28): the random ids come from the package's own vocabulary.
sed 's/"vocab_size": 1200/"vocab_size": 40/' tiny_bert.json > tiny_vocab.json
"$hp" export --config tiny_vocab.json --random-init --out vocab40_pkg > export40.log 2>&1 \
  || fail "hotpath export of a 40-token BERT: $(tail -3 export40.log)"
"$hp" bench infer vocab40_pkg --scenario offline --batch 2 --seq-len 8 "${quick[@]}" --json vocab40.json \
  > /dev/null 2> vocab40.err || fail "bench infer on a 40-token vocabulary: exit $? $(tail -5 vocab40.err)"

# Exports never destroy (issue 28). snapshot DIR: every file under it with its checksum.
snapshot() { (cd "$1" && find . -type f -exec md5sum {} + | sort); }
no_leftovers() {  # NAME: nothing of an export's temp or old directory beside NAME
  local left
  left=$(ls -d "$1".tmp-* "$1".old-* 2>/dev/null)
  [ -z "$left" ] || fail "export left $left behind"
}
one_line_naming() {  # WHAT OUTPUT PATH
  [ "$(printf '%s\n' "$2" | grep -c .)" -eq 1 ] && printf '%s' "$2" | grep -q "$3" \
    || fail "$1: expected one line naming $3, got: $2"
}
# A training run's directory as `hotpath train` leaves it (the refusal comes before anything is read).
mkdir -p run/checkpoints/step-00000001
echo '{"step": 1, "loss": 0.5}' > run/metrics.jsonl
echo 'trained weights' > run/model.safetensors
echo '{"model": "cnn_small"}' > run/model.json
run_before=$(snapshot run)
out=$("$hp" export --model-dir run --out run --overwrite 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "export --model-dir run --out run --overwrite: exit 0, expected a refusal"
one_line_naming "export --out run (the --model-dir) --overwrite" "$out" "run"
out=$("$hp" export --config tiny_bert.json --random-init --out run --overwrite 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "export --out RUN --overwrite: exit 0, expected a refusal"
one_line_naming "export --out RUN --overwrite" "$out" "training run"
out=$("$hp" export --config tiny_bert.json --random-init --out . --overwrite 2>&1)
[ $? -ne 0 ] || fail "export --out DIR_HOLDING_A_RUN --overwrite: exit 0, expected a refusal"
out=$("$hp" export --config tiny_bert.json --random-init --format onnx --out run/model.safetensors --overwrite 2>&1)
[ $? -ne 0 ] || fail "export --format onnx --out RUN/model.safetensors --overwrite: exit 0, expected a refusal"
one_line_naming "export --format onnx --out RUN/model.safetensors --overwrite" "$out" "model.safetensors"
[ "$(snapshot run)" = "$run_before" ] || fail "a refused export changed the training run"
no_leftovers run
# --overwrite replaces the whole package: a file the new one does not write (an old vocab.txt) is gone.
echo stale > bert_pkg/vocab.txt
"$hp" export --config tiny_bert.json --random-init --out bert_pkg --overwrite > export_again.log 2>&1 \
  || fail "export --overwrite over a package: $(tail -3 export_again.log)"
[ ! -e bert_pkg/vocab.txt ] || fail "export --overwrite left the old package's vocab.txt"
[ -e bert_pkg/model.safetensors ] || fail "export --overwrite: no model.safetensors in the new package"
no_leftovers bert_pkg
# A failed export (its calibration file is missing: found after the checks) leaves the old package intact.
pkg_before=$(snapshot bert_pkg)
out=$("$hp" export --config tiny_bert.json --random-init --calibration missing.txt --out bert_pkg --overwrite 2>&1)
[ $? -ne 0 ] || fail "export --calibration missing.txt: exit 0, expected an error"
[ "$(snapshot bert_pkg)" = "$pkg_before" ] || fail "a failed export --overwrite changed the old package"
no_leftovers bert_pkg

finish "bench infer cli: all checks passed"
