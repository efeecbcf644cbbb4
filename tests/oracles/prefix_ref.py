"""Prefix-tuning parity references for tests/models/prefix_parity_test.cpp, with peft doing the prefix side.

  prefix_ref.py make --dir DIR [--projection] [--grads]
      a seeded tiny transformers BertForSequenceClassification (DIR/config.json, DIR/model.safetensors),
      peft.get_peft_model with a PrefixTuningConfig (the table or the reparameterisation MLP, then every
      prefix parameter and the classifier perturbed), DIR/adapter/ (save_pretrained), and DIR/io.safetensors:
      "input_ids", "attention_mask", "token_type_ids", "logits" (eval). With --grads also one training step's
      "loss" for "labels" and its gradients (dropout off): "grad_table" (d loss / d table, or d loss / d the
      MLP's output with --projection) and "grad_classifier". Without gradient checkpointing: with it,
      transformers 5 drops past_key_values inside checkpointed layers (modeling_layers.py sets them to None)
      and the step fails on the mask's size — the breakage PEFT users report; hotpath's checkpointed step is
      checked against this plain one.
  prefix_ref.py load --base DIR --adapter ADAPTER --input IN.safetensors --out OUT.safetensors
      PeftModel.from_pretrained(base, ADAPTER): logits for IN's input_ids / attention_mask / token_type_ids.

Eval mode (dropout off) unless noted, fp32, one thread.
"""

import argparse
import os

import torch
from safetensors.torch import load_file, save_file

torch.set_num_threads(1)


def _base(dir_):
    from transformers import BertConfig, BertForSequenceClassification
    config = BertConfig.from_pretrained(dir_)
    model = BertForSequenceClassification(config)
    model.load_state_dict(load_file(os.path.join(dir_, "model.safetensors")), strict=False)
    return model.eval()


def _inputs():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 64, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    types = torch.zeros(3, 9, dtype=torch.long)
    types[0, 5:] = 1
    return ids, mask, types


def make(a):
    from transformers import BertConfig, BertForSequenceClassification
    from peft import PrefixTuningConfig, get_peft_model
    torch.manual_seed(0)
    # Dropout probabilities 0: the --grads step in train mode draws no masks on either side.
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=32, max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config).eval()
    config.save_pretrained(a.dir)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(a.dir, "model.safetensors"))
    pc = PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=5, prefix_projection=a.projection,
                            encoder_hidden_size=12)
    pm = get_peft_model(model, pc)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in pm.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.3)
    pm.save_pretrained(os.path.join(a.dir, "adapter"))
    pm.eval()
    ids, mask, types = _inputs()
    out = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    with torch.no_grad():
        out["logits"] = pm(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.contiguous()
    if a.grads:
        # One training step's gradients w.r.t. the prefix table and the classifier (the config's dropout is 0).
        pm.train()
        enc = pm.prompt_encoder["default"]
        table = enc.embedding.weight if not a.projection else None
        captured = {}
        if a.projection:
            def keep(module, inputs, output):
                output.retain_grad()
                captured["t"] = output
            enc.transform.register_forward_hook(keep)
        labels = torch.tensor([0, 2, 1])
        loss = pm(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        loss.backward()
        # The MLP runs on the prompt tokens of every row (get_prompt expands them by batch): d loss / d table
        # sums the rows.
        grad = table.grad if table is not None else captured["t"].grad.sum(0)
        out.update({"labels": labels, "loss": loss.detach().reshape(1), "grad_table": grad.contiguous(),
                    "grad_classifier": pm.base_model.classifier.modules_to_save["default"].weight.grad.contiguous()})
    save_file(out, os.path.join(a.dir, "io.safetensors"))


def load(a):
    from peft import PeftModel
    model = PeftModel.from_pretrained(_base(a.base), a.adapter).eval()
    t = load_file(a.input)
    with torch.no_grad():
        logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                       token_type_ids=t["token_type_ids"]).logits
    save_file({"logits": logits.contiguous()}, a.out)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("make")
    s.add_argument("--dir", required=True)
    s.add_argument("--projection", action="store_true")
    s.add_argument("--grads", action="store_true")
    s = sub.add_parser("load")
    for flag in ("--base", "--adapter", "--input", "--out"):
        s.add_argument(flag, required=True)
    a = p.parse_args()
    {"make": make, "load": load}[a.cmd](a)


if __name__ == "__main__":
    main()
