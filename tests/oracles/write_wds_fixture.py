#!/usr/bin/env python3
"""Reference side of hotpath's WebDataset parity tests (tests/data/wds_compat_test.cpp).

Modes (each prints one JSON document on stdout):
  write OUTDIR       write shards with python webdataset (ShardWriter in ustar, TarWriter in pax
                     and GNU formats) and print the manifest of what was written, plus
                     "read_back": the samples webdataset itself reads from those shards
  read SHARD...      read shards with webdataset's own tar iterator + grouping and print the
                     manifest of what it yields
  split NAME...      webdataset's base_plus_ext() for each name: {"key":..,"ext":..} or null
  braces PATTERN...  braceexpand's expansion of each pattern (a list of lists)

A manifest is {"samples": [{"shard": PATH, "key": KEY, "members": {EXT: BASE64}}, ...]} with
EXT as webdataset reads it (lowercased) and BASE64 the exact member bytes.
"""
import ast
import base64
import importlib.util
import json
import os
import random
import re
import sys

import braceexpand

# webdataset is imported lazily: its package pulls in torch (seconds), which split/braces skip.


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def fixture_samples():
    """A deterministic variety: binary payloads around block sizes, labels, JSON, multi-dot
    extensions, dotted directories, uppercase extensions, long paths."""
    rng = random.Random(1234)
    sizes = [0, 1, 100, 511, 512, 513, 1024, 3000]
    samples = []
    for i in range(11):
        sample = {
            "__key__": f"sample{i:06d}",
            "jpg": bytes(rng.getrandbits(8) for _ in range(sizes[i % len(sizes)])),
            "cls": str(i % 3).encode(),
            "json": json.dumps({"index": i, "name": f"n{i}"}).encode(),
        }
        if i % 4 == 1:
            sample["seg.png"] = bytes(rng.getrandbits(8) for _ in range(700))
        samples.append(sample)
    samples.append({"__key__": "train.v2/class.a/img_0001", "jpg": b"\xff\xd8\xff\x00binary\x00", "cls": b"7"})
    samples.append({"__key__": "upper/IMG_0002", "JPG": b"upper-case extension", "Cls": b"1"})
    # 130-character path with directories: fits ustar via the prefix field.
    samples.append({"__key__": "d" * 60 + "/" + "e" * 60 + "/s0003", "jpg": b"long path", "cls": b"2"})
    return samples


def long_name_samples():
    """Names only pax or GNU long-name headers can hold (basename over 100 bytes)."""
    rng = random.Random(99)
    return [
        {"__key__": "L" * 150, "jpg": bytes(rng.getrandbits(8) for _ in range(777)), "cls": b"5"},
        {"__key__": "dir.with.dots/" + "m" * 120, "seg.png": b"mask", "txt": "h\u00e9llo".encode()},
        {"__key__": "short", "cls": b"0"},
    ]


def manifest_entry(shard, sample):
    members = {k.lower(): b64(v) for k, v in sample.items() if k != "__key__"}
    return {"shard": shard, "key": sample["__key__"], "members": members}


def write(outdir):
    import webdataset as wds

    os.makedirs(outdir, exist_ok=True)
    entries = []
    pattern = os.path.join(outdir, "wds-%06d.tar")
    samples = fixture_samples()
    with wds.ShardWriter(pattern, maxcount=4, verbose=0, encoder=False) as sink:
        for i, sample in enumerate(samples):
            sink.write(sample)
            entries.append(manifest_entry(pattern % (i // 4), sample))
    for fmt in ("PAX_FORMAT", "GNU_FORMAT"):
        path = os.path.join(outdir, f"wds-{fmt.split('_')[0].lower()}.tar")
        with wds.TarWriter(path, encoder=False, format=fmt) as sink:
            for sample in long_name_samples():
                sink.write(sample)
                entries.append(manifest_entry(path, sample))
    # What webdataset's own reader makes of these shards, in the same run (torch loads once).
    shards = list(dict.fromkeys(e["shard"] for e in entries))
    return {"samples": entries, "read_back": read(shards)["samples"]}


def read(shards):
    from webdataset import tariterators

    entries = []
    src = [{"url": shard} for shard in shards]
    for sample in tariterators.tarfile_samples(src):
        members = {k: b64(v) for k, v in sample.items() if not k.startswith("__")}
        entries.append({"shard": sample["__url__"], "key": sample["__key__"], "members": members})
    return {"samples": entries}


def load_base_plus_ext():
    """webdataset's own base_plus_ext, taken verbatim from its source without importing the
    package (and torch with it)."""
    path = os.path.join(os.path.dirname(importlib.util.find_spec("webdataset").origin), "tariterators.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "base_plus_ext")
    namespace = {"re": re}
    exec(compile(ast.Module(body=[func], type_ignores=[]), path, "exec"), namespace)
    return namespace["base_plus_ext"]


def split(names):
    base_plus_ext = load_base_plus_ext()
    out = []
    for name in names:
        key, ext = base_plus_ext(name)
        out.append(None if key is None else {"key": key, "ext": ext.lower()})
    return out


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    mode, args = argv[1], argv[2:]
    if mode == "write" and len(args) == 1:
        result = write(args[0])
    elif mode == "read":
        result = read(args)
    elif mode == "split":
        result = split(args)
    elif mode == "braces":
        result = [list(braceexpand.braceexpand(p)) for p in args]
    else:
        sys.exit(__doc__)
    json.dump(result, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
