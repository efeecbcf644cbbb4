#!/usr/bin/env python3
"""The PyTorch peer of `hotpath data bench --compare torch`: the standard training input pipeline.

webdataset reads the shards, PIL decodes, torchvision transforms (RandomResizedCrop, flip,
ToTensor, Normalize), torch.utils.data.DataLoader with W worker processes batches with the
default collate: what a practitioner writes for ImageNet-style training from WebDataset shards.
The shard stream is resampled (shards drawn with replacement, the webdataset idiom for training),
so it never runs dry and any worker count works with any shard count. Measures images/s over
--batches batches after --warmup-batches, from the first timed batch fetch to the last.

    python bench/peers/torch_data_peer.py --shards 'out/train-*.tar' --workers 2 --batches 16 --json-out -
"""
import argparse
import glob
import json
import math
import random
import sys
import time

import braceexpand
import torch
import torchvision.transforms as T
import webdataset as wds

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def expand_shards(patterns):
    """Brace patterns and globs to a list of files, in order (like `hotpath`'s resolve_shards)."""
    urls = []
    for pattern in patterns:
        for item in braceexpand.braceexpand(pattern):
            matches = sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
            if not matches:
                sys.exit(f"torch_data_peer: no shard matches {item!r}")
            urls.extend(matches)
    return urls


def single_threaded_worker(_worker_id):
    torch.set_num_threads(1)  # DataLoader workers do this already; be explicit about it


def make_loader(urls, args):
    if args.channels == 3:
        decoder, mean, std = "pil", IMAGENET_MEAN, IMAGENET_STD  # "pil" gives RGB (gray → RGB)
    else:
        decoder, mean, std = "pill", [sum(IMAGENET_MEAN) / 3], [sum(IMAGENET_STD) / 3]  # "pill" gives L
    transform = T.Compose([
        T.RandomResizedCrop(args.size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])
    dataset = (
        wds.WebDataset(urls, resampled=True, shardshuffle=False, handler=wds.warn_and_continue, seed=args.seed)
        .shuffle(args.shuffle_buffer)
        .decode(decoder, handler=wds.warn_and_continue)
        .to_tuple("jpg;png", "cls", handler=wds.warn_and_continue)
        .map_tuple(transform, int, handler=wds.warn_and_continue)
    )
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=args.pin_memory,
        worker_init_fn=single_threaded_worker,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", nargs="+", required=True, help="shard files, brace patterns or globs")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--channels", type=int, choices=(1, 3), default=3)
    parser.add_argument("--batches", type=int, default=16, help="timed batches")
    parser.add_argument("--images", type=int, help="timed images (overrides --batches: ceil(images / batch))")
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--shuffle-buffer", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pin-memory", action="store_true", help="pin batches (only meaningful with CUDA)")
    parser.add_argument("--json-out", default="-", help="file for the JSON result, '-' for stdout")
    args = parser.parse_args()
    batches = math.ceil(args.images / args.batch_size) if args.images else args.batches
    if batches < 1 or args.warmup_batches < 0 or args.workers < 0:
        sys.exit("torch_data_peer: --batches/--images must be positive, --warmup-batches and --workers >= 0")

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    loader = make_loader(expand_shards(args.shards), args)
    it = iter(loader)
    for _ in range(args.warmup_batches):
        next(it)
    images = 0
    start = time.perf_counter()
    for _ in range(batches):
        x, _labels = next(it)
        images += x.shape[0]
    seconds = time.perf_counter() - start

    result = {
        "images_per_s": images / seconds,
        "images": images,
        "seconds": seconds,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "batches": batches,
        "warmup_batches": args.warmup_batches,
        "size": args.size,
        "channels": args.channels,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    text = json.dumps(result)
    if args.json_out == "-":
        print(text, flush=True)
    else:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    del it, loader  # shut the persistent workers down before the interpreter exits


if __name__ == "__main__":
    main()
