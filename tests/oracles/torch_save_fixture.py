"""torch.save'd state dicts for the pytorch_model.bin reader's parity test (tests/models/torch_bin_parity_test.cpp).

Usage: torch_save_fixture.py OUT_DIR

Writes OUT_DIR/<case>.bin with torch.save and OUT_DIR/<case>.safetensors holding what hotpath must read
back: every tensor contiguous, nested dict keys joined with '.', non-tensor values left out. Cases:
  mixed     fp32/fp16/bf16/fp64/int64/int32/int8/uint8/bool, 0-d and empty tensors, shared storages,
            views with offsets and strides (slices, transposes, a column), nested dicts, ints/strings/lists
  module    nn.Module.state_dict() (an OrderedDict with _metadata), tied weights, keep_vars Parameters
  protocol4 the mixed dict saved with pickle_protocol=4 (FRAME, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL)
  legacy    the pre-1.6 non-zip format (must be refused; no .safetensors)
"""
import os
import sys

import torch
from safetensors.torch import save_file


def flatten(obj, prefix=""):
    out = {}
    for key, value in obj.items():
        if isinstance(value, torch.Tensor):
            out[prefix + key] = value.detach().contiguous().clone()
        elif isinstance(value, dict):
            out.update(flatten(value, prefix + key + "."))
    return out


def mixed():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    flat = torch.arange(40, dtype=torch.int64)
    sd = {
        "f32": torch.randn(3, 5, generator=g),
        "f16": torch.randn(4, 3, generator=g).half(),
        "bf16": torch.randn(2, 7, generator=g).bfloat16(),
        "f64": torch.randn(5, generator=g).double(),
        "i64": torch.arange(-5, 7, dtype=torch.int64).view(3, 4),
        "i32": torch.tensor([-(2**31), 0, 2**31 - 1], dtype=torch.int32),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 255], dtype=torch.uint8),
        "flag": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        # views into one storage: whole, a slice at an offset, a transpose, a column, every other row
        "base": base,
        "slice": base[2:5, 1:6],
        "transposed": base.t(),
        "column": base[:, 3],
        "strided": base[::2],
        "ints_tail": flat[10:30].view(4, 5),
        "ints_t": flat[:12].view(3, 4).t(),
        "nested": {"inner": {"w": torch.randn(2, 2, generator=g)}, "b": torch.ones(3, dtype=torch.float16)},
        "epoch": 3,
        "name": "fixture",
        "list": [1, 2.5, "x"],
        "tuple_of_tensors": (torch.ones(1),),  # not a dict: skipped as non-tensor
    }
    return sd


def module():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.norm = torch.nn.LayerNorm(4)
            self.out = torch.nn.Linear(4, 10)
            self.out.weight = self.emb.weight  # tied: one storage, two keys
            self.register_buffer("steps", torch.tensor(7))

    net = Net()
    return net.state_dict(), net.state_dict(keep_vars=True)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sd = mixed()
    torch.save(sd, f"{out}/mixed.bin")
    save_file(flatten(sd), f"{out}/mixed.safetensors")
    torch.save(sd, f"{out}/protocol4.bin", pickle_protocol=4)
    save_file(flatten(sd), f"{out}/protocol4.safetensors")
    state, params = module()
    torch.save(state, f"{out}/module.bin")
    expected = flatten(state)
    save_file(expected, f"{out}/module.safetensors")
    torch.save(params, f"{out}/params.bin")
    save_file(expected, f"{out}/params.safetensors")
    torch.save({"w": torch.ones(2)}, f"{out}/legacy.bin", _use_new_zipfile_serialization=False)


if __name__ == "__main__":
    main()
