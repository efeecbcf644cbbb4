"""The package itself: built against the installed torch, refusing any other torch at import with one
ImportError naming both versions; C++ errors as Python exceptions, never an abort."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

import hotpath


class PackageTest(unittest.TestCase):
    def test_built_against_the_installed_torch(self):
        self.assertEqual(hotpath._C.TORCH_VERSION, torch.__version__)
        self.assertEqual(hotpath._build_info.TORCH_VERSION, torch.__version__)

    def test_another_torch_is_refused_at_import_naming_both_versions(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "torch"))
            with open(os.path.join(tmp, "torch", "__init__.py"), "w") as f:
                f.write('__version__ = "2.0.0+fake"\n')
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp] + sys.path))
            probe = textwrap.dedent("""
                try:
                    import hotpath
                except ImportError as e:
                    print("ImportError:", e)
                """)
            out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        self.assertIn("ImportError:", out.stdout)
        self.assertIn("2.0.0+fake", out.stdout)
        self.assertIn(torch.__version__, out.stdout)
        self.assertEqual(out.stdout.count("\n"), 1)  # one line

    def test_errors_do_not_abort_the_process(self):
        # A malformed input inside the C++ core, raised many times over: the process lives on.
        for _ in range(100):
            with self.assertRaises(ValueError):
                hotpath.data.Loader("/dev/null", image_size=-3)
        with self.assertRaises(OSError):
            hotpath.text.Tokenizer.from_pretrained("/nonexistent")

    def test_a_libtorch_error_is_a_runtime_error_of_one_line(self):
        classifier = hotpath.infer.ImageClassifier.from_pretrained("efficientnet_lite0")
        with self.assertRaises(RuntimeError) as caught:  # c10::Error from inside the model's first convolution
            classifier.logits(torch.zeros(1, 3, 32, 32, dtype=torch.float64))
        message = str(caught.exception)
        self.assertIn("Double", message)
        self.assertNotIn("\n", message)  # no C++ backtrace
        self.assertNotIn("Exception raised from", message)


if __name__ == "__main__":
    unittest.main()
