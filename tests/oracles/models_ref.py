"""Reference side of hotpath's model parity tests: torchvision models, weights and outputs as safetensors.

  models_ref.py make OUT_DIR      # for each case: OUT_DIR/NAME.safetensors (the state_dict, saved with
                                  #   safetensors.torch.save_file) and OUT_DIR/NAME_io.safetensors ("input",
                                  #   "output" of the eval-mode forward); prints JSON {NAME: {...}}
  models_ref.py make-vit OUT_DIR  # the same for the ViT cases (VIT_CASES)
  models_ref.py forward NAME WEIGHTS INPUT OUT
                                  # builds case NAME, load_state_dict(strict=True) from WEIGHTS (e.g. written by
                                  #   hotpath), runs INPUT's "input" in eval mode, writes {"output"} to OUT

ViT parameters that torchvision initialises to constants (class token, LayerNorm affine, attention and
conv biases, the zero head) are randomised too, so each of them shows in the output.

Batch-norm running statistics and affine parameters are randomised (stats from one train-mode pass on random
data, then perturbed), so a model that ignored them, or mixed up running_mean and running_var, would fail.
"""
import json
import sys

import torch
import torch.nn as nn
import torchvision
from safetensors.torch import load_file, save_file

# name: (torchvision builder, num_classes, in_channels, small stem, input shape)
CASES = {
    "resnet18": ("resnet18", 1000, 3, False, (2, 3, 64, 64)),
    "resnet50": ("resnet50", 1000, 3, False, (2, 3, 64, 64)),
    "resnet18_small": ("resnet18", 10, 1, True, (2, 1, 28, 28)),
}

# name: (VisionTransformer keyword arguments, input shape); the names and configs are hotpath's
# (vit_tiny = registry's "vit_tiny": patch 16, 12 layers, 3 heads, D 192, MLP 768, 224×224).
VIT_CASES = {
    "vit_small_p8": (dict(image_size=32, patch_size=8, num_layers=2, num_heads=3, hidden_dim=192, mlp_dim=768,
                          num_classes=10), (2, 3, 32, 32)),
    "vit_tiny": (dict(image_size=224, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768,
                      num_classes=10), (1, 3, 224, 224)),
}


def build(name):
    if name in VIT_CASES:
        return torchvision.models.vision_transformer.VisionTransformer(**VIT_CASES[name][0])
    arch, num_classes, in_channels, small, _ = CASES[name]
    model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if small:  # hotpath's "_small" stem for 28×28/32×32 data
        model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


def randomise_batch_norm(model, input_shape, generator):
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for bn in bns:
            bn.weight.uniform_(0.5, 1.5, generator=generator)
            bn.bias.normal_(0.0, 0.1, generator=generator)
            bn.momentum = 1.0  # running stats := this batch's stats
        model.train()
        model(torch.randn((4,) + tuple(input_shape[1:]), generator=generator))
        for bn in bns:
            bn.momentum = 0.1
            bn.running_mean.add_(torch.randn(bn.running_mean.shape, generator=generator) * 0.05)
            bn.running_var.mul_(torch.empty(bn.running_var.shape).uniform_(0.8, 1.25, generator=generator))
            bn.num_batches_tracked.fill_(int(torch.randint(1, 1000, (1,), generator=generator)))
    model.eval()


def randomise_vit(model, generator):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("class_token"):
                p.normal_(0.0, 0.5, generator=generator)
            elif ".ln" in name and name.endswith("weight"):
                p.uniform_(0.5, 1.5, generator=generator)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.05, generator=generator)
            elif name == "heads.head.weight":
                p.normal_(0.0, 0.2, generator=generator)
    model.eval()


def make_vit(out_dir):
    summary = {}
    for index, name in enumerate(VIT_CASES):
        torch.manual_seed(4321 + index)
        generator = torch.Generator().manual_seed(77 + index)
        model = build(name)
        randomise_vit(model, generator)
        x = torch.randn(VIT_CASES[name][1], generator=generator)
        with torch.no_grad():
            y = model(x)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, f"{out_dir}/{name}.safetensors")
        save_file({"input": x, "output": y}, f"{out_dir}/{name}_io.safetensors")
        summary[name] = {"keys": len(state), "parameters": sum(p.numel() for p in model.parameters()),
                         "output_abs_max": float(y.abs().max()), "output_std": float(y.std())}
    print(json.dumps(summary))


def make(out_dir):
    summary = {}
    for index, name in enumerate(CASES):
        torch.manual_seed(1234 + index)
        generator = torch.Generator().manual_seed(99 + index)
        model = build(name)
        input_shape = CASES[name][4]
        randomise_batch_norm(model, input_shape, generator)
        x = torch.randn(input_shape, generator=generator)
        with torch.no_grad():
            y = model(x)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, f"{out_dir}/{name}.safetensors")
        save_file({"input": x, "output": y}, f"{out_dir}/{name}_io.safetensors")
        summary[name] = {"keys": len(state), "parameters": sum(p.numel() for p in model.parameters()),
                         "output_abs_max": float(y.abs().max())}
    print(json.dumps(summary))


def forward(name, weights, input_path, out_path):
    model = build(name)
    model.load_state_dict(load_file(weights), strict=True)
    model.eval()
    with torch.no_grad():
        y = model(load_file(input_path)["input"])
    save_file({"output": y}, out_path)


if __name__ == "__main__":
    # One thread: the result does not depend on it, and two OpenMP threads on a 2-core machine that is
    # busy with other work run ~30x slower (threads spin at barriers waiting for a descheduled peer).
    torch.set_num_threads(1)
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "make-vit":
        make_vit(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "forward":
        forward(*sys.argv[2:])
    else:
        sys.exit(__doc__)
