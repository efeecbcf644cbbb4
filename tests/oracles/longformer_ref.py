#!/usr/bin/env python3
"""Reference outputs for hotpath's Longformer (tests/models/longformer_parity_test.cpp): transformers'
LongformerForSequenceClassification / LongformerModel / LongformerSelfAttention on CPU, fp32. Nothing is
downloaded: the models are tiny, seeded and random.

  longformer_ref.py fixtures --out DIR
      DIR/cls: a LongformerForSequenceClassification (2 layers, windows 4 and 8, 3 labels) saved with
      save_pretrained, and DIR/cls/ref.safetensors holding a padded batch (input_ids, attention_mask,
      global_attention_mask on tokens 0, 5 and 20 where they are tokens), the classifier's logits with its
      default global token (the first), `hidden`: LongformerModel's last_hidden_state with the explicit global
      mask, and `attention_*`: one LongformerSelfAttention (window 6) on random hidden states with that mask
      (its hidden states, output and the merged roles).
"""
import argparse
import os

import torch


def tiny_config():
    from transformers import LongformerConfig
    labels = {i: f"class_{i}" for i in range(3)}
    return LongformerConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=48, max_position_embeddings=80, type_vocab_size=2, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, attention_window=[4, 8], layer_norm_eps=1e-5,
                            id2label=labels, label2id={v: k for k, v in labels.items()})


def batch(seed, vocab, pad):
    g = torch.Generator().manual_seed(seed + 1)
    lengths = [40, 17, 33, 3]
    b, l = len(lengths), max(lengths)
    ids = torch.randint(3, vocab, (b, l), generator=g)
    mask = torch.zeros(b, l, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = pad
    ids[:, 0] = 0  # <s>
    glob = torch.zeros(b, l, dtype=torch.long)
    glob[:, [0, 5, 20]] = 1
    glob = glob * mask
    return ids, mask, glob


def fixtures(args):
    from safetensors.torch import save_file
    from transformers import LongformerForSequenceClassification
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention
    torch.manual_seed(args.seed)
    config = tiny_config()
    model = LongformerForSequenceClassification(config).eval()
    # Larger than the default N(0, 0.02) init so the outputs depend visibly on every layer.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" not in name:
                p.normal_(0.0, 0.2)
    out = os.path.join(args.out, "cls")
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    ids, mask, glob = batch(args.seed, config.vocab_size, config.pad_token_id)
    tensors = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": glob}
    with torch.no_grad():
        tensors["logits"] = model(input_ids=ids, attention_mask=mask).logits
        tensors["hidden"] = model.longformer(input_ids=ids, attention_mask=mask,
                                             global_attention_mask=glob).last_hidden_state
        # One self-attention block on its own, as LongformerModel calls it (the merged mask → -1/0/+1 signs).
        attn_config = tiny_config()
        attn_config.attention_window = [12, 12]
        attn = LongformerSelfAttention(attn_config, layer_id=0).eval()
        for p in attn.parameters():
            p.normal_(0.0, 0.3)
        hidden = torch.randn(ids.shape[0], ids.shape[1], config.hidden_size)
        pad = (12 - ids.shape[1] % 12) % 12  # HF's _pad_to_window_size
        roles = torch.nn.functional.pad(mask * (glob + 1), (0, pad))
        padded = torch.nn.functional.pad(hidden, (0, 0, 0, pad))
        extended = (1.0 - roles.float()) * torch.finfo(torch.float32).min
        result = attn(padded, attention_mask=extended, is_index_masked=extended < 0,
                      is_index_global_attn=extended > 0, is_global_attn=bool((extended > 0).any()))[0]
        tensors["attention_hidden"] = hidden
        tensors["attention_output"] = result[:, :ids.shape[1]]
        tensors["attention_roles"] = mask * (glob + 1)
        save_file({k: v.contiguous() for k, v in attn.state_dict().items()},
                  os.path.join(out, "attention.safetensors"))
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "ref.safetensors"))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    x = sub.add_parser("fixtures")
    x.add_argument("--out", required=True)
    x.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    fixtures(args)


if __name__ == "__main__":
    main()
