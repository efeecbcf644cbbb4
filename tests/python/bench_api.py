#!/usr/bin/env python3
"""Measures the Python API against what it binds (run by hand, not by ctest; numbers in docs/python.md).

  bench_api.py make-shards DIR           4 shards × 256 JPEGs of 500×375 (gradients + noise), labels 0..99
  bench_api.py loader 'DIR/shard-{000000..000003}.tar' [HOTPATH_CLI]
      images/s of hotpath.data.Loader in a Python loop vs `hotpath data bench` on the same shards and settings
      (RandomResizedCrop 224 + flip + normalize, float32 NCHW, batch 64, 2 workers, prefetch 2; best of 3 each)
  bench_api.py tokenizer
      lines/s of hotpath.text.Tokenizer vs transformers' fast tokenizer (MiniLM) on the parity corpus,
      padding=True, truncation=True, max_length=128, return_tensors='pt'; best of 3
"""

import io
import os
import random
import re
import subprocess
import sys
import tarfile
import time

import hotpath

BATCHES, WARMUP, REPEATS = 12, 2, 3


def make_shards(directory):
    from PIL import Image

    os.makedirs(directory, exist_ok=True)
    rng = random.Random(0)
    index = 0
    for s in range(4):
        with tarfile.open(os.path.join(directory, f"shard-{s:06d}.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(256):
                channels = [Image.blend(Image.linear_gradient("L").rotate(rng.randrange(360)).resize((500, 375)),
                                        Image.effect_noise((500, 375), 30), 0.25) for _ in range(3)]
                out = io.BytesIO()
                Image.merge("RGB", channels).save(out, format="JPEG", quality=90)
                for name, data in ((f"s{index:06d}.jpg", out.getvalue()), (f"s{index:06d}.cls", str(index % 100).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                index += 1


def python_loader(shards):
    best = 0.0
    for _ in range(REPEATS):
        loader = hotpath.data.Loader(shards, batch_size=64, image_size=224, workers=2, prefetch=2,
                                     shuffle_buffer=2000, channels_last=False, seed=0)
        it = iter(loader)
        for _ in range(WARMUP):
            next(it)
        start, images = time.perf_counter(), 0
        for _ in range(BATCHES):
            images += next(it)[1].numel()
        best = max(best, images / (time.perf_counter() - start))
    return best


def cli_loader(shards, cli):
    out = subprocess.run([cli, "data", "bench", shards, "--batch-size", "64", "--workers", "2", "--prefetch", "2",
                          "--batches", str(BATCHES), "--warmup-batches", str(WARMUP), "--repeats", str(REPEATS)],
                         check=True, capture_output=True, text=True)
    return float(re.search(r"\| hotpath ([0-9.]+) \|", out.stdout + out.stderr).group(1))


def tokenizer():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fixtures
    from transformers import AutoTokenizer

    lines = fixtures.parity_lines()
    kwargs = dict(padding=True, truncation=True, max_length=128, return_tensors="pt")
    hf = AutoTokenizer.from_pretrained(fixtures.minilm_dir())
    for threads in (1, 2):
        ours = hotpath.text.Tokenizer.from_pretrained(fixtures.minilm_dir(), num_threads=threads)
        rates = {}
        for name, tok in (("hotpath", ours), ("transformers", hf)):
            best = min(_timed(tok, lines, kwargs) for _ in range(REPEATS))
            rates[name] = len(lines) / best
        print(f"tokenizer, {len(lines)} lines, hotpath num_threads={threads}: hotpath {rates['hotpath']:.0f} lines/s, "
              f"transformers {rates['transformers']:.0f} lines/s, {rates['hotpath'] / rates['transformers']:.1f}x")


def _timed(tok, lines, kwargs):
    start = time.perf_counter()
    tok(lines, **kwargs)
    return time.perf_counter() - start


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "make-shards":
        make_shards(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "loader":
        cli = sys.argv[3] if len(sys.argv) > 3 else "build/hotpath"
        for _ in range(2):  # interleaved: the machine's load changes
            c, p = cli_loader(sys.argv[2], cli), python_loader(sys.argv[2])
            print(f"loader: hotpath data bench {c:.0f} images/s, hotpath.data.Loader from python {p:.0f} images/s "
                  f"({100 * (p / c - 1):+.1f} %), load {os.getloadavg()[0]:.1f}")
    elif len(sys.argv) == 2 and sys.argv[1] == "tokenizer":
        tokenizer()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
