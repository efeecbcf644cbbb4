"""Fixtures for tests/hostile/hostile_test.sh, made in the directory given: tiny image shards (good and with
bad labels), a CSV/JSONL image list, hostile JSON/JSONL texts, a model directory's broken files.
Usage: make_fixtures.py DIR. Deterministic; PIL only for the PNGs."""
import io
import json
import os
import sys
import tarfile

from PIL import Image

out = sys.argv[1]
os.makedirs(f"{out}/img", exist_ok=True)


def png(value):
    buf = io.BytesIO()
    Image.new("L", (8, 8), value).save(buf, format="PNG")
    return buf.getvalue()


def shard(path, labels):
    """A WebDataset shard: one 8x8 PNG + .cls per label (a label is written as given: bytes or int)."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, label in enumerate(labels):
            for ext, data in (("png", png(40 * (i % 6))), ("cls", str(label).encode() if not isinstance(label, bytes) else label)):
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


good = [i % 2 for i in range(16)]
shard(f"{out}/good-000000.tar", good)
shard(f"{out}/good-000001.tar", good)
for name, bad in [("label7", 7), ("labelneg", -1), ("label100", -100), ("label2p31", 2**31), ("labelhuge", 2**63),
                  ("labeltext", b"cat"), ("labelempty", b""), ("labelfloat", b"1.5")]:
    labels = list(good)
    labels[5] = bad
    shard(f"{out}/{name}-000000.tar", labels)
# Every label bad: nothing to train on.
shard(f"{out}/allbad-000000.tar", [9] * 16)
# Truncated and garbage shards.
data = open(f"{out}/good-000000.tar", "rb").read()
open(f"{out}/trunc-000000.tar", "wb").write(data[:700])
open(f"{out}/garbage-000000.tar", "wb").write(bytes((i * 7919) % 251 for i in range(5000)))
open(f"{out}/empty-000000.tar", "wb").write(b"")

# Images for CSV/JSONL lists.
for i in range(4):
    open(f"{out}/img/{i}.png", "wb").write(png(60 * i))

# Hostile JSON texts.
deep = "[" * 100000 + "]" * 100000
open(f"{out}/deep.json", "w").write(deep)
open(f"{out}/deep_obj.json", "w").write('{"a":' * 100000 + "1" + "}" * 100000)
open(f"{out}/wide.json", "w").write("{" + ",".join(f'"k{i}":{i}' for i in range(200000)) + "}")
open(f"{out}/dupkeys.json", "w").write("{" + ",".join('"k":1' for _ in range(200000)) + "}")
open(f"{out}/notobject.json", "w").write("[1, 2, 3]")
open(f"{out}/truncated.json", "w").write('{"model": "cnn_small", "num_cl')
open(f"{out}/binary.json", "wb").write(bytes(range(256)) * 4)
open(f"{out}/bom_garbage.json", "wb").write(b"\xef\xbb\xbf{\xff\xfe}")
