#!/usr/bin/env python3
"""Reference outputs for hotpath's BERT family (tests/models/bert_*_test.cpp): transformers and
sentence-transformers on CPU, fp32, eager attention. Nothing is downloaded.

  bert_ref.py classifier --arch bert|distilbert --out DIR [--bin] [--bare] [--seed N]
      A tiny seeded random *ForSequenceClassification saved with save_pretrained (model.safetensors)
      or, with --bin, config.json + torch.save(model.state_dict()) as pytorch_model.bin; --bare saves
      only the encoder (BertModel keys, no prefix, no head). Writes DIR/ref.safetensors with a padded
      batch (input_ids, attention_mask, token_type_ids) and the model's logits (or last_hidden_state
      with --bare).
  bert_ref.py fixtures --out DIR
      In one process: DIR/{bert,distilbert}_{st,bin,bare,bare_bin} (as classifier above),
      DIR/{bert,distilbert}_act (gelu_new / relu + sinusoidal positions) and DIR/evil.pt.
  bert_ref.py embed --model DIR --sentences FILE --out FILE.safetensors
      sentence-transformers' embeddings of FILE's lines (one sentence a line) as "embeddings".
  bert_ref.py evil --out FILE
      A torch.save zip whose pickle calls os.system (a weights-only loader must refuse it).
"""
import argparse
import os
import sys

import torch


def tiny_config(arch, num_labels, variant=""):
    from transformers import BertConfig, DistilBertConfig
    labels = {i: f"class_{i}" for i in range(num_labels)}
    if arch == "bert":
        return BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
                          hidden_act="gelu_new" if variant == "act" else "gelu",
                          id2label=labels, label2id={v: k for k, v in labels.items()})
    return DistilBertConfig(vocab_size=97, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                            max_position_embeddings=40, sinusoidal_pos_embds=variant == "act",
                            activation="relu" if variant == "act" else "gelu",
                            id2label=labels, label2id={v: k for k, v in labels.items()})


def batch(seed, vocab, pair):
    g = torch.Generator().manual_seed(seed + 1)
    lengths = [12, 5, 9, 1]
    b, l = len(lengths), max(lengths)
    ids = torch.randint(1, vocab, (b, l), generator=g)
    mask = torch.zeros(b, l, dtype=torch.long)
    types = torch.zeros(b, l, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        ids[i, n:] = 0
        if pair and n > 2:
            types[i, n // 2:n] = 1
    return ids, mask, types


def classifier(args):
    from safetensors.torch import save_file
    from transformers import BertForSequenceClassification, DistilBertForSequenceClassification
    torch.manual_seed(args.seed)
    config = tiny_config(args.arch, 3, getattr(args, "variant", ""))
    config._attn_implementation = "eager"
    cls = BertForSequenceClassification if args.arch == "bert" else DistilBertForSequenceClassification
    model = cls(config).eval()
    # Larger than the default N(0, 0.02) init so the logits depend visibly on every layer.
    with torch.no_grad():
        for name, p in model.named_parameters():
            sinusoidal = getattr(config, "sinusoidal_pos_embds", False) and "position_embeddings" in name
            if "LayerNorm" not in name and "layer_norm" not in name and not sinusoidal:
                p.normal_(0.0, 0.2)
    os.makedirs(args.out, exist_ok=True)
    ids, mask, types = batch(args.seed, config.vocab_size, args.arch == "bert")
    with torch.no_grad():
        if args.bare:
            base = model.bert if args.arch == "bert" else model.distilbert
            kwargs = {"token_type_ids": types} if args.arch == "bert" else {}
            out = base(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
            state = base.state_dict()
        else:
            kwargs = {"token_type_ids": types} if args.arch == "bert" else {}
            out = model(input_ids=ids, attention_mask=mask, **kwargs).logits
            state = model.state_dict()
    if args.bin:
        config.save_pretrained(args.out)
        torch.save(state, os.path.join(args.out, "pytorch_model.bin"))
    elif args.bare:
        config.save_pretrained(args.out)
        save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(args.out, "model.safetensors"))
    else:
        model.save_pretrained(args.out)
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "output": out.contiguous()},
              os.path.join(args.out, "ref.safetensors"))


def embed(args):
    from safetensors.torch import save_file
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(1)
    with open(args.sentences, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f]
    model = SentenceTransformer(args.model, device="cpu", model_kwargs={"attn_implementation": "eager"})
    emb = model.encode(sentences, batch_size=8, convert_to_tensor=True, normalize_embeddings=False)
    save_file({"embeddings": emb.float().contiguous()}, args.out)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > " + _Evil.marker,))


def evil(args):
    _Evil.marker = args.out + ".pwned"
    torch.save({"weight": torch.zeros(2), "payload": _Evil()}, args.out)


def fixtures(args):
    for arch in ("bert", "distilbert"):
        for variant, binary, bare in (("st", False, False), ("bin", True, False), ("bare", False, True),
                                      ("bare_bin", True, True)):
            classifier(argparse.Namespace(arch=arch, out=os.path.join(args.out, f"{arch}_{variant}"), bin=binary,
                                          bare=bare, seed=args.seed))
        # Other activations (BERT gelu_new, DistilBERT relu) and DistilBERT's sinusoidal positions.
        classifier(argparse.Namespace(arch=arch, out=os.path.join(args.out, f"{arch}_act"), bin=False, bare=False,
                                      seed=args.seed, variant="act"))
    evil(argparse.Namespace(out=os.path.join(args.out, "evil.pt")))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("classifier")
    c.add_argument("--arch", choices=["bert", "distilbert"], required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--bin", action="store_true")
    c.add_argument("--bare", action="store_true")
    c.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("embed")
    e.add_argument("--model", required=True)
    e.add_argument("--sentences", required=True)
    e.add_argument("--out", required=True)
    x = sub.add_parser("fixtures")
    x.add_argument("--out", required=True)
    x.add_argument("--seed", type=int, default=0)
    v = sub.add_parser("evil")
    v.add_argument("--out", required=True)
    args = p.parse_args()
    {"classifier": classifier, "embed": embed, "evil": evil, "fixtures": fixtures}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
