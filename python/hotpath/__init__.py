"""hotpath: fast data loading, tokenization, training, export and inference for PyTorch scripts, over hotpath's
C++ core.

    import hotpath
    tok = hotpath.text.Tokenizer.from_pretrained("all-MiniLM-L6-v2")
    batch = tok(["Hello, world!"], padding=True, truncation=True, return_tensors="pt")
    loader = hotpath.data.Loader("train-{000000..000009}.tar", batch_size=256, image_size=224)
    for images, labels in loader: ...
    result = hotpath.train("configs/fashion_mnist.yaml", overrides={"train.epochs": 1})
    hotpath.infer.export(result.run_dir, "pkg/fmnist-int8", precision="int8", calibration=["val-000000.tar"])

The extension module hotpath._C is built against one torch release (its C++ API has no stable ABI beyond
op-shaped functions), so importing hotpath with any other torch installed is refused with one ImportError.
C++ errors arrive as ValueError (bad input), OSError (a file that cannot be opened or read) or RuntimeError,
with the message the `hotpath` CLI prints.
"""

import torch as _torch

from . import _build_info

if _torch.__version__ != _build_info.TORCH_VERSION:
    raise ImportError(
        f"hotpath was built against torch {_build_info.TORCH_VERSION} but this environment has torch "
        f"{_torch.__version__}; rebuild hotpath here: pip install --no-build-isolation <hotpath checkout>"
    )

from . import _C  # noqa: E402  (after the version check: a mismatched libtorch may not even load)
from . import data, infer, text  # noqa: E402
from .training import TrainResult, train  # noqa: E402

__version__ = _build_info.VERSION
__all__ = ["TrainResult", "data", "infer", "text", "train", "__version__"]
