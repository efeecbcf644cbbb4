#!/usr/bin/env bash
# `hotpath bench text --part finetune` on a tiny BERT shape (random weights, no peer, no download): the
# benchmark builds its model directory, packs its corpus, runs the real training loop (hotpath train's)
# in benchmark mode, and its JSON has the fields docs/benchmarks.md and bench/text.sh rely on.
# Usage: bench_text_finetune_cli_test.sh HOTPATH
set -uo pipefail
hp=$1
source "$(dirname "$0")/lib.sh"
make_work_dir

cat > tiny.json <<'JSON'
{"model_type": "bert", "vocab_size": 1200, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu",
 "layer_norm_eps": 1e-12}
JSON

"$hp" bench text --part finetune --config tiny.json --precision fp32 --batch-size 4 --seq-len 16 \
  --steps 2 --warmup 1 --threads 1 --repeats 2 --json bench.json > table.md 2> bench.err \
  || fail "bench text --part finetune: exit $? $(cat bench.err)"
python3 - <<'PY' || fail "bench text --part finetune: bad JSON: $(cat bench.json)"
import json
part = json.load(open("bench.json"))["parts"][0]
assert part["part"] == "finetune" and part["unit"] == "samples/s", part
assert part["layers"] == 2 and part["hidden_size"] == 16 and part["batch_size"] == 4 and part["seq_len"] == 16, part
assert part["hotpath_per_s"] > 0 and len(part["hotpath_runs_per_s"]) == 2, part
assert part["hf_per_s"] is None and part["ratio"] is None, part
assert "hotpath::train::train" in part["contenders"]["hotpath"]["runs"], part["contenders"]
assert part["order"] == ["hotpath", "hotpath"], part["order"]
for key in ("precision", "threads", "optimizer", "load_average_before", "load_average_after", "host", "dispatch",
            "hotpath_fractions", "hotpath_step_s", "command"):
    assert key in part, key
PY
grep -q '^| text finetune (samples/s, best of 2) | hotpath ' table.md || fail "no markdown row on stdout: $(cat table.md)"
# The scratch directory (model, shards, recipe, run) is gone.
ls -d "$work"/hotpath-bench-finetune-* >/dev/null 2>&1 && fail "scratch directory left behind"

# One-line refusals.
"$hp" bench text --part finetune --config tiny.json --seq-len 100 --steps 1 --threads 1 2> err.txt \
  && fail "--seq-len beyond max_position_embeddings accepted"
grep -q "max_position_embeddings" err.txt || fail "seq-len error does not say why: $(cat err.txt)"

finish "bench text finetune cli: all checks passed"
