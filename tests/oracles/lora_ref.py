"""LoRA parity references for tests/models/lora_parity_test.cpp, with peft doing the LoRA side.

  lora_ref.py tree-load --base B.safetensors --adapter DIR --input IN.safetensors --out OUT.safetensors
      the tiny tree (tests/models/lora_test_tree.h) with B's weights + peft.PeftModel.from_pretrained(DIR):
      logits for IN's "x" → OUT "logits"
  lora_ref.py tree-make --dir DIR
      a seeded tree, peft.get_peft_model on it (lora_B set nonzero, the classifier copy changed), then
      DIR/base.safetensors, DIR/adapter/ (save_pretrained), DIR/io.safetensors ("x", "logits", "merged")
  lora_ref.py bert-load / bert-make: the same with transformers' BertForSequenceClassification built
      from DIR/config.json (bert-make writes the config and the base model.safetensors; inputs are
      "input_ids", "attention_mask").

Eval mode throughout (dropout off), fp32, one thread.
"""

import argparse
import json
import math
import os

import torch
from torch import nn
from safetensors.torch import load_file, save_file

torch.set_num_threads(1)


class SelfAttention(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)


class Dense(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.dense = nn.Linear(h, h)


class Attention(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.self = SelfAttention(h)
        self.output = Dense(h)


class Layer(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.attention = Attention(h)
        self.output = Dense(h)

    def forward(self, x):
        s = self.attention.self
        q, k, v = s.query(x), s.key(x), s.value(x)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(x.shape[-1]), -1)
        h = x + self.attention.output.dense(p @ v)
        return h + torch.tanh(self.output.dense(h))


class Encoder(nn.Module):
    def __init__(self, h, layers):
        super().__init__()
        self.layer = nn.ModuleList([Layer(h) for _ in range(layers)])


class TinyClassifier(nn.Module):
    def __init__(self, h=8, layers=2, labels=3):
        super().__init__()
        self.encoder = Encoder(h, layers)
        self.classifier = nn.Linear(h, labels)

    def forward(self, x):
        for layer in self.encoder.layer:
            x = layer(x)
        return self.classifier(x.mean(1))


def _perturb_adapter(peft_model, seed):
    # get_peft_model starts lora_B at zero (the adapter is then a no-op): make every adapter and
    # modules_to_save copy count, deterministically.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def tree_load(a):
    from peft import PeftModel
    model = TinyClassifier()
    model.load_state_dict(load_file(a.base), strict=True)
    model = PeftModel.from_pretrained(model, a.adapter).eval()
    x = load_file(a.input)["x"]
    with torch.no_grad():
        save_file({"logits": model(x).contiguous()}, a.out)


def tree_make(a):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    model = TinyClassifier().eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(a.dir, "base.safetensors"))
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["query", "value", "attention.output.dense"],
                        modules_to_save=["classifier"])
    pm = get_peft_model(model, config)
    _perturb_adapter(pm, 1)
    pm.save_pretrained(os.path.join(a.dir, "adapter"))
    pm.eval()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = pm(x)
        merged = pm.merge_and_unload()(x)
    save_file({"x": x, "logits": logits.contiguous(), "merged": merged.contiguous()}, os.path.join(a.dir, "io.safetensors"))


def _bert(dir_):
    from transformers import BertConfig, BertForSequenceClassification
    config = BertConfig.from_pretrained(dir_)
    model = BertForSequenceClassification(config)
    model.load_state_dict(load_file(os.path.join(dir_, "model.safetensors")), strict=False)
    return model.eval()


def bert_load(a):
    from peft import PeftModel
    model = PeftModel.from_pretrained(_bert(a.base), a.adapter).eval()
    t = load_file(a.input)
    with torch.no_grad():
        logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).logits
    save_file({"logits": logits.contiguous()}, a.out)


def bert_make(a):
    from transformers import BertConfig, BertForSequenceClassification
    from peft import LoraConfig, get_peft_model, TaskType
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=3)
    model = BertForSequenceClassification(config).eval()
    config.save_pretrained(a.dir)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(a.dir, "model.safetensors"))
    lc = LoraConfig(task_type=TaskType.SEQ_CLS, r=4, lora_alpha=16, lora_dropout=0.1,
                    target_modules=["query", "value"])
    pm = get_peft_model(model, lc)
    _perturb_adapter(pm, 1)
    pm.save_pretrained(os.path.join(a.dir, "adapter"))
    pm.eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 64, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad():
        logits = pm(input_ids=ids, attention_mask=mask).logits
        merged = pm.merge_and_unload()(input_ids=ids, attention_mask=mask).logits
    save_file({"input_ids": ids, "attention_mask": mask, "logits": logits.contiguous(), "merged": merged.contiguous()},
              os.path.join(a.dir, "io.safetensors"))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("tree-load", "bert-load"):
        s = sub.add_parser(name)
        s.add_argument("--base", required=True)
        s.add_argument("--adapter", required=True)
        s.add_argument("--input", required=True)
        s.add_argument("--out", required=True)
    for name in ("tree-make", "bert-make"):
        sub.add_parser(name).add_argument("--dir", required=True)
    a = p.parse_args()
    {"tree-load": tree_load, "tree-make": tree_make, "bert-load": bert_load, "bert-make": bert_make}[a.cmd](a)


if __name__ == "__main__":
    main()
