#!/usr/bin/env bash
# Tiny packages for the `hotpath serve` tests, random weights (seconds): DIR/img (cnn_small, 3×32×32, 4 classes),
# DIR/txt (a 2-layer BERT text classifier, 3 labels) and DIR/emb (the same shape as a sentence embedder), the text
# ones with a small WordPiece vocab.txt beside them (export --config writes no tokenizer).
# Usage: make_packages.sh HOTPATH DIR
set -uo pipefail
hp=$1
dir=$2
cat > "$dir/tiny_bert.json" <<'JSON'
{"model_type": "bert", "vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu",
 "layer_norm_eps": 1e-12, "num_labels": 3}
JSON
{
  printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'
  printf '%s\n' the cat sat on mat a dog ran far away and then came back home to sleep . , '!' '?'
  printf '%s\n' a b c d e f g h i j k l m n o p q r s t u v w x y z
} > "$dir/vocab.txt"
"$hp" export --model cnn_small --random-init --num-classes 4 --channels 3 --image-size 32 --out "$dir/img" \
  > "$dir/export-img.log" 2>&1 || { echo "FAIL: export img: $(tail -3 "$dir/export-img.log")" >&2; exit 1; }
"$hp" export --config "$dir/tiny_bert.json" --random-init --out "$dir/txt" > "$dir/export-txt.log" 2>&1 \
  || { echo "FAIL: export txt: $(tail -3 "$dir/export-txt.log")" >&2; exit 1; }
"$hp" export --config "$dir/tiny_bert.json" --random-init --task embed --out "$dir/emb" > "$dir/export-emb.log" 2>&1 \
  || { echo "FAIL: export emb: $(tail -3 "$dir/export-emb.log")" >&2; exit 1; }
cp "$dir/vocab.txt" "$dir/txt/vocab.txt"
cp "$dir/vocab.txt" "$dir/emb/vocab.txt"
