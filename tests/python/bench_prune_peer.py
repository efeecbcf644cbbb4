#!/usr/bin/env python3
"""The peer side of `hotpath export --prune-ratio` (structured channel pruning + distillation fine-tuning): the same
model, start weights, cut and fine-tuning protocol done with the PyPI library torch-pruning in plain PyTorch, then
scored on the Fashion-MNIST test split, so that the accuracy cost of hotpath's pruning can be reported beside the
peer's (run by hand, not by ctest).

  bench_prune_peer.py --run RUN_DIR --ratio R --round-to 8 --steps S --batch-size B --lr LR --temperature T
                      --label-weight W --seed K [--threads 2] [--json OUT] [--data /usr/share/datasets/fashion-mnist]

RUN_DIR is a `hotpath train` run of cnn_small (or cnn_medium) on Fashion-MNIST (configs/fashion_mnist.yaml). Its
model.json names the architecture (model, in_channels, num_classes), the weight file ("weights":
model.safetensors) and the normalisation (mean, std); nothing of these is hard-coded. Nothing is downloaded.

Model: SmallCnn below, the twin of src/hotpath/models/vision/cnn.cpp with the same parameter names, so the run's
safetensors load with strict=True: features = [conv3x3 w (no bias), BN, ReLU] ×2, MaxPool 2, [conv3x3 2w, BN,
ReLU] ×2, MaxPool 2, [conv3x3 4w, BN, ReLU], AdaptiveAvgPool 1 (features.0 … features.17); classifier =
Linear(4w, classes) on the pooled features flattened (w = 32 for cnn_small). BatchNorm eps 1e-5, momentum 0.1.

Data: Debian's dataset-fashion-mnist IDX files ({train,t10k}-{images-idx3,labels-idx1}-ubyte.gz), read with numpy;
pixels / 255, then (x - mean) / std with the run's mean/std. Training batches: each epoch a torch.randperm of the
60,000 training images from a torch.Generator seeded --seed, batches of B in that order (the last partial batch
dropped, epochs repeated until S batches), each image flipped horizontally with p = 0.5 (from the same generator);
no crop (hotpath's --prune-crop-scale 1). Evaluation: all 10,000 test images, eval mode, top-1 %.

Pruning (torch-pruning, as its README prunes a model): tp.pruner.BasePruner(model, example input [1, C, 28, 28],
importance=tp.importance.GroupMagnitudeImportance(p=1) (L1 over the dependency group, mean-reduced, mean-normalised),
pruning_ratio=R, round_to=round_to, ignored_layers=[model.classifier], global_pruning=False, iterative_steps=1),
then pruner.step(): each group keeps int(C·(1 − R)) of its C channels rounded down to a multiple of round_to, those
of highest importance. NB: torch-pruning scores the unfolded model (conv rows, BN affine, next conv's columns);
hotpath scores its lowered graph, where each BN is folded into its conv, so the kept channels may differ.
MACs and params: tp.utils.count_ops_and_params on one [1, C, 28, 28] image (torch-pruning's counter, which also
counts BN, ReLU and pooling; hotpath's graph_cost counts the folded graph's convs and linear only).

Fine-tuning (hotpath's qat_train with fake-quantization off, src/hotpath/infer/graph/qat.cpp): teacher = a deep
copy of the dense model in eval mode, no grad; student = the pruned model in TRAIN mode (its BatchNorms use batch
statistics and update their running ones, as a PyTorch user fine-tunes; hotpath's student has its BNs folded).
One batch per step, S steps:
  loss = kl_div(log_softmax(student / T), softmax(teacher / T)) summed over classes, mean over the batch, × T²
         + W × cross_entropy(student, labels)                      (i.e. KL(teacher ‖ student) at temperature T)
  torch.optim.AdamW(lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0), LambdaLR: step s (1-based) uses
  LR · min(1, s / warmup), warmup = max(1, S // 20), so the first update already uses LR / warmup.
The seconds are the wall clock of the S steps (batch assembly included, evaluation excluded), at --threads torch
threads (default 2). Models and batches are channels-last when model.json says "channels_last": true (as the run
trained; on a CPU about 1.7× faster here than NCHW for this net), NCHW otherwise.

Output: one JSON line on stdout (and in --json OUT):
  {"peer": "torch-pruning X.Y.Z", "ratio", "round_to", "macs": {"dense", "pruned"}, "params": {"dense", "pruned"},
   "widths": {conv name: out channels after the cut}, "top1": {"dense", "pruned", "finetuned"},
   "finetune": {"steps", "batch_size", "lr", "temperature", "label_weight", "seconds", "loss_first", "loss_last"}}
"""

import argparse
import copy
import gzip
import importlib.metadata
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

WIDTHS = {"cnn_small": 32, "cnn_medium": 64}


class SmallCnn(nn.Module):
    """hotpath's models::SmallCnn (models/vision/cnn.h), parameter names included."""

    def __init__(self, width=32, num_classes=10, in_channels=1):
        super().__init__()
        layers = []

        def conv_bn_relu(cin, cout):
            layers.extend([nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)])

        conv_bn_relu(in_channels, width)
        conv_bn_relu(width, width)
        layers.append(nn.MaxPool2d(2))
        conv_bn_relu(width, 2 * width)
        conv_bn_relu(2 * width, 2 * width)
        layers.append(nn.MaxPool2d(2))
        conv_bn_relu(2 * width, 4 * width)
        layers.append(nn.AdaptiveAvgPool2d(1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def read_idx(path):
    """A gzipped IDX file (images: magic 2051 → uint8 [N, rows, cols]; labels: 2049 → uint8 [N])."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    if magic == 2051:
        n, rows, cols = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
        return np.frombuffer(raw, np.uint8, n * rows * cols, 16).reshape(n, rows, cols)
    if magic == 2049:
        n = int.from_bytes(raw[4:8], "big")
        return np.frombuffer(raw, np.uint8, n, 8)
    raise SystemExit("%s: not an IDX images/labels file (magic %d)" % (path, magic))


def load_split(data_dir, split, mean, std):
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    if len(images) != len(labels):
        raise SystemExit("%s: %d images but %d labels" % (split, len(images), len(labels)))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)  # [N, 1, 28, 28]
    x = (x - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)
    return x.contiguous(), torch.from_numpy(labels.astype(np.int64))


def train_batches(images, labels, batch_size, generator):
    """Endless: per epoch a random order, batches of batch_size (the last partial one dropped), flip p = 0.5."""
    n = len(images)
    if n < batch_size:
        raise SystemExit("batch size %d exceeds the %d training images" % (batch_size, n))
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = order[start:start + batch_size]
            x = images[idx]
            flip = torch.rand(batch_size, generator=generator) < 0.5
            x[flip] = x[flip].flip(-1)
            yield x, labels[idx]


@torch.no_grad()
def top1(model, images, labels, memory_format, batch_size=1000):
    model.eval()
    correct = 0
    for start in range(0, len(images), batch_size):
        logits = model(images[start:start + batch_size].contiguous(memory_format=memory_format))
        correct += (logits.argmax(-1) == labels[start:start + batch_size]).sum().item()
    return 100.0 * correct / len(images)


def load_run(run_dir):
    with open(os.path.join(run_dir, "model.json")) as f:
        meta = json.load(f)
    name = meta.get("model")
    if name not in WIDTHS:
        raise SystemExit("%s: model %r is not one of %s" % (run_dir, name, sorted(WIDTHS)))
    model = SmallCnn(WIDTHS[name], int(meta["num_classes"]), int(meta.get("in_channels", 1)))
    weights = os.path.join(run_dir, meta.get("weights", "model.safetensors"))
    from safetensors.torch import load_file
    model.load_state_dict(load_file(weights), strict=True)
    return model, meta, weights


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", required=True, help="hotpath run directory (model.json + its weights)")
    ap.add_argument("--ratio", type=float, required=True)
    ap.add_argument("--round-to", type=int, default=8)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--temperature", type=float, required=True)
    ap.add_argument("--label-weight", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the JSON here")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="the IDX files' directory")
    args = ap.parse_args()
    if not 0.0 <= args.ratio < 1.0 or args.round_to < 1 or args.steps < 0 or args.batch_size < 1 \
            or args.temperature <= 0.0 or args.label_weight < 0.0:
        raise SystemExit("need 0 <= ratio < 1, round_to >= 1, steps >= 0, batch_size >= 1, temperature > 0, "
                         "label_weight >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import torch_pruning as tp

    model, meta, weights = load_run(args.run)
    mean, std = [float(v) for v in meta["mean"]], [float(v) for v in meta["std"]]
    train_x, train_y = load_split(args.data, "train", mean, std)
    test_x, test_y = load_split(args.data, "t10k", mean, std)
    size = int(meta.get("image_size", 28))
    example = torch.zeros(1, model.features[0].in_channels, size, size)

    fmt = torch.channels_last if meta.get("channels_last", False) else torch.contiguous_format
    model.to(memory_format=fmt).eval()
    dense_top1 = top1(model, test_x, test_y, fmt)
    dense_macs, dense_params = tp.utils.count_ops_and_params(model, example)
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)

    pruner = tp.pruner.BasePruner(
        model, example, importance=tp.importance.GroupMagnitudeImportance(p=1), pruning_ratio=args.ratio,
        round_to=args.round_to, ignored_layers=[model.classifier], global_pruning=False, iterative_steps=1)
    pruner.step()
    pruned_macs, pruned_params = tp.utils.count_ops_and_params(model, example)
    model.to(memory_format=fmt)  # the pruned weights are new (contiguous) tensors
    widths = {name: m.out_channels for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    pruned_top1 = top1(model, test_x, test_y, fmt)

    t = args.temperature
    warmup = max(1, args.steps // 20)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    # LambdaLR evaluates the lambda at 0 on construction (the lr of the first update) and at i after i steps.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup))
    batches = train_batches(train_x, train_y, args.batch_size, torch.Generator().manual_seed(args.seed))
    losses = []
    model.train()
    start = time.perf_counter()
    for _ in range(args.steps):
        x, y = next(batches)
        x = x.contiguous(memory_format=fmt)
        with torch.no_grad():
            target = F.softmax(teacher(x) / t, -1)
        logits = model(x)
        loss = F.kl_div(F.log_softmax(logits / t, -1), target, reduction="none").sum(-1).mean() * (t * t)
        if args.label_weight > 0.0:
            loss = loss + args.label_weight * F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    finetuned_top1 = top1(model, test_x, test_y, fmt)

    result = {
        "peer": "torch-pruning %s" % importlib.metadata.version("torch-pruning"),
        "ratio": args.ratio,
        "round_to": args.round_to,
        "macs": {"dense": int(dense_macs), "pruned": int(pruned_macs)},
        "params": {"dense": int(dense_params), "pruned": int(pruned_params)},
        "widths": widths,
        "top1": {"dense": round(dense_top1, 2), "pruned": round(pruned_top1, 2), "finetuned": round(finetuned_top1, 2)},
        "finetune": {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "temperature": t,
                     "label_weight": args.label_weight, "seconds": round(seconds, 2),
                     "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None},
    }
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print("weights %s; torch %s, %d threads, %s" % (weights, torch.__version__, args.threads, fmt), file=sys.stderr)


if __name__ == "__main__":
    main()
