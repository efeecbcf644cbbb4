"""hotpath.text.Tokenizer against Hugging Face's fast tokenizer (transformers) on the C++ parity test's corpus:
the same ids, type ids, masks, offsets and overflow windows for the same call; bad input named in the exception."""

import json
import os
import shutil
import tempfile
import unittest

import torch

import fixtures
import hotpath


def hf_tokenizer(directory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


class TokenizerParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = fixtures.minilm_dir()
        cls.ours = hotpath.text.Tokenizer.from_pretrained(cls.dir, num_threads=2)
        cls.hf = hf_tokenizer(cls.dir)
        cls.lines = fixtures.parity_lines()
        cls.short = [l for l in cls.lines if 0 < len(cls.hf.tokenize(l)) < 10][:500]  # pair firsts

    def assertSameEncoding(self, texts, pairs=None, **kwargs):
        ours = self.ours(texts, pairs, **kwargs)
        theirs = self.hf(texts, pairs, **kwargs)
        self.assertEqual(sorted(ours.keys()), sorted(k for k in theirs.keys()), kwargs)
        for key in theirs.keys():
            a, b = ours[key], theirs[key]
            if isinstance(b, torch.Tensor):
                self.assertEqual(a.dtype, b.dtype, key)
                self.assertTrue(torch.equal(a, b), f"{key} differs for {kwargs}")
            else:
                a = [list(map(tuple, r)) if key == "offset_mapping" else r for r in a] if key == "offset_mapping" else a
                b = [list(map(tuple, r)) for r in b] if key == "offset_mapping" else b
                if a != b:
                    first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) if isinstance(a, list) else None
                    self.fail(f"{key} differs for {kwargs} at row {first}: {a[first]!r} vs {b[first]!r}")
        return ours

    def test_corpus_is_the_cpp_parity_tests(self):
        self.assertGreater(len(self.lines), 10000)

    def test_batch_without_padding(self):
        self.assertSameEncoding(self.lines)

    def test_padding_and_truncation_to_tensors(self):
        enc = self.assertSameEncoding(self.lines, padding=True, truncation=True, max_length=64, return_tensors="pt")
        self.assertEqual(enc["input_ids"].shape[1], 64)
        self.assertSameEncoding(self.lines[:300], padding="max_length", max_length=40, truncation=True,
                                return_tensors="pt")
        self.assertSameEncoding(self.lines[:300], padding=True, pad_to_multiple_of=8, return_tensors="pt")

    def test_max_length_alone_truncates_as_in_transformers(self):
        self.assertSameEncoding(self.lines[:2000], max_length=16)

    def test_model_max_length_applies_when_no_max_length(self):
        long_text = " ".join(self.lines[:400])
        enc = self.assertSameEncoding([long_text], truncation=True)
        self.assertEqual(len(enc["input_ids"][0]), 512)

    def test_pairs(self):
        seconds = [l for l in self.lines if len(l) > 150][:len(self.short)]
        self.assertEqual(len(seconds), len(self.short))
        self.assertSameEncoding(self.short, seconds)
        self.assertSameEncoding(self.short, seconds, truncation="only_second", max_length=32, padding="max_length")
        self.assertSameEncoding(self.short, seconds, truncation="longest_first", max_length=24, padding=True,
                                return_tensors="pt")
        self.assertSameEncoding(self.short[0], seconds[0])
        # A second text too short for only_second: HF refuses the batch, and so does hotpath, naming the line.
        with self.assertRaises(Exception):
            self.hf(["a b c d e f g h i j k l"], ["x"], truncation="only_second", max_length=6)
        with self.assertRaisesRegex(ValueError, "line 0: truncation only_second"):
            self.ours(["a b c d e f g h i j k l"], ["x"], truncation="only_second", max_length=6)

    def test_offsets_and_special_tokens_mask(self):
        self.assertSameEncoding(self.lines[:3000], return_offsets_mapping=True, return_special_tokens_mask=True)
        self.assertSameEncoding(self.lines[:200], padding=True, return_offsets_mapping=True, return_tensors="pt")

    def test_overflow_with_stride(self):
        texts = [l for l in self.lines if len(l) > 200][:200]
        self.assertSameEncoding(texts, truncation=True, max_length=32, stride=8, return_overflowing_tokens=True,
                                padding=True)

    def test_single_text_and_options(self):
        for text in self.lines[:50]:
            self.assertSameEncoding(text)
        self.assertSameEncoding(self.lines[7], return_tensors="pt")
        self.assertSameEncoding(self.lines[:100], add_special_tokens=False)
        self.assertSameEncoding(self.lines[:100], return_token_type_ids=False, return_attention_mask=False)
        self.assertSameEncoding(self.lines[:100], padding=True, padding_side="left", return_length=True)
        self.assertEqual(self.ours.tokenize(self.lines[3]), self.hf.tokenize(self.lines[3]))
        self.assertEqual(len(self.ours), len(self.hf))

    def test_vocab_txt_directory(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
                if os.path.exists(os.path.join(self.dir, name)):
                    shutil.copy(os.path.join(self.dir, name), tmp)
            ours = hotpath.text.Tokenizer.from_pretrained(tmp)
            theirs = hf_tokenizer(tmp)
            a = ours(self.lines[:3000], padding=True, truncation=True, max_length=48, return_tensors="pt")
            b = theirs(self.lines[:3000], padding=True, truncation=True, max_length=48, return_tensors="pt")
            for key in ("input_ids", "token_type_ids", "attention_mask"):
                self.assertTrue(torch.equal(a[key], b[key]), key)


class TokenizerErrorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = hotpath.text.Tokenizer.from_pretrained(fixtures.minilm_dir())

    def test_a_missing_directory_is_an_os_error(self):
        with self.assertRaises(OSError) as caught:
            hotpath.text.Tokenizer.from_pretrained("/nonexistent/tokenizer-dir")
        self.assertIn("/nonexistent/tokenizer-dir", str(caught.exception))

    def test_a_malformed_tokenizer_json_is_a_value_error_naming_the_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
                json.dump({"model": {"type": "BPE"}}, f)
            with self.assertRaises(ValueError) as caught:
                hotpath.text.Tokenizer.from_pretrained(tmp)
        self.assertIn("tokenizer.json", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))

    def test_bad_calls(self):
        with self.assertRaisesRegex(ValueError, r"text\[1\]: expected a str"):
            self.tok(["fine", 3])
        with self.assertRaisesRegex(ValueError, "different lengths"):
            self.tok(["short", "a longer text than the first"], return_tensors="pt")
        with self.assertRaisesRegex(ValueError, "text_pair: 1 texts for 2"):
            self.tok(["a", "b"], ["c"])
        with self.assertRaisesRegex(ValueError, "padding"):
            self.tok(["a"], padding="sideways")
        with self.assertRaisesRegex(ValueError, "return_tensors"):
            self.tok(["a"], return_tensors="np")
        with self.assertRaises(ValueError):  # a stride not below the tokens a window keeps (HF refuses it too)
            self.tok(["a b c d e f g h i j k l m n o p"], truncation=True, max_length=6, stride=6,
                     return_overflowing_tokens=True)
        with self.assertRaises(UnicodeEncodeError):  # a lone surrogate has no UTF-8 (a ValueError)
            self.tok(["\ud800"])


if __name__ == "__main__":
    unittest.main()
