"""hotpath.text.Loader: the same batches as the trainer's C++ text loader (bit for bit), dynamic padding, the
token budget, exact resume through state_dict(), zero copy with dtype=torch.int32, and bad input named in the
exception."""

import io
import os
import random
import struct
import subprocess
import tarfile
import tempfile
import unittest

import torch

import hotpath.text

RECIPE = """
train: {{batch_size: 8, seed: 7}}
data:
  train: [{shards}]
  max_length: 48
  max_tokens: 160
  pad_to_multiple_of: 4
  bucket: true
  workers: 1
"""
KWARGS = dict(batch_size=8, seed=7, max_length=48, max_tokens=160, pad_to_multiple_of=4, bucket=True, workers=2)


def write_shard(path, count, seed, bad=None):
    """KEY.ids (little-endian int32 [CLS] ... [SEP], 3 to 60 ids) + KEY.cls; `bad`: a KEY.ids of 5 bytes."""
    rng = random.Random(seed)
    with tarfile.open(path, "w") as tar:
        for i in range(count):
            length = rng.randint(3, 60)
            ids = [101] + [rng.randint(1000, 9000) for _ in range(length - 2)] + [102]
            data = struct.pack(f"<{length}i", *ids) if i != bad else b"\x01\x02\x03\x04\x05"
            for name, payload in ((f"s{seed}-{i:05d}.ids", data), (f"s{seed}-{i:05d}.cls", str(i % 4).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


def read_reference(path):
    """The batches `python_loader_reference --text` wrote: [dict of int32 [B, L] columns and int64 labels]."""
    with open(path, "rb") as f:
        raw = f.read()
    batches, at = [], 0
    while at < len(raw):
        rows, length = struct.unpack_from("<qq", raw, at)
        at += 16
        batch = {}
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            n = rows * length
            batch[key] = torch.frombuffer(bytearray(raw[at:at + 4 * n]), dtype=torch.int32).view(rows, length)
            at += 4 * n
        batch["labels"] = torch.frombuffer(bytearray(raw[at:at + 8 * rows]), dtype=torch.int64)
        at += 8 * rows
        batches.append(batch)
    return batches


class TextLoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.shards = [os.path.join(cls.tmp.name, f"train-{i:06d}.tar") for i in range(2)]
        for i, path in enumerate(cls.shards):
            write_shard(path, 150, seed=i)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def epoch(self, loader):
        return [{k: v.clone() for k, v in b.items()} for b in loader]

    def test_same_batches_as_the_cpp_text_loader_bit_for_bit(self):
        reference = os.environ.get("HOTPATH_LOADER_REFERENCE")
        if not reference:
            self.skipTest("HOTPATH_LOADER_REFERENCE not set (ctest sets it)")
        recipe = os.path.join(self.tmp.name, "recipe.yaml")
        with open(recipe, "w") as f:
            f.write(RECIPE.format(shards=", ".join(self.shards)))
        out = os.path.join(self.tmp.name, "ref.bin")
        subprocess.run([reference, "--text", recipe, "1000", out], check=True)
        expected = read_reference(out)
        got = self.epoch(hotpath.text.Loader(self.shards, **KWARGS))
        self.assertEqual(len(got), len(expected))
        self.assertGreater(len(got), 10)
        for g, e in zip(got, expected):
            self.assertEqual(set(g), {"input_ids", "attention_mask", "token_type_ids", "labels"})
            for key in e:
                self.assertEqual(g[key].dtype, torch.int64)
                self.assertTrue(torch.equal(g[key], e[key].to(torch.int64)), key)

    def test_dynamic_padding_and_token_budget(self):
        loader = hotpath.text.Loader(self.shards, **KWARGS)
        lengths = set()
        for b in loader:
            rows, length = b["input_ids"].shape
            longest = int(b["attention_mask"].sum(1).max())
            self.assertEqual(length, -(-longest // 4) * 4)  # its own longest, rounded up to pad_to_multiple_of
            self.assertLessEqual(rows * length, 160)
            self.assertTrue(torch.all(b["input_ids"][b["attention_mask"] == 0] == 0))
            lengths.add(length)
        self.assertGreater(len(lengths), 3)  # not one fixed length
        stats = loader.stats()
        self.assertEqual(stats["samples"], 300)
        self.assertLess(stats["padding_fraction"], 0.2)  # bucketing keeps padding low

    def test_len_and_every_sample_once_per_epoch(self):
        loader = hotpath.text.Loader(self.shards, **KWARGS)
        batches = self.epoch(loader)
        self.assertEqual(len(batches), len(hotpath.text.Loader(self.shards, **KWARGS)))
        self.assertEqual(sum(b["labels"].numel() for b in batches), 300)
        self.assertEqual(loader.epoch, 1)
        second = self.epoch(loader)
        self.assertNotEqual([b["labels"].tolist() for b in batches], [b["labels"].tolist() for b in second])

    def test_resume_through_state_dict(self):
        full = hotpath.text.Loader(self.shards, **KWARGS)
        first = self.epoch(full)
        second = self.epoch(full)
        interrupted = hotpath.text.Loader(self.shards, **KWARGS)
        self.epoch(interrupted)
        it = iter(interrupted)
        for _ in range(5):
            next(it)
        state = interrupted.state_dict()
        self.assertEqual(state, {"epoch": 1, "batch": 5})
        resumed = hotpath.text.Loader(self.shards, **KWARGS)
        resumed.load_state_dict(state)
        rest = self.epoch(resumed)
        self.assertEqual(len(rest), len(second) - 5)
        for g, e in zip(rest, second[5:]):
            for key in e:
                self.assertTrue(torch.equal(g[key], e[key]), key)
        self.assertTrue(len(first) > 5)
        with self.assertRaisesRegex(ValueError, "load_state_dict"):
            resumed.load_state_dict({"epoch": 1})

    def test_int32_batches_are_the_cpp_memory(self):
        wide = self.epoch(hotpath.text.Loader(self.shards, **KWARGS))
        narrow = hotpath.text.Loader(self.shards, dtype=torch.int32, **KWARGS)
        for g, e in zip(narrow, wide):
            self.assertEqual(g["input_ids"].dtype, torch.int32)
            self.assertTrue(torch.equal(g["input_ids"].to(torch.int64), e["input_ids"]))
            self.assertTrue(torch.equal(g["labels"], e["labels"]))
            # No copy: the tensor's memory is the C++ batch's vector, kept alive by the tensor.
            self.assertEqual(g["input_ids"].data_ptr(), narrow._core.last_input_ids_address)

    def test_the_gil_is_released_while_the_corpus_is_read_and_tokenized(self):
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import fixtures

        path = os.path.join(self.tmp.name, "text-000000.tar")
        rng = random.Random(3)
        words = [w for line in fixtures.parity_lines(2000) for w in line.split()]
        with tarfile.open(path, "w") as tar:
            for i in range(6000):
                for name, payload in ((f"t{i:05d}.txt", " ".join(rng.choices(words, k=120)).encode()),
                                      (f"t{i:05d}.cls", b"1")):
                    info = tarfile.TarInfo(name)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        loader, span, stamps = fixtures.progress_during(
            lambda: hotpath.text.Loader(path, tokenizer=fixtures.minilm_dir(), max_length=128, workers=1))
        self.assertEqual(loader._core.num_samples, 6000)
        waited = span[1] - span[0]
        self.assertGreater(waited, 0.02, "the corpus was read too fast to tell")
        self.assertGreater(len(fixtures.stamps_in_the_middle(span, stamps)), 0,
                           f"no progress in the middle of a {waited:.3f} s construction")

    def test_bad_input_is_named(self):
        with self.assertRaisesRegex(ValueError, "data.max_tokens"):
            hotpath.text.Loader(self.shards, max_tokens=3)
        with self.assertRaisesRegex(OSError, "missing.tar"):
            hotpath.text.Loader(os.path.join(self.tmp.name, "missing.tar"))
        with self.assertRaisesRegex(ValueError, "rank 2 of world_size 2"):
            hotpath.text.Loader(self.shards, rank=2, world_size=2)
        bad = os.path.join(self.tmp.name, "bad-000000.tar")
        write_shard(bad, 10, seed=9, bad=3)
        with self.assertRaisesRegex(ValueError, "s9-00003"):
            hotpath.text.Loader(bad)
        with self.assertRaisesRegex(ValueError, "dtype"):
            hotpath.text.Loader(self.shards, dtype=torch.float32)


if __name__ == "__main__":
    unittest.main()
