"""Bottleneck-adapter parity references for tests/models/adapter_parity_test.cpp, with the `adapters` library
(AdapterHub) doing the adapter side.

adapters 1.3 needs transformers 4.57, the venv has 5.x: scripts/setup installs the library into an overlay
folder ($HOTPATH_CACHE/adapters, requirements-adapters.txt) that this script puts first on sys.path, before
anything imports transformers; torch comes from the venv.

  adapters_ref.py make --dir DIR --config seq_bn|double_seq_bn
      a seeded tiny transformers BertForSequenceClassification (DIR/config.json, DIR/model.safetensors),
      adapters.init + add_adapter("bottleneck", config) + train_adapter, every adapter weight and the head
      perturbed, DIR/adapter/ (save_adapter(..., use_safetensors=True)) and DIR/io.safetensors: "input_ids",
      "attention_mask", "token_type_ids", "logits" (eval).
  adapters_ref.py load --base DIR --adapter ADAPTER --input IN.safetensors --out OUT.safetensors
      load_adapter(ADAPTER, use_safetensors=True, set_active=True) on the base: logits for IN's inputs.

Eval mode (dropout off), fp32, one thread.
"""

import argparse
import os
import sys

_overlay = os.environ.get("HOTPATH_ADAPTERS_OVERLAY") or os.path.join(
    os.environ.get("HOTPATH_CACHE") or os.path.expanduser("~/.cache/hotpath"), "adapters")
if not os.path.isdir(_overlay):
    raise SystemExit(f"adapters_ref.py: no adapters overlay at {_overlay} (run scripts/setup)")
sys.path.insert(0, _overlay)
os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(1)


def _base(dir_):
    import adapters
    from transformers import BertConfig, BertForSequenceClassification
    model = BertForSequenceClassification(BertConfig.from_pretrained(dir_))
    model.load_state_dict(load_file(os.path.join(dir_, "model.safetensors")), strict=False)
    adapters.init(model)
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
    import adapters
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    # initializer_range 0.5: logits of order 1, so a wrong placement shows (adapters' "bert" init is N(0, 0.02)).
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=32, max_position_embeddings=32, num_labels=3, initializer_range=0.5)
    model = BertForSequenceClassification(config).eval()
    config.save_pretrained(a.dir)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(a.dir, "model.safetensors"))
    adapters.init(model)
    model.add_adapter("bottleneck", config=adapters.BnConfig.load(a.config, reduction_factor=4))
    model.train_adapter("bottleneck")
    model.set_active_adapters("bottleneck")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
    os.makedirs(os.path.join(a.dir, "adapter"), exist_ok=True)
    model.save_adapter(os.path.join(a.dir, "adapter"), "bottleneck", use_safetensors=True)
    model.eval()
    ids, mask, types = _inputs()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "logits": logits.contiguous()},
              os.path.join(a.dir, "io.safetensors"))


def load(a):
    model = _base(a.base)
    info = {}
    name = model.load_adapter(a.adapter, use_safetensors=True, set_active=True, loading_info=info)
    if info.get("missing_keys") or info.get("unexpected_keys"):
        raise SystemExit(f"adapters_ref.py: load_adapter({a.adapter}): {info}")
    model.eval()
    t = load_file(a.input)
    with torch.no_grad():
        logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                       token_type_ids=t["token_type_ids"]).logits
    save_file({"logits": logits.contiguous(), "active": torch.tensor([1 if name else 0])}, a.out)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("make")
    s.add_argument("--dir", required=True)
    s.add_argument("--config", choices=["seq_bn", "double_seq_bn"], required=True)
    s = sub.add_parser("load")
    for flag in ("--base", "--adapter", "--input", "--out"):
        s.add_argument(flag, required=True)
    a = p.parse_args()
    {"make": make, "load": load}[a.cmd](a)


if __name__ == "__main__":
    main()
