#!/usr/bin/env python3
"""Reference numbers from torch for hotpath's training-engine parity tests (tests/train/).

  train_ref.py schedule '<json config>'   -> {"lr": [...], "momentum": [...]}   lr/momentum per step
  train_ref.py optim FIXTURE.json         -> {"params": {name: [floats]}}       after N optimizer steps
  train_ref.py scaler FIXTURE.json        -> {"scale": [...], "stepped": [...], "growth_tracker": [...],
                                              "params": [...], "state": {...}}
  train_ref.py clip FIXTURE.json          -> {"total_norm": x, "grads": {name: [floats]}}

Fixtures are JSON written by the C++ test; tensors travel as {"shape": [...], "data": [...]} in float64
text, which holds float32 values exactly.
"""
import json
import math
import sys

import torch


def tensor(t):
    return torch.tensor(t["data"], dtype=torch.float32).reshape(t["shape"])


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def no_decay(name, p):
    # timm's rule, written independently of the C++ one.
    return p.ndim <= 1 or name.endswith(".bias")


def make_optimizer(cfg, named):
    wd = cfg["weight_decay"]
    if cfg.get("no_decay_norm_bias", True) and wd > 0:
        decay = [p for n, p in named if not no_decay(n, p)]
        exempt = [p for n, p in named if no_decay(n, p)]
        groups = [g for g in ({"params": decay, "weight_decay": wd},
                              {"params": exempt, "weight_decay": 0.0}) if g["params"]]
    else:
        groups = [{"params": [p for _, p in named], "weight_decay": wd}]
    if cfg["kind"] == "sgd":
        return torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"],
                               dampening=cfg.get("dampening", 0.0), nesterov=cfg["nesterov"])
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])


def cmd_schedule(cfg):
    steps = cfg["steps"]
    p = torch.nn.Parameter(torch.zeros(1))
    kind = cfg["kind"]
    base = cfg["base_lr"]
    if kind == "one_cycle":
        opt = torch.optim.SGD([p], lr=base, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=base, total_steps=cfg["total_steps"], pct_start=cfg["pct_start"],
            div_factor=cfg["div_factor"], final_div_factor=cfg["final_div_factor"],
            anneal_strategy="cos", cycle_momentum=True, base_momentum=cfg["base_momentum"],
            max_momentum=cfg["max_momentum"])
    else:
        opt = torch.optim.SGD([p], lr=base)
        if kind == "step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg["step_size"], gamma=cfg["gamma"])
        elif kind == "warmup_cosine":
            w, total = cfg["warmup_steps"], cfg["total_steps"]
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - w, eta_min=cfg["min_lr"])
            if w == 0:
                sched = cosine
            else:
                # torchvision's reference recipe (references/classification/train.py).
                warmup = torch.optim.lr_scheduler.LinearLR(
                    opt, start_factor=cfg["warmup_start_factor"], total_iters=w)
                sched = torch.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[w])
        else:
            raise SystemExit(f"unknown schedule kind {kind}")
    lrs, moms = [], []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0].get("momentum", 0.0))
        opt.step()
        sched.step()
    return {"lr": lrs, "momentum": moms}


def cmd_optim(fx):
    named = [(n, torch.nn.Parameter(tensor(t))) for n, t in fx["params"]]
    opt = make_optimizer(fx["config"], named)
    for step_grads in fx["grads"]:
        for (n, p), (gn, g) in zip(named, step_grads):
            assert n == gn
            p.grad = tensor(g)
        opt.step()
    return {"params": {n: flat(p) for n, p in named}}


def cmd_scaler(fx):
    p = torch.nn.Parameter(tensor(fx["param"]))
    opt = torch.optim.SGD([p], lr=fx["lr"])
    o = fx["options"]
    scaler = torch.amp.GradScaler("cpu", init_scale=o["init_scale"], growth_factor=o["growth_factor"],
                                  backoff_factor=o["backoff_factor"], growth_interval=o["growth_interval"])
    scales, stepped, trackers, norms = [], [], [], []
    for i, g in enumerate(fx["grads"]):
        scales.append(scaler.get_scale())
        # The test's "loss" is sum(p * g): its gradient is g, scaled like a real backward would be.
        loss = (p * tensor(g)).sum()
        scaler.scale(loss).backward()
        if i in fx["inject"]:  # an overflow in backward: [index, "inf" | "nan"]
            index, value = fx["inject"][i]
            p.grad[index] = float(value)
        if i % 2 == 1:  # explicit unscale + clip on odd steps, implicit unscale in step() on even ones
            scaler.unscale_(opt)
            norms.append(str(float(torch.nn.utils.clip_grad_norm_([p], fx["max_norm"]))))
        before = p.detach().clone()
        scaler.step(opt)
        stepped.append(not torch.equal(before, p.detach()))
        scaler.update()
        trackers.append(scaler._get_growth_tracker())
        opt.zero_grad()
    return {"scale": scales, "stepped": stepped, "growth_tracker": trackers, "clip_norm": norms,
            "final_scale": scaler.get_scale(), "params": flat(p), "state": scaler.state_dict()}


def cmd_clip(fx):
    named = [(n, torch.nn.Parameter(torch.zeros(t["shape"]))) for n, t in fx["grads"]]
    for (_, p), (_, g) in zip(named, fx["grads"]):
        p.grad = tensor(g)
    norm_type = fx["norm_type"]
    total = torch.nn.utils.clip_grad_norm_([p for _, p in named], fx["max_norm"],
                                           norm_type=math.inf if norm_type == "inf" else norm_type)
    return {"total_norm": float(total), "grads": {n: flat(p.grad) for n, p in named}}


def main():
    cmd, arg = sys.argv[1], sys.argv[2]
    if cmd == "schedule":
        out = cmd_schedule(json.loads(arg))
    else:
        with open(arg) as f:
            fx = json.load(f)
        if cmd == "scaler":
            fx["inject"] = {int(k): v for k, v in fx["inject"].items()}
        out = {"optim": cmd_optim, "scaler": cmd_scaler, "clip": cmd_clip}[cmd](fx)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
