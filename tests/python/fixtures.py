"""Fixtures shared by the Python API tests: tiny WebDataset shards made here, the MiniLM tokenizer directory and
the tokenizer parity corpus of tests/oracles/tokenizer_ref.py (the C++ parity test's), and the paths CMake passes in."""

import io
import os
import random
import sys
import tarfile
import warnings

SOURCE_DIR = os.environ.get("HOTPATH_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "oracles"))

import tokenizer_ref  # noqa: E402  (tests/oracles/: the parity corpus and the MiniLM directory)


def minilm_dir():
    return tokenizer_ref.minilm_dir()


def parity_lines(count=None):
    """The C++ parity test's corpus (fortunes, Reuters, generated non-ASCII lines), in its order."""
    with warnings.catch_warnings():  # tests/oracles/tokenizer_ref.py leaves files to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        lines, _ = tokenizer_ref.corpus()
    return lines if count is None else lines[:count]


def jpeg_bytes(rng, width, height, quality=90):
    from PIL import Image

    if width * height > 100000:  # big: noise (made in C by PIL), slow to decode
        out = io.BytesIO()
        noise = [Image.effect_noise((width, height), 40 + rng.randrange(40)) for _ in range(3)]
        Image.merge("RGB", noise).save(out, format="JPEG", quality=quality)
        return out.getvalue()
    # Smooth gradients plus a little noise: real-looking JPEGs whose crops and flips differ visibly.
    base = [rng.randrange(256) for _ in range(3)]
    pixels = bytes(
        (base[c] + x * 7 + y * 3 * (c + 1) + rng.randrange(16)) % 256
        for y in range(height) for x in range(width) for c in range(3)
    )
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(directory, shards=2, per_shard=24, width=40, height=32, classes=10, corrupt=(), seed=7):
    """shards × per_shard samples KEY.jpg + KEY.cls (label = index % classes); `corrupt` holds global sample
    indices whose .jpg is truncated garbage. Returns the shard paths."""
    rng = random.Random(seed)
    paths = []
    index = 0
    for s in range(shards):
        path = os.path.join(directory, f"train-{s:06d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(per_shard):
                key = f"sample{index:06d}"
                image = jpeg_bytes(rng, width + index % 5, height + index % 3)
                if index in corrupt:
                    image = b"\xff\xd8\xff" + b"not a jpeg " * 4
                _add(tar, key + ".jpg", image)
                _add(tar, key + ".cls", str(index % classes).encode())
                index += 1
        paths.append(path)
    return paths


def build_dir():
    return os.environ.get("HOTPATH_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))


def progress_during(call):
    """Runs call() while another Python thread counts rounds; returns (call's result, (start, end) of the call, the
    other thread's clock every 1000 rounds). A call that releases the GIL leaves stamps in its middle; one that holds
    it leaves none there (the spinner only runs until the call takes the GIL, one switch interval, and after)."""
    import threading
    import time

    stamps, stop = [], threading.Event()

    def spin():
        rounds = 0
        while not stop.is_set():
            rounds += 1
            if rounds % 1000 == 0:
                stamps.append(time.perf_counter())

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        start = time.perf_counter()
        result = call()
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    return result, (start, end), stamps


def stamps_in_the_middle(span, stamps):
    """The stamps in the middle 40 % of span."""
    start, end = span
    return [t for t in stamps if start + 0.3 * (end - start) < t < start + 0.7 * (end - start)]
