#!/usr/bin/env bash
# `hotpath embed` and `hotpath bench text --part embed` on a tiny BERT with seeded random weights
# (written here with numpy; no peer, no download): the bench's JSON has its fields, and embed's
# length sorting gives every line back in input order — lines of very different lengths, batched,
# embed exactly as each line does alone.
# Usage: bench_text_embed_cli_test.sh HOTPATH PYTHON
set -uo pipefail
hp=$1
py=$2
source "$(dirname "$0")/lib.sh"
make_work_dir

mkdir tiny
"$py" - tiny <<'PY' || die "writing the tiny model"
import json, sys
import numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
words = "the cat sat on mat a dog ran far away and then came back home to sleep . , ! ?".split()
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + list("abcdefghijklmnopqrstuvwxyz") + \
        ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
open(f"{d}/vocab.txt", "w").write("\n".join(vocab) + "\n")
h, layers, inter, pos = 16, 2, 32, 64
json.dump({"model_type": "bert", "vocab_size": len(vocab), "hidden_size": h, "num_hidden_layers": layers,
           "num_attention_heads": 2, "intermediate_size": inter, "max_position_embeddings": pos,
           "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}, open(f"{d}/config.json", "w"))
rng = np.random.default_rng(0)
w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
t = {"embeddings.word_embeddings.weight": w(len(vocab), h), "embeddings.position_embeddings.weight": w(pos, h),
     "embeddings.token_type_embeddings.weight": w(2, h),
     "embeddings.LayerNorm.weight": np.ones(h, np.float32), "embeddings.LayerNorm.bias": np.zeros(h, np.float32)}
for i in range(layers):
    p = f"encoder.layer.{i}."
    for name, (o, n) in {"attention.self.query": (h, h), "attention.self.key": (h, h), "attention.self.value": (h, h),
                         "attention.output.dense": (h, h), "intermediate.dense": (inter, h),
                         "output.dense": (h, inter)}.items():
        t[p + name + ".weight"], t[p + name + ".bias"] = w(o, n), w(o)
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
        t[p + name + ".weight"], t[p + name + ".bias"] = 1 + w(h), w(h)
save_file(t, f"{d}/model.safetensors")
PY

# Very different lengths, shuffled: sorting moves every line, and batches mix lengths.
cat > lines.txt <<'TXT'
the cat sat on the mat and then the dog came back home to sleep , and the cat ran far away !
a
the dog ran far away and then came back home to sleep . the cat sat on the mat , the dog ran .
cat
the cat sat .
the dog came back home to sleep and then ran far away , and then came back home to sleep again .
dog ran
zebra
TXT

"$hp" embed --model tiny --batch-size 3 --threads 1 --output batched.npy < lines.txt || fail "embed batched: exit $?"
i=0
while IFS= read -r line; do
  i=$((i + 1))
  printf '%s\n' "$line" > "one$i.txt"
  "$hp" embed --model tiny --threads 1 --output "one$i.npy" --input "one$i.txt" || fail "embed line $i: exit $?"
done < lines.txt
"$py" - "$i" <<'PY' || fail "batched embeddings are not each line's own (order after length sorting?)"
import sys
import numpy as np
n = int(sys.argv[1])
batched = np.load("batched.npy")
assert batched.shape == (n, 16), batched.shape
alone = np.stack([np.load(f"one{i + 1}.npy")[0] for i in range(n)])
assert np.allclose(np.linalg.norm(batched, axis=1), 1, atol=1e-5)
err = np.abs(batched - alone).max(axis=1)
assert err.max() < 1e-5, err
# Not a vacuous check: the lines' embeddings differ from each other.
assert np.abs(batched[:, None] - batched[None]).max(axis=2)[~np.eye(n, dtype=bool)].min() > 1e-3
PY

# The bench's embed part, no peer: JSON fields present and sensible.
"$hp" bench text --part embed --model tiny --input lines.txt --embed-lines 5 --threads 1 --repeats 2 \
  --json bench.json 2> bench.err || fail "bench text --part embed: exit $? $(cat bench.err)"
"$py" - <<'PY' || fail "bench text --part embed: bad JSON: $(cat bench.json)"
import json
part = json.load(open("bench.json"))["parts"][0]
assert part["part"] == "embed" and part["unit"] == "sentences/s", part
assert part["lines"] == 5 and part["dimension"] == 16 and part["batch_size"] == 32, part
assert part["hotpath_per_s"] > 0 and len(part["hotpath_runs_per_s"]) == 2, part
for key in ("hf_per_s", "ratio", "min_cosine", "precision", "threads", "load_average_before",
            "load_average_after", "max_length", "attention"):
    assert key in part, key
assert part["hf_per_s"] is None and part["ratio"] is None and part["min_cosine"] is None, part
PY

finish "bench text embed cli: all checks passed"
