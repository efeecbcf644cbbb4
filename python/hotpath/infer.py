"""hotpath.infer: image classification with a trained run, a model package or a pretrained registry model;
sentence embeddings with a sentence-transformers directory or a package.

    clf = hotpath.infer.ImageClassifier.from_dir("pkg/lite0")        # `hotpath export` package or `hotpath train` run
    clf = hotpath.infer.ImageClassifier.from_pretrained("efficientnet_lite0")
    for p in clf.predict("dog.jpg", k=3):
        print(p.label, p.prob)

    p = hotpath.infer.Predictor("pkg/minilm-reuters-int8")           # any package: its inputs, raw outputs, top-k
    logits = p(**p.text_inputs(["Wheat prices rose."]))[0]

    enc = hotpath.infer.SentenceEncoder.from_dir("all-MiniLM-L6-v2")
    emb = enc.encode(["The cat sat.", "A dog barked."])               # float32 [2, 384], rows of norm 1

    report = hotpath.infer.export("runs/fmnist", "pkg/fmnist-int8", precision="int8", calibration=["val-*.tar"])
    hotpath.infer.export("runs/fmnist", "fmnist.onnx", format="onnx")

What `hotpath predict` and `hotpath embed` print comes from the same C++ code: the package's own eval preprocessing (decode, resize,
crop, normalize), the model or the engine at the package's precision, softmax and top-k.
"""

from __future__ import annotations

import io
import os
from typing import Any, NamedTuple, Sequence, Union

import torch

from . import _C

__all__ = [
    "EvalResult", "ExportResult", "ImageClassifier", "Prediction", "Predictor", "SentenceEncoder", "TextClassifier",
    "evaluate", "export",
]

Image = Union[str, os.PathLike, bytes, torch.Tensor, Any]  # path, encoded JPEG/PNG, uint8 tensor, PIL image


class Prediction(NamedTuple):
    label: str  # the class name (the index as text when the model has no names)
    prob: float  # softmax probability
    index: int  # class index


def _png(image: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")  # lossless: the pixels reach the C++ preprocessing unchanged
    return out.getvalue()


def _preprocess(image: Image, from_file: Any, from_bytes: Any) -> torch.Tensor:
    """Every image form through the package's C++ preprocessing: a path (from_file), encoded bytes, a PIL image
    or a uint8 tensor (as lossless PNG, from_bytes)."""
    if isinstance(image, (str, os.PathLike)):
        return from_file(os.fspath(image))
    if isinstance(image, (bytes, bytearray, memoryview)):
        return from_bytes(bytes(image))
    if isinstance(image, torch.Tensor):
        if image.dtype != torch.uint8 or image.dim() not in (2, 3):
            raise ValueError(f"image: expected a uint8 tensor [H, W, C] or [H, W], got {image.dtype} "
                             f"{list(image.shape)}")
        from PIL import Image as PILImage

        return from_bytes(_png(PILImage.fromarray(image.cpu().numpy())))
    if hasattr(image, "save") and hasattr(image, "mode"):  # a PIL image
        return from_bytes(_png(image))
    raise ValueError(f"image: expected a path, bytes, a PIL image or a uint8 tensor, got {type(image).__name__}")


class ImageClassifier:
    """An image classifier with its preprocessing and class names."""

    def __init__(self, core: _C.Classifier) -> None:
        self._core = core

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, threads: int = 0) -> "ImageClassifier":
        """A `hotpath train` run directory (model.json) or a `hotpath export` package; threads: the engine's
        (0: all cores). Raises OSError / ValueError naming what is missing or malformed."""
        return cls(_C.Classifier.from_dir(os.fspath(directory), threads))

    @classmethod
    def from_pretrained(cls, model: str) -> "ImageClassifier":
        """A registry model with its pretrained weights (e.g. 'efficientnet_lite0', ImageNet classes)."""
        return cls(_C.Classifier.from_pretrained(model))

    @property
    def image_size(self) -> int:
        return self._core.image_size

    def preprocess(self, image: Image) -> torch.Tensor:
        """One image → the model's input [C, H, W] float32, exactly as `hotpath predict` and the eval loader make
        it. image: a path, encoded JPEG/PNG bytes, a PIL image, or a uint8 tensor [H, W, C] / [H, W]."""
        return _preprocess(image, self._core.preprocess_file, self._core.preprocess_bytes)

    def logits(self, batch: torch.Tensor) -> torch.Tensor:
        """Logits [N, classes] float32 of a preprocessed batch [N, C, H, W], without autograd."""
        return self._core.logits(batch)

    def predict(self, images: Image | Sequence[Image], k: int = 5) -> list[Prediction] | list[list[Prediction]]:
        """The k most probable classes, most probable first: for one image a list, for a list of images a list
        per image (classified as one batch)."""
        single = not isinstance(images, (list, tuple))
        batch = torch.stack([self.preprocess(image) for image in ([images] if single else images)])
        top = [[Prediction(label, prob, index) for index, label, prob in row] for row in self._core.classify(batch, k)]
        return top[0] if single else top


def _texts_and_pairs(texts: Any, text_pair: Any) -> tuple[bool, list, list | None]:
    """(one str given, the texts as a list, the second texts as a list or None)."""
    single = isinstance(texts, str)
    pairs = None if text_pair is None else ([text_pair] if isinstance(text_pair, str) else list(text_pair))
    return single, [texts] if single else list(texts), pairs


class TextClassifier:
    """Texts → labels with a text_classifier package (`hotpath export` of a text run or of a Hugging Face
    BERT-family classifier): the package's tokenizer and max_length, the engine at its precision, softmax, top-k.
    The answers `hotpath serve` gives for the package's /v1 text route."""

    def __init__(self, core: _C.TextClassifier) -> None:
        self._core = core

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, threads: int = 0) -> "TextClassifier":
        """A text_classifier package directory; threads: the engine's (0: all cores)."""
        return cls(_C.TextClassifier.from_dir(os.fspath(directory), threads))

    @property
    def labels(self) -> list[str]:
        return self._core.labels

    @property
    def max_length(self) -> int:
        """Tokens per sequence, [CLS] and [SEP] included; longer texts are truncated (longest first for pairs)."""
        return self._core.max_length

    def logits(self, texts: str | Sequence[str], text_pair: str | Sequence[str] | None = None,
               batch_size: int = 32) -> torch.Tensor:
        """float32 [N, labels] (one str: [labels]); text_pair: one second text per text (sentence-pair tasks)."""
        single, texts, pairs = _texts_and_pairs(texts, text_pair)
        out = self._core.logits(texts, pairs, batch_size)
        return out[0] if single else out

    def predict(self, texts: str | Sequence[str], text_pair: str | Sequence[str] | None = None, k: int = 5,
                batch_size: int = 32) -> list[Prediction] | list[list[Prediction]]:
        """The k most probable labels, most probable first: for one text a list, for a list of texts a list each."""
        single, texts, pairs = _texts_and_pairs(texts, text_pair)
        top = [[Prediction(label, prob, index) for index, label, prob in row]
               for row in self._core.classify(texts, pairs, k, batch_size)]
        return top[0] if single else top


class Predictor:
    """Any `hotpath export` package or `hotpath train` run directory as every front end runs it (the one place that
    decides engine or eager), for code that wants the model's raw outputs in its own PyTorch script: the package's
    own inputs (images through its eval transform; texts through its tokenizer, max_length, pad id and
    truncation), the outputs as torch tensors, and its softmax + top-k with its labels and default k.

        p = hotpath.infer.Predictor("pkg/minilm-reuters-int8")
        logits = p(**p.text_inputs(["Wheat prices rose.", "The bank cut rates."]))[0]   # float32 [2, labels]
        p.top_k(logits)                                                                  # the package's k
        p = hotpath.infer.Predictor("pkg/lite0")
        logits = p(p.image_inputs(["dog.jpg", "cat.png"]))[0]                            # [2, 1000]
    """

    def __init__(self, directory: str | os.PathLike, threads: int = 0, max_length: int = 0) -> None:
        """threads: the engine's (0: all cores); max_length: text packages' tokens per sequence (0: the package's)."""
        self._core = _C.Predictor.open(os.fspath(directory), threads, max_length)

    @property
    def kind(self) -> str:
        """"image_classifier", "text_classifier" or "sentence_embedder"."""
        return self._core.kind

    @property
    def labels(self) -> list[str]:
        return self._core.labels

    @property
    def in_engine(self) -> bool:
        """True for a model package (the engine at its precision), False for a run directory (its model, eagerly)."""
        return self._core.in_engine

    @property
    def precision(self) -> str:
        return self._core.precision

    @property
    def input_names(self) -> list[str]:
        return self._core.input_names

    @property
    def output_names(self) -> list[str]:
        return self._core.output_names

    @property
    def output_width(self) -> int:
        """The classes, or the embedding's dimension."""
        return self._core.output_width

    @property
    def max_length(self) -> int:
        return self._core.max_length

    def image_inputs(self, images: Image | Sequence[Image]) -> torch.Tensor:
        """Images (path, bytes, PIL image or uint8 tensor; one or a list) → float32 [N, C, H, W] through the
        package's eval transform."""
        def from_file(path: str) -> torch.Tensor:
            with open(path, "rb") as f:
                return self._core.image_input(f.read())

        images = list(images) if isinstance(images, (list, tuple)) else [images]
        return torch.stack([_preprocess(image, from_file, self._core.image_input) for image in images])

    def text_inputs(self, texts: str | Sequence[str], text_pair: str | Sequence[str] | None = None
                    ) -> dict[str, torch.Tensor]:
        """Texts (and one second text each) → {"input_ids", "attention_mask", "token_type_ids"}: int64 [N, L],
        truncated and padded to the longest as the package says."""
        _, texts, pairs = _texts_and_pairs(texts, text_pair)
        return dict(zip(("input_ids", "attention_mask", "token_type_ids"), self._core.text_inputs(texts, pairs)))

    def __call__(self, *inputs: torch.Tensor, **named: torch.Tensor) -> list[torch.Tensor]:
        """The model on its inputs, by position (input_names order) or by name → its float32 outputs, no autograd."""
        if named:
            missing = [n for n in self.input_names if n not in named]
            extra = [n for n in named if n not in self.input_names]
            if inputs or missing or extra:
                raise ValueError(f"inputs: expected {self.input_names} by position or by name; missing {missing}, "
                                 f"unknown {extra}")
            inputs = tuple(named[n] for n in self.input_names)
        return self._core.run(list(inputs))

    run = __call__

    def top_k(self, logits: torch.Tensor, k: int | None = None) -> list[list[Prediction]]:
        """Softmax + the k most probable labels per row, most probable first (k None: the package's)."""
        if k is not None and k < 1:
            raise ValueError(f"k: expected at least 1, got {k}")
        return [[Prediction(label, prob, index) for index, label, prob in row]
                for row in self._core.top_k(logits, 0 if k is None else k)]


class SentenceEncoder:
    """Sentences → L2-normalised sentence embeddings (tokenize, BERT, mean pooling), as sentence-transformers'
    `SentenceTransformer(dir).encode(sentences, normalize_embeddings=True)` and `hotpath embed`."""

    def __init__(self, core: _C.SentenceEncoder) -> None:
        self._core = core

    @classmethod
    def from_dir(cls, directory: str | os.PathLike, max_length: int = 0) -> "SentenceEncoder":
        """A sentence-transformers model directory or a sentence_embedder package (`hotpath export`).
        max_length: tokens per sentence (0: the model's max_seq_length, or the package's)."""
        return cls(_C.SentenceEncoder.from_dir(os.fspath(directory), max_length))

    @property
    def dimension(self) -> int:
        return self._core.dimension

    @property
    def max_length(self) -> int:
        return self._core.max_length

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """float32 [N, dimension] (one str: [dimension]); row i is sentences[i]'s embedding, of L2 norm 1.
        Sentences run in token-length batches of batch_size; the result does not depend on the order given."""
        single = isinstance(sentences, str)
        out = self._core.encode([sentences] if single else list(sentences), batch_size)
        return out[0] if single else out


class ExportResult(NamedTuple):
    path: str  # the package directory or .onnx file written
    summary: str  # the line `hotpath export` prints, e.g. "top-1 agreement 99.6 % with fp32 on 512 samples ..."
    report: dict  # package: quantization_report.json's content (accuracy, nodes kept float, timings_s, ...);
    #              onnx: {"opset", "nodes", "inputs"}
    warning: str  # non-empty when the accuracy on real data is unknown (int8 without calibration data)


_SOURCE_KEYS = ("model", "pretrained", "random_init", "num_classes", "channels", "image_size", "config", "task",
                "max_length")


def export(
    model_dir: str | os.PathLike | None,
    out: str | os.PathLike,
    precision: str = "fp32",
    *,
    format: str = "package",
    calibration: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **settings: Any,
) -> ExportResult:
    """`hotpath export`: a model → a model package for the engine (fp32, bf16 or int8) with its accuracy report,
    or (format="onnx") an ONNX file of the fp32 graph.

    model_dir: an image run (`hotpath train` / hotpath.train), a text run, a Hugging Face BERT-family or a
        sentence-transformers directory; None with model="name" and pretrained=True or random_init=True (then
        num_classes, channels, image_size), or config="bert-config.json" with random_init=True.
    calibration: image shards (patterns allowed) or, for text, a file of lines: int8 calibration and the accuracy
        report's real data. Without it an int8 export calibrates on random inputs and says so in `warning`.
    Other settings are the CLI's options with underscores, defaulting as there: calibration_samples,
    max_bad_samples, max_output_error, min_output_cosine, weight_rounding ('gptq' | 'nearest'), clip_candidates,
    keep_float (node names), min_agreement, allow_accuracy_loss, threads; task ('auto' | 'classify' | 'embed') and
    max_length for text models. Quantization-aware training (int8 image models): qat_data (shards), qat_steps,
    qat_lr, qat_batch_size, qat_observer_steps, qat_temperature, qat_label_weight, qat_crop_scale, qat_seed,
    qat_biases_only. Structured pruning (image models): prune_macs (fraction of the multiply-adds kept) or
    prune_ratio, prune_importance ('l1' | 'l2' | 'taylor'), prune_round_to, prune_iterations, prune_ignore,
    prune_data (shards to fine-tune on), prune_finetune_steps, prune_lr, prune_batch_size, prune_temperature,
    prune_label_weight, prune_crop_scale, prune_seed; sparsity (magnitude pruning: no speed-up, see the report).
    Raises ValueError for a bad setting or a refused accuracy loss (the package is then not written), OSError for
    a missing file.
    """
    source: dict[str, Any] = {}
    if model_dir is not None:
        source["model_dir"] = os.fspath(model_dir)
    for key in _SOURCE_KEYS:
        if key in settings:
            value = settings.pop(key)
            source["bert_config" if key == "config" else key] = os.fspath(value) if key == "config" else value
    out = os.fspath(out)
    if format == "onnx":
        if precision != "fp32":
            raise ValueError(f"export: format='onnx' writes the fp32 graph; drop precision={precision!r} (quantize "
                             "in ONNX Runtime, or export a hotpath package for int8)")
        if calibration is not None or settings:
            raise ValueError(f"export: format='onnx' takes no calibration or quantization settings, got "
                             f"{sorted(settings) + (['calibration'] if calibration is not None else [])}")
        from . import __version__

        r = _C.export_onnx(source, out, overwrite, __version__)
        return ExportResult(r["path"], f"opset {r['opset']}, {r['nodes']} graph nodes", r, "")
    if format != "package":
        raise ValueError(f"export: format: expected 'package' or 'onnx', got {format!r}")
    options = dict(settings, precision=precision, overwrite=overwrite)
    if calibration is not None:
        options["calibration"] = calibration
    for key in ("calibration", "qat_data", "prune_data", "keep_float", "prune_ignore"):  # one name or path, or many
        if key in options:
            items = [options[key]] if isinstance(options[key], (str, os.PathLike)) else list(options[key])
            options[key] = [os.fspath(c) for c in items]
    r = _C.export_package(source, out, options, progress)
    return ExportResult(out, r["summary"], r["report"], r["warning"])


class EvalResult(NamedTuple):
    model: str  # "cnn_small", or "cnn_small (int8 package)"
    top1: float  # percent
    top5: float  # percent (top-k with k = min(5, classes))
    loss: float  # mean cross-entropy
    majority_top1: float  # percent: always answering the most frequent label of these samples
    samples: int


def evaluate(
    model_dir: str | os.PathLike,
    shards: str | os.PathLike | Sequence[str | os.PathLike],
    **settings: Any,
) -> EvalResult:
    """`hotpath eval`: top-1, top-5 and loss of a trained run (eager) or a model package (its engine, at its
    precision) over image shards (paths or patterns), through the model's own eval preprocessing; or of a
    text_classifier package over text shards (KEY.txt [+ KEY.pair.txt] or KEY.ids, with KEY.cls).

    Settings, defaulting as the CLI: batch_size (256), workers (decode threads, 2), threads (a package's engine
    threads, 0 = all cores), precision (run directories: 'fp32', 'bf16' or 'fp16' autocast).
    """
    items = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    r = _C.evaluate(os.fspath(model_dir), [os.fspath(s) for s in items], settings)
    return EvalResult(r["model"], r["top1"], r["top5"], r["loss"], r["majority_top1"], r["samples"])
