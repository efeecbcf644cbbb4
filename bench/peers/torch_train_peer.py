#!/usr/bin/env python3
"""The PyTorch peer of `hotpath bench train --compare torch`: the same recipe trained in eager PyTorch.

Reads the resolved recipe that `hotpath bench train` wrote (to_yaml of the recipe it ran) and trains
what a practitioner writes for it: the torchvision model (weights=None), a DataLoader over the same
WebDataset shards (webdataset + PIL + torchvision transforms equivalent to the recipe's), the same
optimizer with the same no-weight-decay groups, schedule, label smoothing, accumulation, clipping,
EMA, bf16 autocast and channels-last. Times --warmup steps untimed, then --steps optimizer steps, and
prints one JSON line: {"samples_per_s", "data_wait_fraction", "steps", "breakdown", ...}.

    python bench/peers/torch_train_peer.py --recipe run/recipe.yaml --steps 20 --warmup 3

The breakdown is timed as hotpath's StepClock (train/step_clock.h) times it, over the timed steps only:
CUDA events at each phase boundary (no synchronisation added to the loop; the GPU timeline), the wall
clock on the CPU, each step beginning where the previous one ended, so that its step_ms is the step
time samples/s implies (wall_step_ms). data_wait_fraction: data time (next batch + host copy + memory
format) over data + forward + backward + optimizer, over the timed steps.
"""
import argparse
import copy
import json
import math
import os
import random
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
import webdataset as wds
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_data_peer import expand_shards, single_threaded_worker  # noqa: E402


class RecipeLoader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where "5e-04" (no dot) is a string; hotpath's yaml-cpp writes such floats."""


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)$"),
    list("-+0123456789."))


# ---- model -------------------------------------------------------------------------------------

class SmallCnn(nn.Module):
    """hotpath's cnn_small (width 32) / cnn_medium (64), src/hotpath/models/cnn.cpp, same names."""

    def __init__(self, width, num_classes, in_channels):
        super().__init__()
        layers = []
        for cin, cout, pool in ((in_channels, width, False), (width, width, True), (width, 2 * width, False),
                                (2 * width, 2 * width, True), (2 * width, 4 * width, False)):
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool2d(2))
        layers.append(nn.AdaptiveAvgPool2d(1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def build_model(m, in_channels):
    name, classes = m["name"], m["num_classes"]
    if name in ("cnn_small", "cnn_medium"):
        return SmallCnn(32 if name == "cnn_small" else 64, classes, in_channels)
    if name.startswith("resnet"):
        arch = name.removesuffix("_small")
        model = getattr(torchvision.models, arch)(weights=None, num_classes=classes,
                                                  zero_init_residual=m.get("zero_init_residual", False))
        if name.endswith("_small"):  # hotpath's small-input stem for 28×28/32×32 data
            model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
            model.maxpool = nn.Identity()
        elif in_channels != 3:
            model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return model
    if name == "vit_b_16":
        model = torchvision.models.vit_b_16(weights=None, num_classes=classes)
    elif name == "vit_tiny":  # hotpath's vit_tiny (models/vit.cpp)
        model = torchvision.models.vision_transformer.VisionTransformer(
            image_size=224, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768,
            num_classes=classes)
    elif name == "efficientnet_b0":
        model = torchvision.models.efficientnet_b0(weights=None, num_classes=classes)
        if in_channels != 3:
            model.features[0][0] = nn.Conv2d(in_channels, 32, 3, 2, 1, bias=False)
        return model
    elif name == "efficientnet_lite0":
        tools = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "oracles")
        sys.path.insert(0, tools)
        try:
            from efficientnet_ref import PackageLite0  # the package's model, re-implemented
        except ImportError as e:
            sys.exit(f"torch_train_peer: efficientnet_lite0 needs tests/oracles/efficientnet_ref.py: {e}")
        if in_channels != 3:
            sys.exit("torch_train_peer: efficientnet_lite0's reference model takes 3 channels only")
        return PackageLite0(num_classes=classes)
    else:
        sys.exit(f"torch_train_peer: no PyTorch twin for model '{name}'")
    if in_channels != 3:
        model.conv_proj = nn.Conv2d(in_channels, model.hidden_dim, kernel_size=16, stride=16)
    return model


# ---- data --------------------------------------------------------------------------------------

def make_loader(d, micro_batch, seed):
    size = d["image_size"]
    if d["train_crop"] == "resize":
        crop = [T.Resize((size, size))]
    else:
        crop = [T.RandomResizedCrop(size, scale=(d["scale_min"], d["scale_max"]))]
    if d["translate"] > 0:
        crop.append(T.RandomCrop(size, padding=d["translate"]))
    steps = crop + [T.RandomHorizontalFlip(d["flip"]), T.ToTensor(),
                    T.Normalize(d["mean"][:d["channels"]], d["std"][:d["channels"]])]
    if d.get("random_erasing", 0) > 0:
        steps.append(T.RandomErasing(p=d["random_erasing"], value=0))  # after Normalize: erased = the mean
    transform = T.Compose(steps)
    decoder = "pil" if d["channels"] == 3 else "pill"  # "pill": gray (L)
    dataset = (
        wds.WebDataset(expand_shards(d["train"]), resampled=True, shardshuffle=False,
                       handler=wds.warn_and_continue, seed=seed)
        .shuffle(d["shuffle_buffer"])
        .decode(decoder, handler=wds.warn_and_continue)
        .to_tuple("jpg;jpeg;png", "cls", handler=wds.warn_and_continue)
        .map_tuple(transform, int, handler=wds.warn_and_continue)
    )
    workers = d["workers"]
    return torch.utils.data.DataLoader(
        dataset, batch_size=micro_batch, num_workers=workers, persistent_workers=workers > 0,
        prefetch_factor=max(1, d["prefetch"] // max(workers, 1)) if workers > 0 else None,
        pin_memory=torch.cuda.is_available(), drop_last=True, worker_init_fn=single_threaded_worker)


# ---- optimizer and schedule ----------------------------------------------------------------------

def no_decay(name, p):
    return p.ndim <= 1 or name.endswith(".bias")


def make_optimizer(o, model):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    wd = o["weight_decay"]
    if o["no_decay_norm_bias"] and wd > 0:
        groups = [{"params": [p for n, p in named if not no_decay(n, p)], "weight_decay": wd},
                  {"params": [p for n, p in named if no_decay(n, p)], "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
    else:
        groups = [{"params": [p for _, p in named], "weight_decay": wd}]
    if o["name"] == "sgd":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o["momentum"], dampening=o["dampening"],
                               nesterov=o["nesterov"])
    return torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])


def make_schedule(s, optimizer, base_lr, total_steps, steps_per_epoch):
    kind = s["name"]
    if kind == "one_cycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=base_lr, total_steps=total_steps, pct_start=s["pct_start"],
            div_factor=s["div_factor"], final_div_factor=s["final_div_factor"], anneal_strategy="cos",
            cycle_momentum=s["cycle_momentum"], base_momentum=s["base_momentum"], max_momentum=s["max_momentum"])
    warmup = min(round(s["warmup_epochs"] * steps_per_epoch), total_steps)
    min_factor = s["min_lr"] / base_lr
    step_size = max(1, round(s["step_epochs"] * steps_per_epoch))

    def factor(step):
        if kind == "constant":
            return 1.0
        if kind == "step":
            return s["gamma"] ** (step // step_size)
        if step < warmup:
            return s["warmup_start_factor"] + (1 - s["warmup_start_factor"]) * step / warmup
        t = (step - warmup) / max(1, total_steps - warmup)
        return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ---- step clock --------------------------------------------------------------------------------

PHASES = ("data", "forward", "backward", "optimizer")


class StepClock:
    """hotpath's StepClock for the peer: a mark at each phase boundary, the time between a mark and the one
    before it belongs to the later mark's phase. The marks run on from step to step (a step's data phase
    begins at the previous step's optimizer mark), so the phases add up to the time from the first mark to
    the last. On CUDA, events on the current stream, read once at the end: timing with synchronize() after
    every phase would slow the loop it times and count the launch latency each wait exposes."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.marks = []  # (phase, event or perf_counter seconds); the first one's phase is unused

    def mark(self, phase):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((phase, event))
        else:
            self.marks.append((phase, time.perf_counter()))

    def seconds(self):
        parts = dict.fromkeys(PHASES, 0.0)
        if self.cuda and self.marks:
            self.marks[-1][1].synchronize()  # one stream: the last event completes last
        for (_, before), (phase, after) in zip(self.marks, self.marks[1:]):
            parts[phase] += before.elapsed_time(after) / 1000 if self.cuda else after - before
        return parts


# ---- training ----------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, help="resolved recipe YAML (hotpath's to_yaml)")
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    parser.add_argument("--schedule-steps", type=int, default=0,
                        help="steps the schedule spans (hotpath: epochs × steps per epoch); 0 = warmup + steps")
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="for warmup_epochs/step_epochs; 0 = schedule")
    args = parser.parse_args()
    with open(args.recipe) as f:
        r = yaml.load(f, Loader=RecipeLoader)
    m, d, tr, o, s = r["model"], r["data"], r["train"], r["optimizer"], r["schedule"]
    if args.steps < 1 or args.warmup < 0:
        sys.exit("torch_train_peer: --steps must be >= 1 and --warmup >= 0")

    cores = os.cpu_count() or 1
    torch.set_num_threads(tr["threads"] if tr["threads"] > 0 else cores)
    random.seed(tr["seed"])
    torch.manual_seed(tr["seed"])
    use_cuda = tr["device"] == "cuda" or (tr["device"] == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    precision = tr["precision"]
    if precision == "fp16" and not use_cuda:
        sys.exit("torch_train_peer: fp16 needs CUDA; use bf16 on CPU")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    memory_format = torch.channels_last if m["channels_last"] else torch.contiguous_format

    model = build_model(m, d["channels"])
    for prefix in m.get("freeze") or []:
        for n, p in model.named_parameters():
            if n.startswith(prefix):
                p.requires_grad_(False)
    model = model.to(device, memory_format=memory_format)
    model.train()
    ema = None
    if tr["ema_decay"] > 0:
        ema = copy.deepcopy(model).eval()
        for p in ema.parameters():
            p.requires_grad_(False)
    accum = tr["accum_steps"]
    micro = tr["batch_size"] // accum
    optimizer = make_optimizer(o, model)
    total = args.schedule_steps or (args.warmup + args.steps)
    schedule = make_schedule(s, optimizer, o["lr"], total, args.steps_per_epoch or total)
    scaler = torch.amp.GradScaler(device.type, init_scale=tr["scaler_init_scale"],
                                  growth_interval=tr["scaler_growth_interval"], enabled=precision == "fp16")
    loader = make_loader(d, micro, tr["seed"])
    it = iter(loader)

    def sync():
        if use_cuda:
            torch.cuda.synchronize()

    clock = StepClock(use_cuda)
    samples = 0
    start = time.perf_counter()
    for step in range(args.warmup + args.steps):
        timed = step >= args.warmup
        if step == args.warmup:
            sync()
            start = time.perf_counter()
            samples = 0
            clock.mark(None)  # the first timed step begins here, as samples/s's time does
        loss_sum = 0.0
        for _ in range(accum):
            images, labels = next(it)
            images = images.to(device, non_blocking=True, memory_format=memory_format)
            labels = labels.to(device, non_blocking=True)
            if timed:
                clock.mark("data")
            with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.bfloat16,
                                enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(images), labels, label_smoothing=tr["label_smoothing"])
            if timed:
                clock.mark("forward")
            scaler.scale(loss / accum if accum > 1 else loss).backward()
            if timed:
                clock.mark("backward")
            loss_sum += loss.detach().float()
            samples += labels.shape[0]
        if tr["clip_grad_norm"] > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), tr["clip_grad_norm"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        if ema is not None:
            with torch.no_grad():
                e, p = ema.state_dict(), model.state_dict()
                floats = [k for k, v in e.items() if v.is_floating_point()]
                torch._foreach_lerp_([e[k] for k in floats], [p[k] for k in floats], 1.0 - tr["ema_decay"])
                for k, v in e.items():
                    if not v.is_floating_point():
                        v.copy_(p[k])
        if timed:
            clock.mark("optimizer")
        step_loss = float(loss_sum) / accum  # hotpath reads the loss every step (NaN check) too
        if not math.isfinite(step_loss) and precision != "fp16":
            sys.exit(f"torch_train_peer: the loss became {step_loss} at step {step + 1}")
    sync()
    seconds = time.perf_counter() - start

    parts = clock.seconds()
    total = max(sum(parts.values()), 1e-12)
    print(json.dumps({
        "samples_per_s": samples / seconds,
        "data_wait_fraction": parts["data"] / total,
        "steps": args.steps,
        "warmup": args.warmup,
        "samples": samples,
        "seconds": seconds,
        "last_loss": step_loss,
        "breakdown": {"steps": args.steps, "step_ms": 1000 * total / args.steps,
                      "wall_step_ms": 1000 * seconds / args.steps,
                      "clock": "cuda events (GPU timeline)" if use_cuda else "wall clock",
                      "seconds": parts, "fractions": {k: v / total for k, v in parts.items()}},
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": device.type,
    }), flush=True)
    del it, loader  # shut the persistent workers down before the interpreter exits


if __name__ == "__main__":
    main()
