"""Structured channel pruning parity reference: the PyPI library torch-pruning (import torch_pruning as tp, 1.6.1)
decides the pruning groups, the L1/L2 group-magnitude channel selection and the pruned models that hotpath's
structured pruning is compared with.

  prune_ref.py groups --arch resnet18|resnet50|efficientnet_b0 --num-classes N --image-size S --seed K
                      --ratio R --out DIR
      torch.manual_seed(K); torchvision.models.<arch>(weights=None, num_classes=N); every BatchNorm2d gets
      running_mean, beta ~ 0.1*randn and keeps gamma = 1, running_var = 1 (folding a BN into its conv scales
      every channel by the same 1/sqrt(1+eps), so channel rankings by weight magnitude survive folding); eval.
      Then images = randn(2, 3, S, S). Writes
        DIR/model.safetensors   the state dict (torchvision key names, fp32; num_batches_tracked int64)
        DIR/input.safetensors   "images"
        DIR/output.safetensors  "logits" (dense), "l1", "l2" (the library's pruned models, BasePruner local
                                pruning with GroupMagnitudeImportance(p=1|2), pruning_ratio R)
        DIR/torch_pruning.json  {"torch_pruning_version", "arch", "num_classes", "image_size", "seed", "ratio",
                                 "groups": [{"key", "channels", "out", "in", "depthwise"}],
                                 "kept": {"l1"|"l2": {key: sorted kept channel indices}},
                                 "pruned_shapes": {"l1"|"l2": {conv/linear name: [out_channels, in_channels]}},
                                 "macs": {"dense", "l1", "l2"}, "params": {"dense", "l1", "l2"}}
      A group's "out" are the Conv2d/Linear whose output channels it removes, "in" those whose input channels
      it removes, "depthwise" the depthwise convs it touches (their in = out channels go together); its key is
      the first of sorted(out + depthwise). The script asserts that the library's pruner removed exactly the
      channels that "kept" implies (weights compared index by index).

Group facts (torch-pruning 1.6.1, read from its source and checked here):
  * A depthwise conv (groups == in_channels == out_channels > 1) is one node whose handler is
    function.prune_depthwise_conv_out_channels; DepthwiseConvPruner sets prune_in_channels = prune_out_channels,
    so that single handler is both an in- and an out-channel pruning fn (DG.is_in_/is_out_channel_pruning_fn
    are both true) and the conv appears once per group (add_and_merge). It is recorded under "depthwise" only.
  * GroupMagnitudeImportance compares the handler with function.prune_conv_out_channels /
    prune_conv_in_channels (bound to ConvPruner, not DepthwiseConvPruner), so a depthwise conv's weights do NOT
    enter the importance; its BatchNorm does (|gamma|^p, = 1 here, as does every BN of the group: with
    group_reduction="mean" and normalizer="mean" that adds a constant per channel and divides uniformly, so the
    ranking is that of the sum over the group's conv/linear terms: out rows sum|w|^p over (in, kh, kw), in
    columns sum|w|^p over (out, kh, kw)).
  * Local selection (BasePruner._prune, no round_to): n_pruned = C - int(C * (1 - R)),
    pruned = topk(imp, n_pruned, largest=False); kept = the rest, sorted.
  * Groups with a depthwise conv are rooted at it (get_all_groups walks module2node in trace order). In
    EfficientNet the SE multiply (MulBackward0, an element-wise node) ties fc2's output channels to the expanded
    channels: one group = expand conv out (the stem conv in features.1.0), depthwise, SE fc2 out, fc1 in,
    project conv in. fc1's output channels form their own group (fc1 out, fc2 in). Conv biases are not scored.

Eval mode (StochasticDepth is the identity), fp32, one thread.
"""
import argparse
import copy
import json
import os
import time

import torch
import torch.nn as nn
import torchvision
from safetensors.torch import save_file

import torch_pruning as tp

torch.set_num_threads(1)

ARCHS = ("resnet18", "resnet50", "efficientnet_b0")


def _version():
    # tp.__version__ still says "1.6.0" in the 1.6.1 wheel; the installed distribution's metadata is right.
    try:
        from importlib.metadata import version
        return version("torch-pruning")
    except Exception:
        return tp.__version__


def build(arch, num_classes, seed):
    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
                m.bias.copy_(torch.randn(m.num_features) * 0.1)
                m.weight.fill_(1.0)
                m.running_var.fill_(1.0)
    return model.eval()


def classifier_of(model, arch):
    return model.fc if arch.startswith("resnet") else model.classifier[1]


def is_depthwise(m):
    return isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels == m.out_channels


def channels(m):
    """[out, in] of a Conv2d or Linear."""
    if isinstance(m, nn.Linear):
        return [m.out_features, m.in_features]
    return [m.out_channels, m.in_channels]


def describe(DG, group, names):
    out, inp, dw = set(), set(), set()
    for dep, _ in group:
        m = dep.target.module
        if not isinstance(m, (nn.Conv2d, nn.Linear)):
            continue  # BatchNorm, element-wise add/mul, pooling, flatten, ...: no channel-indexed conv weight
        name = names[m]
        if is_depthwise(m):
            dw.add(name)  # handler prune_depthwise_conv_out_channels (== ..._in_channels), see the docstring
        elif DG.is_out_channel_pruning_fn(dep.handler):
            out.add(name)
        elif DG.is_in_channel_pruning_fn(dep.handler):
            inp.add(name)
    root = group[0].dep.target.module
    entry = {"channels": DG.get_out_channels(root), "out": sorted(out), "in": sorted(inp), "depthwise": sorted(dw)}
    entry["key"] = sorted(out | dw)[0]
    return entry


def select(imp, ratio):
    """BasePruner._prune's local selection (one scope per group, no round_to, iterative_steps=1)."""
    C = len(imp)
    target = (1 / float(1)) * ratio  # linear_scheduler(ratio, 1)[1]
    n_pruned = C - int(C * (1 - target))
    if n_pruned <= 0:
        return list(range(C))
    pruned = set(torch.topk(imp, k=n_pruned, largest=False).indices.tolist())
    return [c for c in range(C) if c not in pruned]


def check_pruned(dense, pruned, groups, kept, tag):
    """The library's pruned model holds exactly the channels the "kept" lists say, weight for weight."""
    keep_out, keep_in = {}, {}
    for g in groups:
        k = kept[g["key"]]
        for n in g["out"] + g["depthwise"]:
            assert n not in keep_out, (tag, n)
            keep_out[n] = k
        for n in g["in"]:
            assert n not in keep_in, (tag, n)
            keep_in[n] = k
    pm = dict(pruned.named_modules())
    for name, m in dense.named_modules():
        if not isinstance(m, (nn.Conv2d, nn.Linear)):
            continue
        p = pm[name]
        w = m.weight.detach()
        if is_depthwise(m):
            ko = keep_out.get(name, list(range(w.shape[0])))
            want = w[ko]
            assert p.groups == p.in_channels == p.out_channels == len(ko), (tag, name)
        else:
            ko = keep_out.get(name, list(range(w.shape[0])))
            ki = keep_in.get(name, list(range(w.shape[1])))
            want = w[ko][:, ki]
            assert channels(p) == [len(ko), len(ki)], (tag, name, channels(p), len(ko), len(ki))
        assert p.weight.shape == want.shape and torch.equal(p.weight.detach(), want), (tag, name)
        if m.bias is not None:
            assert torch.equal(p.bias.detach(), m.bias.detach()[ko]), (tag, name)


def groups_cmd(a):
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    model = build(a.arch, a.num_classes, a.seed)
    images = torch.randn(2, 3, a.image_size, a.image_size)
    names = {m: n for n, m in model.named_modules()}

    state = {k: v.detach().contiguous() if k.endswith("num_batches_tracked") else v.detach().float().contiguous()
             for k, v in model.state_dict().items()}
    save_file(state, os.path.join(a.out, "model.safetensors"))
    save_file({"images": images.contiguous()}, os.path.join(a.out, "input.safetensors"))
    with torch.no_grad():
        outputs = {"logits": model(images).contiguous()}

    dense_copy = copy.deepcopy(model)  # untouched copy for the library's pruners

    DG = tp.DependencyGraph().build_dependency(model, example_inputs=images)
    classifier = classifier_of(model, a.arch)
    raw_groups = list(DG.get_all_groups(ignored_layers=[classifier], root_module_types=[nn.Conv2d, nn.Linear]))
    groups = [describe(DG, g, names) for g in raw_groups]
    keys = [g["key"] for g in groups]
    assert len(set(keys)) == len(keys), "duplicate group keys"

    kept = {}
    for p in (1, 2):
        imp_fn = tp.importance.GroupMagnitudeImportance(p=p)
        kept[f"l{p}"] = {g["key"]: select(imp_fn(rg), a.ratio) for g, rg in zip(groups, raw_groups)}

    result = {
        "torch_pruning_version": _version(), "arch": a.arch, "num_classes": a.num_classes,
        "image_size": a.image_size, "seed": a.seed, "ratio": a.ratio,
        "groups": groups, "kept": kept, "pruned_shapes": {}, "macs": {}, "params": {},
    }
    macs, params = tp.utils.count_ops_and_params(dense_copy, images[:1])
    result["macs"]["dense"], result["params"]["dense"] = int(macs), int(params)

    for p in (1, 2):
        tag = f"l{p}"
        m = copy.deepcopy(dense_copy)
        pruner = tp.pruner.BasePruner(m, images, importance=tp.importance.GroupMagnitudeImportance(p=p),
                                      pruning_ratio=a.ratio, ignored_layers=[classifier_of(m, a.arch)],
                                      global_pruning=False, iterative_steps=1)
        pruner.step()
        m.eval()
        check_pruned(dense_copy, m, groups, kept[tag], tag)
        with torch.no_grad():
            outputs[tag] = m(images).contiguous()
        result["pruned_shapes"][tag] = {n: channels(mod) for n, mod in m.named_modules()
                                        if isinstance(mod, (nn.Conv2d, nn.Linear))}
        macs, params = tp.utils.count_ops_and_params(m, images[:1])
        result["macs"][tag], result["params"][tag] = int(macs), int(params)

    save_file(outputs, os.path.join(a.out, "output.safetensors"))
    with open(os.path.join(a.out, "torch_pruning.json"), "w") as f:
        json.dump(result, f, indent=1)
    n_dw = sum(1 for g in groups if g["depthwise"])
    print(f"{a.arch}: {len(groups)} groups, {n_dw} with a depthwise conv, "
          f"MACs dense {result['macs']['dense']} l1 {result['macs']['l1']} l2 {result['macs']['l2']}, "
          f"{time.time() - t0:.1f}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("groups", help="groups, L1/L2 selections and the library's pruned models")
    g.add_argument("--arch", required=True, choices=ARCHS)
    g.add_argument("--num-classes", type=int, required=True)
    g.add_argument("--image-size", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--ratio", type=float, required=True)
    g.add_argument("--out", required=True)
    a = ap.parse_args()
    groups_cmd(a)


if __name__ == "__main__":
    main()
