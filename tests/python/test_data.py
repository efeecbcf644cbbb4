"""hotpath.data.Loader: the same batches as the C++ loader (bit for bit), zero copy, the GIL released while a batch
is waited for, exact resume through state_dict(), and bad input counted or named in the exception."""

import io
import os
import subprocess
import tarfile
import tempfile
import unittest

import torch

import fixtures
import hotpath

# Settings of one loader, as Loader keywords and as the recipe keys `hotpath train` reads (the same values).
KWARGS = dict(batch_size=8, image_size=24, scale=(0.3, 1.0), flip=0.5, translate=2, random_erasing=0.25, workers=2, prefetch=3,
              shuffle_buffer=16, seed=5, channels_last=True, num_classes=10, mean=(0.5, 0.4, 0.3),
              std=(0.2, 0.25, 0.3))
RECIPE = """
model: {{channels_last: true, num_classes: 10}}
train: {{batch_size: 8, seed: 5}}
data:
  train: [{shards}]
  image_size: 24
  scale_min: 0.3
  scale_max: 1.0
  flip: 0.5
  translate: 2
  random_erasing: 0.25
  workers: 1
  prefetch: 2
  shuffle_buffer: 16
  mean: [0.5, 0.4, 0.3]
  std: [0.2, 0.25, 0.3]
"""


def read_reference(path, channels, size):
    """The batches python_loader_reference wrote: [(images NCHW float32, labels int64)]."""
    with open(path, "rb") as f:
        raw = f.read()
    batches, at = [], 0
    while at < len(raw):
        rows = int.from_bytes(raw[at:at + 8], "little", signed=True)
        at += 8
        count = rows * channels * size * size
        images = torch.frombuffer(bytearray(raw[at:at + 4 * count]), dtype=torch.float32).view(rows, channels, size, size)
        at += 4 * count
        labels = torch.frombuffer(bytearray(raw[at:at + 8 * rows]), dtype=torch.int64)
        at += 8 * rows
        batches.append((images, labels))
    return batches


class LoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.shards = fixtures.write_shards(cls.tmp.name, shards=2, per_shard=24)
        cls.bad_dir = os.path.join(cls.tmp.name, "bad")
        os.mkdir(cls.bad_dir)
        # Global samples 3 and 30 are not JPEGs.
        cls.bad_shards = fixtures.write_shards(cls.bad_dir, shards=2, per_shard=24, corrupt=(3, 30))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def loader(self, **overrides):
        return hotpath.data.Loader(self.shards, **{**KWARGS, **overrides})

    def test_same_batches_as_the_cpp_loader_bit_for_bit(self):
        recipe = os.path.join(self.tmp.name, "recipe.yaml")
        with open(recipe, "w") as f:
            f.write(RECIPE.format(shards=", ".join(self.shards)))
        out = os.path.join(self.tmp.name, "reference.bin")
        helper = os.environ["HOTPATH_LOADER_REFERENCE"]
        subprocess.run([helper, recipe, "100", out], check=True)
        reference = read_reference(out, 3, 24)
        self.assertEqual(len(reference), 6)  # 48 samples, batches of 8
        # Different worker and prefetch counts than the reference: batches do not depend on them.
        got = [(images.clone(), labels.clone()) for images, labels in self.loader(workers=2, prefetch=3)]
        self.assertEqual(len(got), len(reference))
        for (images, labels), (ref_images, ref_labels) in zip(got, reference):
            self.assertEqual(images.shape, (8, 3, 24, 24))
            self.assertEqual(images.dtype, torch.float32)
            self.assertTrue(images.is_contiguous(memory_format=torch.channels_last))
            self.assertTrue(torch.equal(labels, ref_labels))
            self.assertTrue(torch.equal(images, ref_images))  # bit for bit (torch.equal: exact)

    def test_batches_are_the_loaders_own_memory(self):
        loader = self.loader(prefetch=2)
        addresses = set()
        for images, labels in loader:
            # The tensor's data pointer is the C++ batch's (no copy on the way to Python).
            self.assertEqual(images.data_ptr(), loader._core._last_images_address)
            addresses.add(images.data_ptr())
            del images, labels
        # Released batches go back to the ring and are refilled in place: a handful of buffers, not one per batch.
        for images, labels in loader:
            addresses.add(images.data_ptr())
            del images, labels
        self.assertLessEqual(len(addresses), 5)

    def test_a_held_batch_stays_alive_and_unchanged(self):
        loader = self.loader(prefetch=2)
        it = iter(loader)
        held, held_labels = next(it)
        snapshot = held.clone()
        rest = [images.sum().item() for images, _ in it]  # the ring goes round several times meanwhile
        rest += [images.sum().item() for images, _ in loader]
        self.assertGreater(len(rest), 5)
        self.assertTrue(torch.equal(held, snapshot))
        self.assertEqual(held_labels.shape, (8,))

    def test_the_gil_is_released_while_a_batch_is_waited_for(self):
        # Big noisy JPEGs decoded at full size (eval: no DCT downscale), one decode thread: the first batch takes
        # a while, and the loader starts on it only when constructed, just before next().
        with tempfile.TemporaryDirectory() as tmp:
            shards = fixtures.write_shards(tmp, shards=1, per_shard=16, width=1024, height=768)
            (images, _), span, stamps = fixtures.progress_during(lambda: next(iter(hotpath.data.Loader(
                shards, batch_size=16, train=False, image_size=512, resize_shorter=768, workers=1, prefetch=1))))
        self.assertEqual(images.shape[0], 16)
        waited = span[1] - span[0]
        self.assertGreater(waited, 0.02, "the batch came too fast to tell")
        # Held GIL: the spinning thread runs only until next() takes the GIL (one switch interval, 5 ms) and after
        # it returns. Released: it runs all along, also in the middle of the wait.
        self.assertGreater(len(fixtures.stamps_in_the_middle(span, stamps)), 0,
                           f"no progress in the middle of a {waited:.3f} s wait")

    def test_state_dict_resumes_exactly(self):
        loader = self.loader()
        run = [(i.clone(), l.clone()) for i, l in loader]
        run += [(i.clone(), l.clone()) for i, l in loader]  # epoch 1: another shuffle and other crops
        self.assertEqual(len(run), 12)
        self.assertFalse(torch.equal(run[0][1], run[6][1]) and torch.equal(run[0][0], run[6][0]))
        for stop_after in (2, 6, 9):
            first = self.loader()
            it = iter(first)
            for _ in range(stop_after % 6):
                next(it)
            if stop_after >= 6:
                list(it)
                it = iter(first)
                for _ in range(stop_after - 6):
                    next(it)
            state = first.state_dict()
            self.assertEqual(state, {"epoch": stop_after // 6, "batch": stop_after % 6})
            second = self.loader(workers=1)
            second.load_state_dict(state)
            resumed = [(i.clone(), l.clone()) for i, l in second]
            if second.epoch == 1 and stop_after < 6:
                resumed += [(i.clone(), l.clone()) for i, l in second]
            for (images, labels), (ref_images, ref_labels) in zip(resumed, run[stop_after:]):
                self.assertTrue(torch.equal(labels, ref_labels))
                self.assertTrue(torch.equal(images, ref_images))
            self.assertEqual(len(resumed), len(run) - stop_after)

    def test_len_is_the_number_of_batches_of_an_epoch(self):
        loader = self.loader()
        self.assertEqual(len(loader), 6)
        self.assertEqual(sum(1 for _ in loader), 6)
        self.assertEqual(len(self.loader(batch_size=5)), 9)  # 48 // 5, the tail dropped
        evaluation = self.loader(batch_size=5, train=False)
        self.assertEqual(len(evaluation), 10)  # every sample kept
        self.assertEqual(sum(labels.numel() for _, labels in evaluation), 48)

    def test_ranks_split_each_global_batch(self):
        whole = [l.clone() for _, l in self.loader(batch_size=8)]
        halves = [[l.clone() for _, l in self.loader(batch_size=4, rank=r, world_size=2)] for r in (0, 1)]
        for b, labels in enumerate(whole):
            self.assertTrue(torch.equal(torch.cat([halves[0][b], halves[1][b]]), labels))

    def test_bad_samples_are_skipped_counted_and_named(self):
        loader = hotpath.data.Loader(self.bad_shards, **KWARGS)
        rows = sum(labels.numel() for _, labels in loader)
        self.assertEqual(rows, 46)
        self.assertEqual(loader.bad_samples, 2)
        reasons = loader.bad_sample_reasons
        self.assertEqual(len(reasons), 2)
        self.assertTrue(any("train-000000.tar" in r and "sample000003.jpg" in r for r in reasons), reasons)
        self.assertTrue(any("train-000001.tar" in r and "sample000030.jpg" in r for r in reasons), reasons)

    def test_past_the_bad_sample_budget_the_exception_names_the_sample(self):
        loader = hotpath.data.Loader(self.bad_shards, **{**KWARGS, "max_bad_samples": 0})
        with self.assertRaises(ValueError) as caught:
            for _ in loader:
                pass
        self.assertIn("max_bad_samples", str(caught.exception))
        self.assertRegex(str(caught.exception), r"sample0000(03|30)\.jpg")

    def test_names_that_are_not_utf8_are_escaped_in_reasons_and_errors(self):
        path = os.path.join(self.tmp.name, "latin1-000000.tar")
        name = b"caf\xe9".decode("utf-8", "surrogateescape")  # the member's name is the byte 0xE9, not UTF-8
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="surrogateescape") as tar:
            for member, data in ((name + ".jpg", b"not a jpeg"), (name + ".cls", b"1")):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        loader = hotpath.data.Loader(path, batch_size=1, train=False, max_bad_samples=10)
        self.assertEqual(list(loader), [])  # its only sample is bad
        self.assertEqual(loader.bad_samples, 1)
        self.assertIn("caf\\xe9.jpg", loader.bad_sample_reasons[0])
        strict = hotpath.data.Loader(path, batch_size=1, train=False, max_bad_samples=0)
        with self.assertRaisesRegex(ValueError, r"caf\\xe9\.jpg"):
            list(strict)

    def test_bad_options_and_missing_shards(self):
        with self.assertRaisesRegex(ValueError, "data.image_size"):
            self.loader(image_size=0)
        with self.assertRaisesRegex(ValueError, "data.flip"):
            self.loader(flip="sometimes")
        with self.assertRaisesRegex(ValueError, "data.random_erasing"):
            self.loader(random_erasing=1.5)
        with self.assertRaisesRegex(ValueError, "rank 2 of world_size 2"):
            self.loader(rank=2, world_size=2)
        missing = os.path.join(self.tmp.name, "missing-000000.tar")
        with self.assertRaises(OSError) as caught:
            hotpath.data.Loader(missing)
        self.assertIn("missing-000000.tar", str(caught.exception))
        with self.assertRaisesRegex(ValueError, "load_state_dict"):
            self.loader().load_state_dict({"epoch": 0})

    def test_device_options_are_checked(self):
        with self.assertRaisesRegex(ValueError, "device: expected 'cpu', 'cuda' or 'cuda:N', got 'gpu0'"):
            self.loader(device="gpu0")
        with self.assertRaisesRegex(ValueError, "data.decode: nvjpeg needs train.device: cuda"):
            self.loader(decode="nvjpeg")
        with self.assertRaisesRegex(ValueError, "data.augment"):
            self.loader(augment="sideways")
        if not torch.cuda.is_available():
            with self.assertRaisesRegex(ValueError, "device: cuda was asked for but this torch sees no CUDA device"):
                self.loader(device="cuda")

    @unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA device")
    def test_cuda_batches_equal_the_cpu_loaders(self):
        cpu = [b for b in self.loader()]
        for options in ({}, {"augment": "device"}):
            gpu = [b for b in self.loader(device="cuda", **options)]
            self.assertEqual(len(gpu), len(cpu))
            for (gi, gl), (ci, cl) in zip(gpu, cpu):
                self.assertTrue(gi.is_cuda and gl.is_cuda, options)
                torch.testing.assert_close(gi.cpu(), ci, atol=1e-5, rtol=0, msg=str(options))
                self.assertTrue(torch.equal(gl.cpu(), cl))


if __name__ == "__main__":
    unittest.main()
