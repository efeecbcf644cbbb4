"""hotpath.data: WebDataset image shards → (images, labels) torch tensor batches, from hotpath's C++ loader.

    loader = hotpath.data.Loader("train-{000000..000009}.tar", batch_size=256, image_size=224, workers=4, seed=0)
    for epoch in range(10):
        for images, labels in loader:       # one epoch per pass; images [B, C, H, W] float32, labels [B] int64
            train_step(images, labels)

The options are the recipe's (`hotpath train`): `data:` keys, plus train.batch_size, train.seed,
model.channels_last and model.num_classes. They go through the recipe's own parser and the trainer's mapping
to the loader, so a script and `hotpath train` with the same settings get the same batches, bit for bit.

Batches are the loader's own memory (no copy): a tensor keeps its batch alive for as long as it is referenced.
The GIL is released while a batch is waited for. state_dict()/load_state_dict() resume exactly: the next
batch after a load is the one an uninterrupted run would have produced.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

import torch

from . import _C
from ._settings import overrides_list

__all__ = ["Loader"]


class Loader:
    """Decoded, augmented batches from WebDataset tar shards (KEY.jpg/.jpeg/.png + KEY.cls).

    shards: paths or patterns ("train-{000000..000099}.tar", globs), or a list of them.
    batch_size: samples per batch on this rank (train.batch_size). The last partial batch is dropped when
        training; with train=False every sample is kept, in shard order.
    train: True: RandomResizedCrop(image_size, scale) + flip + translate (+ random_erasing), shuffled (shard order and a
        shuffle_buffer of samples), every draw a function of (seed, epoch, position). False: the eval transform
        (crop 'resize_center_crop' from resize_shorter, or 'resize'), no shuffle.
    crop: train: 'random_resized_crop' | 'resize'; eval: 'resize_center_crop' | 'resize' (None: the first).
    random_erasing: torchvision's RandomErasing(p=random_erasing) after the flip (train; scale 0.02-0.33, ratio
        0.3-3.3): the erased pixels become the mean (0 after normalisation).
    channels: 3 (RGB) or 1 (gray). mean, std: per channel, on [0, 1] pixels.
    channels_last: images in NHWC memory (as [B, C, H, W] tensors with channels-last strides).
    workers: decode threads. prefetch: batches prepared ahead.
    rank, world_size: data parallel: each rank gets its rows of every global batch of batch_size × world_size
        (train), or its share of the shards (eval).
    num_classes: a label outside [0, num_classes) is a bad sample (None: labels are not checked).
    max_bad_samples: corrupt or unlabelled samples are skipped and counted (bad_samples); past this many the
        next batch raises ValueError naming the last one.
    device: where the batches are used ('cpu', 'cuda', 'cuda:1'). With decode='nvjpeg' (whole JPEGs decoded on the
        GPU) or augment='device' (crop on the CPU, normalisation on the GPU) the loader's CUDA mode finishes each
        batch on that GPU (the recipe's data.decode / data.augment, docs/gpu.md); otherwise batches are made on the
        CPU and copied to the device, as `hotpath train` does.

    Raises ValueError for a bad option (named like the recipe key), OSError when a shard cannot be read.
    """

    def __init__(
        self,
        shards: str | os.PathLike | Sequence[str | os.PathLike],
        batch_size: int = 256,
        *,
        train: bool = True,
        image_size: int = 224,
        channels: int = 3,
        crop: str | None = None,
        scale: tuple[float, float] = (0.08, 1.0),
        flip: float = 0.5,
        translate: int = 0,
        random_erasing: float = 0.0,
        resize_shorter: int = 256,
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        channels_last: bool = True,
        workers: int = 2,
        prefetch: int = 4,
        shuffle_buffer: int = 2000,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        num_classes: int | None = None,
        max_bad_samples: int = 100,
        device: str | torch.device = "cpu",
        decode: str = "cpu",
        augment: str = "auto",
    ) -> None:
        if isinstance(shards, (str, os.PathLike)):
            shards = [shards]
        settings = {
            "train.batch_size": batch_size,
            "train.seed": seed,
            "model.channels_last": channels_last,
            "data.image_size": image_size,
            "data.channels": channels,
            "data.scale_min": scale[0],
            "data.scale_max": scale[1],
            "data.flip": flip,
            "data.translate": translate,
            "data.random_erasing": random_erasing,
            "data.resize_shorter": resize_shorter,
            "data.mean": list(mean),
            "data.std": list(std),
            "data.workers": workers,
            "data.prefetch": prefetch,
            "data.shuffle_buffer": shuffle_buffer,
            "data.max_bad_samples": max_bad_samples,
            "data.decode": decode,
            "data.augment": augment,
        }
        if crop is not None:
            settings["data.train_crop" if train else "data.eval_crop"] = crop
        if num_classes is not None:
            settings["model.num_classes"] = num_classes
        self._core = _C.Loader(
            [os.fspath(s) for s in shards],
            overrides_list(settings, "settings"),
            train=train,
            rank=rank,
            world_size=world_size,
            check_labels=num_classes is not None,
            device=str(device),
        )
        self._device = torch.device(device)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The rest of the current epoch; afterwards the loader stands at the start of the next one."""
        while True:
            batch = self._core.next()
            if batch is None:
                return
            if batch[0].device != self._device:  # a CPU loader feeding a GPU: the copy the trainer makes
                batch = (batch[0].to(self._device, non_blocking=True), batch[1].to(self._device, non_blocking=True))
            yield batch

    def __len__(self) -> int:
        """Batches in one epoch on this rank (bad samples shorten batches, not their number)."""
        return self._core.batches_per_epoch()

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from."""
        return self._core.epoch

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its first batch (its shuffle and augmentation draws are those of `epoch`)."""
        self._core.seek(epoch, 0)

    def state_dict(self) -> dict[str, int]:
        """Where the next batch comes from: {'epoch': e, 'batch': b}; save it with a checkpoint."""
        return {"epoch": self._core.epoch, "batch": self._core.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resumes at `state` (from state_dict()): replays only the plan (shard headers), decodes nothing."""
        try:
            epoch, batch = int(state["epoch"]), int(state["batch"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"load_state_dict: expected {{'epoch': int, 'batch': int}}, got {state!r}") from e
        self._core.seek(epoch, batch)

    @property
    def bad_samples(self) -> int:
        """Samples skipped so far (unreadable images, missing or out-of-range labels)."""
        return self._core.stats()["bad_samples"]

    @property
    def bad_sample_reasons(self) -> list[str]:
        """'shard:offset:member: reason' of each skipped sample (the first 1000)."""
        return self._core.bad_samples()

    def stats(self) -> dict[str, float]:
        """Cumulative counters: samples, bad_samples, batches and the seconds spent planning, decoding, storing
        and waiting (summed over threads)."""
        return self._core.stats()

    def __repr__(self) -> str:
        return f"hotpath.data.Loader({self._core.describe()}, epoch {self.epoch})"
