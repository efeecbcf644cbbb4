"""hotpath.infer.ImageClassifier: the same top-k as `hotpath predict` (pretrained EfficientNet-Lite0 and a package
written by `hotpath export`), every image form (path, bytes, PIL, uint8 tensor) through the package's own
preprocessing, and bad input named in the exception. hotpath.infer.Predictor: the same answers as `hotpath predict`
and the TextClassifier from a package's own inputs and raw outputs. hotpath.infer.SentenceEncoder: the same embeddings as
`hotpath embed` (bit for bit) and as sentence-transformers."""

import json
import os
import subprocess
import tempfile
import unittest

import numpy
import torch

import fixtures
import hotpath

PHOTOS = ["/usr/share/darknet/data/dog.jpg", "/usr/share/wallpapers/Autumn/contents/images/1280x1024.jpg"]


def cli_predict(args, image, k):
    out = subprocess.run([os.environ["HOTPATH_CLI"], "predict", *args, "--json", "-k", str(k), image],
                         check=True, capture_output=True, text=True).stdout
    return [(t["index"], t["label"], t["prob"]) for t in json.loads(out)["top"]]


class ImageClassifierTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.package = os.path.join(cls.tmp.name, "lite0")
        subprocess.run([os.environ["HOTPATH_CLI"], "export", "--model", "efficientnet_lite0", "--pretrained", "--out",
                        cls.package], check=True, capture_output=True)
        cls.pretrained = hotpath.infer.ImageClassifier.from_pretrained("efficientnet_lite0")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def assertSameTop(self, ours, theirs):
        self.assertEqual([(p.index, p.label) for p in ours], [(i, l) for i, l, _ in theirs])
        for p, (_, _, prob) in zip(ours, theirs):
            self.assertAlmostEqual(p.prob, prob, delta=1e-6)

    def test_same_top_k_as_hotpath_predict(self):
        package = hotpath.infer.ImageClassifier.from_dir(self.package)
        for photo in PHOTOS:
            self.assertSameTop(self.pretrained.predict(photo, k=5),
                               cli_predict(["--model", "efficientnet_lite0", "--pretrained"], photo, 5))
            self.assertSameTop(package.predict(photo, k=5), cli_predict(["--model-dir", self.package], photo, 5))
        self.assertEqual(self.pretrained.predict(PHOTOS[0], k=1)[0].label, "German shepherd")

    def test_every_image_form_gets_the_same_input(self):
        from PIL import Image

        photo = PHOTOS[0]
        reference = self.pretrained.preprocess(photo)
        self.assertEqual(reference.shape, (3, 224, 224))
        with open(photo, "rb") as f:
            self.assertTrue(torch.equal(self.pretrained.preprocess(f.read()), reference))
        pil = Image.open(photo).convert("RGB")
        pixels = torch.from_numpy(numpy.asarray(pil).copy())
        from_pil = self.pretrained.preprocess(pil)
        self.assertTrue(torch.equal(self.pretrained.preprocess(pixels), from_pil))
        # PIL decodes the JPEG itself: the same pixels as libjpeg-turbo, to a rounding step.
        self.assertLess((from_pil - reference).abs().max().item(), 0.05)
        batch = self.pretrained.predict([photo, pil], k=2)
        self.assertEqual(len(batch), 2)
        self.assertEqual(batch[0][0].index, batch[1][0].index)
        logits = self.pretrained.logits(reference.unsqueeze(0))
        self.assertEqual(logits.shape, (1, 1000))
        self.assertEqual(int(logits.argmax()), batch[0][0].index)

    def test_predictor_answers_what_hotpath_predict_answers(self):
        p = hotpath.infer.Predictor(self.package)
        self.assertEqual((p.kind, p.in_engine, p.precision, p.input_names, p.output_width),
                         ("image_classifier", True, "fp32", ["images"], 1000))
        x = p.image_inputs(PHOTOS)
        self.assertEqual(x.shape, (2, 3, 224, 224))
        self.assertTrue(torch.equal(x[0], p.image_inputs(PHOTOS[0])[0]))
        logits = p(x)[0]
        self.assertEqual(logits.shape, (2, 1000))
        self.assertTrue(torch.equal(p(images=x)[0], logits))
        for row, photo in zip(p.top_k(logits, 3), PHOTOS):
            self.assertSameTop(row, cli_predict(["--model-dir", self.package], photo, 3))
        self.assertEqual(len(p.top_k(logits)[0]), 5)  # the package's default k
        with self.assertRaisesRegex(ValueError, r"expected \['images'\] by position or by name"):
            p(input=x)
        with self.assertRaisesRegex(ValueError, "k: expected at least 1"):
            p.top_k(logits, 0)
        with self.assertRaisesRegex(ValueError, "an image_classifier takes images, not text"):
            p.text_inputs(["a"])

    def test_bad_input_is_named(self):
        with self.assertRaisesRegex(OSError, "/nonexistent.jpg"):
            self.pretrained.predict("/nonexistent.jpg")
        with self.assertRaisesRegex(ValueError, "unknown image format"):
            self.pretrained.predict(b"not an image")
        with self.assertRaisesRegex(ValueError, "uint8"):
            self.pretrained.predict(torch.zeros(8, 8, 3))
        with self.assertRaisesRegex(OSError, "/nonexistent-package"):
            hotpath.infer.ImageClassifier.from_dir("/nonexistent-package")
        with self.assertRaisesRegex(ValueError, "k: expected at least 1"):
            self.pretrained.predict(PHOTOS[0], k=0)


class SentenceEncoderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = fixtures.minilm_dir()
        cls.encoder = hotpath.infer.SentenceEncoder.from_dir(cls.dir)
        cls.lines = [l for l in fixtures.parity_lines() if l.strip() and "\n" not in l and "\r" not in l][:300]

    def test_same_embeddings_as_hotpath_embed(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "emb.npy")
            subprocess.run([os.environ["HOTPATH_CLI"], "embed", "--model", self.dir, "--output", out],
                           input="\n".join(self.lines) + "\n", text=True, check=True, capture_output=True)
            reference = torch.from_numpy(numpy.load(out))
        ours = self.encoder.encode(self.lines)
        self.assertEqual(ours.shape, (len(self.lines), 384))
        self.assertTrue(torch.equal(ours, reference))

    def test_close_to_sentence_transformers(self):
        from sentence_transformers import SentenceTransformer

        theirs = SentenceTransformer(self.dir, device="cpu").encode(self.lines, normalize_embeddings=True)
        ours = self.encoder.encode(self.lines)
        self.assertLess((ours - torch.from_numpy(theirs)).abs().max().item(), 1e-4)
        one = self.encoder.encode(self.lines[0])
        self.assertEqual(one.shape, (384,))
        self.assertAlmostEqual(one.norm().item(), 1.0, places=5)
        self.assertFalse(ours.is_inference())  # an ordinary tensor: usable with autograd on

    def test_bad_input_is_named(self):
        with self.assertRaisesRegex(ValueError, r"sentences\[1\]: expected a str"):
            self.encoder.encode(["fine", None])
        with self.assertRaisesRegex(ValueError, "batch_size"):
            self.encoder.encode(["fine"], batch_size=0)
        with self.assertRaises(OSError):
            hotpath.infer.SentenceEncoder.from_dir("/nonexistent-model")


class TextClassifierTest(unittest.TestCase):
    """A Hugging Face BERT classifier (all-MiniLM-L6-v2's encoder, a seeded 3-label head) saved here with its
    tokenizer, exported to a text_classifier package, against transformers' own forward."""

    @classmethod
    def setUpClass(cls):
        import shutil

        from transformers import BertConfig, BertForSequenceClassification

        cls.tmp = tempfile.TemporaryDirectory()
        cls.hf = os.path.join(cls.tmp.name, "hf")
        minilm = fixtures.minilm_dir()
        config = BertConfig.from_pretrained(minilm, num_labels=3,
                                            id2label={0: "world", 1: "sports", 2: "business"},
                                            label2id={"world": 0, "sports": 1, "business": 2})
        torch.manual_seed(0)
        model = BertForSequenceClassification.from_pretrained(minilm, config=config).eval()
        model.save_pretrained(cls.hf, safe_serialization=True)
        for name in os.listdir(minilm):
            if name.startswith(("tokenizer", "vocab", "special_tokens")):
                shutil.copy(os.path.join(minilm, name), cls.hf)
        cls.model = model
        cls.package = hotpath.infer.export(cls.hf, os.path.join(cls.tmp.name, "pkg"), task="classify",
                                           max_length=64, progress=False).path
        cls.clf = hotpath.infer.TextClassifier.from_dir(cls.package)
        lines = [l for l in fixtures.parity_lines() if l.strip() and "\n" not in l and "\r" not in l]
        cls.lines = lines[:96]
        cls.pairs = lines[96:192]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def reference(self, texts, pairs=None):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(self.hf)
        enc = tok(texts, pairs, padding=True, truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            return self.model(**enc).logits

    def test_same_logits_as_transformers(self):
        ours = self.clf.logits(self.lines, batch_size=16)
        self.assertEqual(ours.shape, (96, 3))
        self.assertLess((ours - self.reference(self.lines)).abs().max().item(), 1e-4)
        pairs = self.clf.logits(self.lines, self.pairs)
        self.assertLess((pairs - self.reference(self.lines, self.pairs)).abs().max().item(), 1e-4)

    def test_predict_names_the_labels(self):
        self.assertEqual(self.clf.labels, ["world", "sports", "business"])
        self.assertEqual(self.clf.max_length, 64)
        top = self.clf.predict(self.lines[:4], k=2)
        probs = torch.softmax(self.reference(self.lines[:4]), 1)
        for row, p in zip(top, probs):
            self.assertEqual(len(row), 2)
            self.assertEqual(row[0].index, int(p.argmax()))
            self.assertEqual(row[0].label, ["world", "sports", "business"][row[0].index])
            self.assertAlmostEqual(row[0].prob, float(p.max()), places=4)
        one = self.clf.predict(self.lines[0], k=5)
        self.assertEqual([p.label for p in one], [p.label for p in top[0]] + [one[2].label])

    def test_predictor_gives_the_classifiers_logits(self):
        p = hotpath.infer.Predictor(self.package)
        self.assertEqual((p.kind, p.labels, p.max_length, p.output_width),
                         ("text_classifier", ["world", "sports", "business"], 64, 3))
        self.assertEqual(p.input_names, ["input_ids", "attention_mask", "token_type_ids"])
        inputs = p.text_inputs(self.lines[:8], self.pairs[:8])
        self.assertEqual(inputs["input_ids"].dtype, torch.int64)
        self.assertLessEqual(inputs["input_ids"].shape[1], 64)
        logits = p(**inputs)[0]
        self.assertTrue(torch.equal(logits, self.clf.logits(self.lines[:8], self.pairs[:8])))
        self.assertTrue(torch.equal(p(*inputs.values())[0], logits))
        self.assertEqual([[t.label for t in row] for row in p.top_k(logits, 2)],
                         [[t.label for t in row] for row in self.clf.predict(self.lines[:8], self.pairs[:8], k=2)])
        self.assertEqual(hotpath.infer.Predictor(self.package, max_length=8).text_inputs(self.lines[:2])["input_ids"].shape,
                         (2, 8))

    def test_bad_input_is_named(self):
        with self.assertRaisesRegex(ValueError, r"texts\[1\]: expected a str"):
            self.clf.predict(["fine", 3])
        with self.assertRaisesRegex(ValueError, "1 second texts for 2 texts"):
            self.clf.predict(["a", "b"], text_pair=["c"])
        with self.assertRaisesRegex(ValueError, "expected a text_classifier"):
            hotpath.infer.TextClassifier.from_dir(
                hotpath.infer.export(None, os.path.join(self.tmp.name, "img"), model="cnn_small", random_init=True,
                                     num_classes=3, image_size=28, channels=1, progress=False).path)
        with self.assertRaisesRegex(ValueError, "not a model package"):
            hotpath.infer.TextClassifier.from_dir(self.hf)


if __name__ == "__main__":
    unittest.main()
