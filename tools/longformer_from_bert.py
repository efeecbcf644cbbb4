"""Makes a long-document Longformer from a short BERT checkpoint, as allenai's convert_model_to_long recipe
does (run in the venv; nothing is downloaded):

  longformer_from_bert.py --bert DIR --out DIR [--max-length 4096] [--attention-window 512]

The BERT directory's encoder becomes a LongformerModel whose
- position table covers --max-length tokens: RoBERTa-style positions (pad_token_id + 1 + i) copied from BERT's
  table in blocks (token i takes BERT's position i mod max_position_embeddings), the padding row zero;
- layers keep BERT's weights, with query/key/value copied into query_global/key_global/value_global;
- attention_window is --attention-window in every layer (two-sided, even);
- classifier.dense is BERT's pooler (tanh(dense(first token)) in both), classifier.out_proj is left to the
  fine-tune (hotpath's text recipes create the head for the data's labels).
Tokenizer files are copied, with model_max_length raised. The result loads in transformers
(LongformerForSequenceClassification.from_pretrained) and in hotpath (model.pretrained of a text recipe).
Prints one JSON line: {"out": DIR, "max_length": N, "attention_window": W, "parameters": P}.
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

TOKENIZER_FILES = ["vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


def bert_state(bert_dir):
    st = os.path.join(bert_dir, "model.safetensors")
    if os.path.exists(st):
        state = load_file(st)
    else:
        state = torch.load(os.path.join(bert_dir, "pytorch_model.bin"), map_location="cpu", weights_only=True)
    # Bare encoders (sentence-transformers) have no prefix; classifiers have "bert.".
    return {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in state.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bert", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--attention-window", type=int, default=512)
    a = p.parse_args()
    if a.attention_window <= 0 or a.attention_window % 2:
        raise SystemExit(f"--attention-window must be even and > 0, got {a.attention_window}")
    with open(os.path.join(a.bert, "config.json")) as f:
        bert = json.load(f)
    if bert.get("model_type") != "bert":
        raise SystemExit(f"{a.bert}/config.json: model_type is {bert.get('model_type')!r}; expected 'bert'")
    pad = bert.get("pad_token_id", 0)
    positions = a.max_length + pad + 1
    config = {
        "model_type": "longformer", "architectures": ["LongformerForSequenceClassification"],
        "vocab_size": bert["vocab_size"], "hidden_size": bert["hidden_size"],
        "num_hidden_layers": bert["num_hidden_layers"], "num_attention_heads": bert["num_attention_heads"],
        "intermediate_size": bert["intermediate_size"], "hidden_act": bert.get("hidden_act", "gelu"),
        "hidden_dropout_prob": bert.get("hidden_dropout_prob", 0.1),
        "attention_probs_dropout_prob": bert.get("attention_probs_dropout_prob", 0.1),
        "layer_norm_eps": bert.get("layer_norm_eps", 1e-12), "initializer_range": bert.get("initializer_range", 0.02),
        "type_vocab_size": bert.get("type_vocab_size", 2), "max_position_embeddings": positions,
        "pad_token_id": pad, "attention_window": [a.attention_window] * bert["num_hidden_layers"],
        "converted_from": os.path.basename(os.path.normpath(a.bert)),
    }
    state = bert_state(a.bert)
    out = {}
    for key, value in state.items():
        if key.startswith("pooler.dense."):
            out["classifier.dense." + key[len("pooler.dense."):]] = value
            continue
        if key == "embeddings.position_ids" or not key.startswith(("embeddings.", "encoder.")):
            continue
        out["longformer." + key] = value
        if ".attention.self." in key:
            for proj in ("query", "key", "value"):
                marker = f".attention.self.{proj}."
                if marker in key:
                    out["longformer." + key.replace(marker, f".attention.self.{proj}_global.")] = value.clone()
    table = state["embeddings.position_embeddings.weight"]
    long_table = torch.zeros(positions, table.shape[1], dtype=table.dtype)
    for i in range(a.max_length):
        long_table[pad + 1 + i] = table[i % table.shape[0]]
    out["longformer.embeddings.position_embeddings.weight"] = long_table
    os.makedirs(a.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(a.out, "model.safetensors"))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in TOKENIZER_FILES:
        src = os.path.join(a.bert, name)
        if not os.path.exists(src):
            continue
        if name == "tokenizer_config.json":
            with open(src) as f:
                tc = json.load(f)
            tc["model_max_length"] = a.max_length
            with open(os.path.join(a.out, name), "w") as f:
                json.dump(tc, f, indent=2)
        else:
            shutil.copyfile(src, os.path.join(a.out, name))
    print(json.dumps({"out": a.out, "max_length": a.max_length, "attention_window": a.attention_window,
                      "parameters": sum(v.numel() for v in out.values())}))


if __name__ == "__main__":
    main()
