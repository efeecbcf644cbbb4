#!/usr/bin/env python3
"""Side by side in one process: a plain PyTorch training loop fed by hotpath.data.Loader vs DataLoader + webdataset
+ torchvision (issue 26 §8; run by hand, not by ctest; numbers in docs/benchmarks.md).

  bench_train_loop.py DIR [--regimes realistic,loader-bound,loader-only,binding] [--pairs N] [--json OUT]
                          [--peers pil,tv] [--dali] [--cli build/hotpath]

DIR holds the shards; when it has none they are written first (bench_api.py's make-shards: 4 shards × 256
ImageNet-like 500×375 JPEGs, labels 0..99). Nothing is downloaded.

The training loop is the same for every loader: torchvision resnet18 (weights=None, 100 classes) or the
`tiny` CNN below, SGD (lr 0.1, momentum 0.9, weight decay 1e-4), CrossEntropyLoss, torch.manual_seed(seed) before
the model is built (every run starts from the same weights), torch.set_num_threads(--threads: 2 for resnet18,
1 for tiny, whose step needs no more: two OpenMP threads beside 2 decode workers on 2 cores make each of its
small ops wait for a descheduled thread, which under any outside load slows its step 10-20×). Each run builds
its loader and model, takes --warmup steps untimed (worker start-up, shuffle-buffer fill, first allocations),
then times --steps steps from the end of the last warm-up step: images/s = steps × batch / seconds.

Loaders (the same transform: RandomResizedCrop(size, scale 0.08–1, ratio 3/4–4/3) + horizontal flip p=0.5 +
ImageNet mean/std normalize → float32 [B, 3, S, S] batches; --workers decode workers each):
  hotpath  hotpath.data.Loader(shards, batch_size, image_size, workers, prefetch=4, shuffle_buffer=1000, seed)
  pil      bench/peers/torch_data_peer.py's make_loader, the peer of `hotpath data bench --compare torch`:
           wds.WebDataset(resampled=True).shuffle(1000).decode("pil").to_tuple("jpg;png", "cls")
           .map_tuple(T.Compose([RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize]), int),
           DataLoader(batch_size, num_workers=W, persistent_workers=True), 1 torch thread per worker
  tv       the same DataLoader + webdataset stream, but torchvision.io.decode_image (libjpeg-turbo) on the raw
           bytes and transforms.v2 on uint8 tensors (RandomResizedCrop antialias=True, flip, ToDtype(float32,
           scale=True), Normalize): the faster torchvision path
  dali     (--dali; needs nvidia-dali importable) NVIDIA DALI's CPU pipeline: fn.readers.webdataset
           (random_shuffle, initial_fill 1000), fn.decoders.image_random_crop(device="cpu"), fn.resize(antialias),
           fn.crop_mirror_normalize(mirror=coin_flip), num_threads=W, DALIGenericIterator
Pinned memory is off for all (CPU training: nothing is copied to a device).

Regimes (each: rounds of interleaved runs; within a round every loader runs once, the order rotating round to round):
  realistic     resnet18, image_size 224, batch 32, 2 + 6 steps, 3 rounds
  loader-bound  the same loop and data (image_size 224, batch 64, 3 + 40 steps, 5 rounds) with the `tiny`
                model: conv 3→16 k8 s8 + BN + ReLU, conv 16→32 k3 s2 + BN + ReLU, global average pool, linear
                32→100 (3.3 M MACs forward per image, ≈0.02 GFLOP forward + backward, vs resnet18's ≈11 at 224;
                ≈13 ms per step of 64 here): it stands in for an accelerator whose step is shorter than the
                batch's decode
  loader-only   --model none: iterate and touch each batch (one element of the images, the labels' count),
                batch 64, 3 + 40 batches, 5 rounds
  binding       hotpath.data.Loader from Python vs `hotpath data bench` (the C++ loader in the CLI) on the same
                shards and settings (batch 64, 2 workers, prefetch 2, shuffle_buffer 2000, size 224, float32
                NCHW, 3 + 40 batches), one CLI run then one Python run per round

Results: per run images/s, data-wait fraction (time in next() / timed seconds) and epoch time (the shards'
samples / images/s); per regime the median and range over rounds, and for each peer
the ratio hotpath / peer of each round (median and range). --json OUT keeps everything, plus the load average
before and after each run.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
import types

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))

import hotpath  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
NUM_CLASSES = 100

REGIMES = {
    "realistic": dict(model="resnet18", image_size=224, batch_size=32, warmup=2, steps=6, pairs=3, threads=2),
    "loader-bound": dict(model="tiny", image_size=224, batch_size=64, warmup=3, steps=40, pairs=5, threads=1),
    "loader-only": dict(model="none", image_size=224, batch_size=64, warmup=3, steps=40, pairs=5, threads=1),
}


def load():
    return round(os.getloadavg()[0], 2)


# ---- loaders: each yields (images, labels) forever, crossing epochs -----------------------------------------


def hotpath_batches(shards, a):
    loader = hotpath.data.Loader(shards, batch_size=a.batch_size, image_size=a.image_size, workers=a.workers,
                                 prefetch=4, shuffle_buffer=1000, seed=a.seed, channels_last=a.channels_last,
                                 num_classes=NUM_CLASSES)
    try:
        while True:
            yield from loader
    finally:
        del loader


def _dataloader(dataset, a):
    from torch_data_peer import single_threaded_worker
    return torch.utils.data.DataLoader(dataset, batch_size=a.batch_size, num_workers=a.workers,
                                       persistent_workers=True, pin_memory=False,
                                       worker_init_fn=single_threaded_worker)


def _run_dataloader(loader):
    it = iter(loader)
    try:
        while True:
            yield next(it)
    finally:
        it._shutdown_workers()  # the workers must not outlive the run (they would take CPU from the next one)
        del it


def pil_batches(shards, a):
    from torch_data_peer import expand_shards, make_loader
    args = types.SimpleNamespace(channels=3, size=a.image_size, seed=a.seed, shuffle_buffer=1000,
                                 batch_size=a.batch_size, workers=a.workers, pin_memory=False)
    yield from _run_dataloader(make_loader(expand_shards(shards), args))


class _TvTransform:
    """torchvision.io.decode_jpeg on the member's bytes + transforms.v2 on the uint8 tensor (picklable)."""

    def __init__(self, size):
        import torchvision.transforms.v2 as T2
        self.transform = T2.Compose([T2.RandomResizedCrop(size, antialias=True), T2.RandomHorizontalFlip(),
                                     T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])

    def __call__(self, data):
        from torchvision.io import ImageReadMode, decode_image
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return self.transform(decode_image(raw, mode=ImageReadMode.RGB))


def _label(data):
    return int(data)


def tv_batches(shards, a):
    import webdataset as wds
    from torch_data_peer import expand_shards
    dataset = (
        wds.WebDataset(expand_shards(shards), resampled=True, shardshuffle=False, handler=wds.warn_and_continue,
                       seed=a.seed)
        .shuffle(1000)
        .to_tuple("jpg;png", "cls", handler=wds.warn_and_continue)  # raw bytes: no webdataset decoder
        .map_tuple(_TvTransform(a.image_size), _label, handler=wds.warn_and_continue)
    )
    yield from _run_dataloader(_dataloader(dataset, a))


def dali_batches(shards, a):
    from nvidia.dali import fn, pipeline_def, types as dtypes
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    from torch_data_peer import expand_shards

    @pipeline_def(batch_size=a.batch_size, num_threads=a.workers, device_id=None, seed=a.seed + 1,
                  prefetch_queue_depth=2)
    def pipeline():
        jpegs, labels = fn.readers.webdataset(paths=expand_shards(shards), ext=["jpg", "cls"], random_shuffle=True,
                                              initial_fill=1000, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=dtypes.RGB, random_area=[0.08, 1.0],
                                               random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        images = fn.resize(images, resize_x=a.image_size, resize_y=a.image_size, antialias=True)
        images = fn.crop_mirror_normalize(images, dtype=dtypes.FLOAT, output_layout="HWC" if a.channels_last else "CHW",
                                          mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, fn.pad(labels, axes=(0,), shape=(4,), fill_value=0)  # the .cls text, zero-padded

    pipe = pipeline()
    pipe.build()
    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
    powers = torch.tensor([1000, 100, 10, 1])
    try:
        while True:
            for out in it:
                images, text = out[0]["images"], out[0]["labels"].long()
                if a.channels_last:
                    images = images.permute(0, 3, 1, 2)
                digits = (text - 48).clamp(min=0)
                count = (text > 0).sum(1, keepdim=True)
                labels = (digits * torch.div(powers, 10 ** (4 - count), rounding_mode="floor")).sum(1)
                yield images, labels
    finally:
        del it, pipe


LOADERS = {"hotpath": hotpath_batches, "pil": pil_batches, "tv": tv_batches, "dali": dali_batches}


# ---- models and the loop -------------------------------------------------------------------------------------


def tiny_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 8, stride=8, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, NUM_CLASSES))


def build_model(name, channels_last):
    import torchvision
    if name == "none":
        return None
    model = torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES) if name == "resnet18" else tiny_model()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def run_once(name, shards, a):
    """One run: build loader + model, `warmup` steps untimed, `steps` timed. Returns a dict of figures."""
    torch.manual_seed(a.seed)
    model = build_model(a.model, a.channels_last)
    if model is not None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        criterion = nn.CrossEntropyLoss()
        model.train()
    load_before = load()
    start = time.perf_counter()
    batches = LOADERS[name](shards, a)
    wait = 0.0
    images = 0
    first_batch_s = None
    losses = []
    t0 = None
    try:
        for step in range(a.warmup + a.steps):
            if step == a.warmup:
                t0, wait, images = time.perf_counter(), 0.0, 0
            w = time.perf_counter()
            x, y = next(batches)
            if a.channels_last and model is not None:
                x = x.contiguous(memory_format=torch.channels_last)  # free for hotpath's channels-last batches
            wait += time.perf_counter() - w
            if first_batch_s is None:
                first_batch_s = time.perf_counter() - start
            if model is None:
                float(x[-1, -1, -1, -1]), y.numel()  # touch the batch
            else:
                loss = criterion(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            images += x.shape[0]
        seconds = time.perf_counter() - t0
    finally:
        batches.close()  # stops the loader (threads, worker processes) before the next run
    return {"loader": name, "images_per_s": images / seconds, "seconds": seconds, "images": images,
            "data_wait_fraction": wait / seconds, "first_batch_s": first_batch_s,
            "total_s": time.perf_counter() - start, "last_loss": losses[-1] if losses else None,
            "load_before": load_before, "load_after": load()}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def epoch_images(shards):
    """Samples (.cls members) in the shards: one epoch."""
    import tarfile
    count = 0
    for shard in shards:
        with tarfile.open(shard) as tar:
            count += sum(1 for m in tar if m.name.endswith(".cls"))
    return count


def run_regime(regime, shards, a, peers):
    settings = dict(REGIMES[regime])
    for key in ("model", "image_size", "batch_size", "warmup", "steps", "pairs", "threads"):
        if getattr(a, key) is not None:
            settings[key] = getattr(a, key)
    r = argparse.Namespace(**{**vars(a), **settings})
    torch.set_num_threads(r.threads)
    names = ["hotpath"] + peers
    runs = {n: [] for n in names}
    print(f"\n== {regime}: model {r.model}, image_size {r.image_size}, batch {r.batch_size}, {r.warmup} + {r.steps} "
          f"steps, {r.workers} workers, {r.threads} torch threads, channels_last {r.channels_last}, {r.pairs} rounds",
          flush=True)
    for round_ in range(r.pairs):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for n in order:
            res = run_once(n, shards, r)
            runs[n].append(res)
            print(f"  round {round_ + 1} {n:8s} {res['images_per_s']:8.1f} images/s  data wait "
                  f"{100 * res['data_wait_fraction']:5.1f} %  first batch {res['first_batch_s']:.2f} s  "
                  f"load {res['load_before']:.2f} -> {res['load_after']:.2f}", flush=True)
    summary = {n: spread([x["images_per_s"] for x in runs[n]]) for n in names}
    ratios = {p: spread([h["images_per_s"] / x["images_per_s"] for h, x in zip(runs["hotpath"], runs[p])])
              for p in peers}
    epoch = a.epoch_images
    return {"regime": regime, "epoch_images": epoch,
            "epoch_seconds": {n: spread([epoch / x["images_per_s"] for x in runs[n]]) for n in names},
            "settings": {k: settings[k] for k in ("model", "image_size", "batch_size", "warmup",
                                                                    "steps")},
            "workers": r.workers, "threads": r.threads, "channels_last": r.channels_last,
            "images_per_s": summary, "ratio_hotpath_over": ratios, "runs": runs}


# ---- binding overhead: hotpath.data.Loader from Python vs `hotpath data bench` ---------------------------------

BIND = dict(batch_size=64, workers=2, prefetch=2, image_size=224, warmup=3, batches=40)


def python_binding_run(shards, seed):
    loader = hotpath.data.Loader(shards, batch_size=BIND["batch_size"], image_size=BIND["image_size"],
                                 workers=BIND["workers"], prefetch=BIND["prefetch"], shuffle_buffer=2000,
                                 channels_last=False, seed=seed)

    def pull():
        while True:
            yield from loader

    it = pull()
    for _ in range(BIND["warmup"]):
        next(it)
    start, images = time.perf_counter(), 0
    for _ in range(BIND["batches"]):
        images += next(it)[1].numel()
    rate = images / (time.perf_counter() - start)
    it.close()
    del loader
    return rate


def cli_run(shards, cli, seed):
    out = subprocess.run([cli, "data", "bench", *shards, "--batch-size", str(BIND["batch_size"]),
                          "--workers", str(BIND["workers"]), "--prefetch", str(BIND["prefetch"]),
                          "--size", str(BIND["image_size"]), "--batches", str(BIND["batches"]),
                          "--warmup-batches", str(BIND["warmup"]), "--repeats", "1", "--seed", str(seed),
                          "--json", "-"], check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout[out.stdout.index("{"):])["hotpath_images_per_s"])


def run_binding(shards, a):
    print(f"\n== binding: hotpath.data.Loader from Python vs `{a.cli} data bench`, batch {BIND['batch_size']}, "
          f"{BIND['workers']} workers, prefetch {BIND['prefetch']}, size {BIND['image_size']}, float32 NCHW, "
          f"{BIND['warmup']} + {BIND['batches']} batches, {a.binding_pairs} rounds", flush=True)
    rounds = []
    for i in range(a.binding_pairs):
        before = load()
        c = cli_run(shards, a.cli, a.seed)
        p = python_binding_run(shards, a.seed)
        rounds.append({"cli_images_per_s": c, "python_images_per_s": p, "python_vs_cli": p / c - 1,
                       "load_before": before, "load_after": load()})
        print(f"  round {i + 1}: CLI {c:7.1f} images/s, Python {p:7.1f} images/s ({100 * (p / c - 1):+5.1f} %), "
              f"load {before:.2f} -> {load():.2f}", flush=True)
    return {"regime": "binding", "settings": BIND, "cli": a.cli,
            "cli_images_per_s": spread([r["cli_images_per_s"] for r in rounds]),
            "python_images_per_s": spread([r["python_images_per_s"] for r in rounds]),
            "python_vs_cli": spread([r["python_vs_cli"] for r in rounds]), "runs": rounds}


# ---- report --------------------------------------------------------------------------------------------------


def fmt(s, digits=0):
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def table(results):
    lines = []
    for r in results:
        if r["regime"] == "binding":
            lines += ["", "| binding | CLI `hotpath data bench` images/s | hotpath.data.Loader from Python images/s | "
                          "Python vs CLI, median (range) |", "|---|---|---|---|",
                      f"| batch 64, 2 workers, prefetch 2, 224 | {fmt(r['cli_images_per_s'])} | "
                      f"{fmt(r['python_images_per_s'])} | "
                      f"{100 * r['python_vs_cli']['median']:+.1f} % ({100 * r['python_vs_cli']['min']:+.1f} … "
                      f"{100 * r['python_vs_cli']['max']:+.1f} %) |"]
            continue
        s = r["settings"]
        peers = list(r["ratio_hotpath_over"])
        lines += ["", f"{r['regime']}: model {s['model']}, {s['image_size']}², batch {s['batch_size']}, "
                      f"{s['warmup']} + {s['steps']} steps, {r['workers']} workers, {r['threads']} threads "
                      f"(images/s median (min–max) over {len(r['runs']['hotpath'])} rounds)", "",
                  f"| loader | images/s | epoch ({r['epoch_images']} images) s | data wait | hotpath ÷ this, "
                  "median (range) |", "|---|---|---|---|---|"]
        for n in ["hotpath"] + peers:
            wait = statistics.median(x["data_wait_fraction"] for x in r["runs"][n])
            ratio = "—" if n == "hotpath" else f"**{fmt(r['ratio_hotpath_over'][n], 2)}×**"
            lines.append(f"| {n} | {fmt(r['images_per_s'][n], 1)} | {fmt(r['epoch_seconds'][n], 2)} | "
                         f"{100 * wait:.0f} % | {ratio} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("data", help="shard directory (written when it has no shard-*.tar)")
    p.add_argument("--regimes", default="realistic,loader-bound,loader-only,binding")
    p.add_argument("--pairs", type=int, help="rounds per training regime (default: the regime's, 3 or 5)")
    p.add_argument("--binding-pairs", type=int, default=5)
    p.add_argument("--peers", default="pil,tv", help="comma list of pil, tv, dali")
    p.add_argument("--dali", action="store_true", help="add DALI's CPU pipeline as a peer")
    p.add_argument("--cli", default=os.path.join(REPO, "build", "hotpath"), help="the hotpath program (binding)")
    p.add_argument("--model", choices=("resnet18", "tiny", "none"), help="override the regime's model")
    p.add_argument("--image-size", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--warmup", type=int)
    p.add_argument("--workers", type=int, default=2, help="decode threads / DataLoader workers / DALI threads")
    p.add_argument("--threads", type=int, help="torch.set_num_threads in the training process (default: the "
                   "regime's: 2 for resnet18, 1 for tiny and none)")
    p.add_argument("--channels-last", action="store_true", help="channels-last model and batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the summary and every run here")
    a = p.parse_args()

    if not glob.glob(os.path.join(a.data, "shard-*.tar")):
        import bench_api
        print(f"writing shards to {a.data}", flush=True)
        bench_api.make_shards(a.data)
    shards = sorted(glob.glob(os.path.join(a.data, "shard-*.tar")))
    peers = [x for x in a.peers.split(",") if x] + (["dali"] if a.dali and "dali" not in a.peers else [])
    a.epoch_images = epoch_images(shards)
    info = {"command": " ".join(sys.argv), "shards": shards, "torch": torch.__version__,
            "hotpath": getattr(hotpath, "__version__", None), "cpus": os.cpu_count(), "load_start": load(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(f"{len(shards)} shards, torch {torch.__version__}, {os.cpu_count()} CPUs, load {info['load_start']}",
          flush=True)
    results = []
    for regime in [x for x in a.regimes.split(",") if x]:
        results.append(run_binding(shards, a) if regime == "binding" else run_regime(regime, shards, a, peers))
    info["load_end"] = load()
    info["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    print(table(results))
    print(f"\nload average {info['load_start']} at start, {info['load_end']} at end")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
