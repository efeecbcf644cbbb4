"""hotpath.text: the BERT WordPiece tokenizer, called like a Hugging Face fast tokenizer.

    tok = hotpath.text.Tokenizer.from_pretrained("all-MiniLM-L6-v2")    # tokenizer.json or vocab.txt
    enc = tok(["a first text", "a second"], padding=True, truncation=True, max_length=128, return_tensors="pt")
    model(enc["input_ids"], attention_mask=enc["attention_mask"])

The ids, type ids, masks and offsets are the ones HF `tokenizers` gives (the C++ tokenizer's parity tests and
tests/python/test_text.py). Batches are encoded in C++ with the GIL released, on `num_threads` threads.

`Loader` reads text shards into padded batches (dynamic padding, bucketing, a token budget) exactly as
`hotpath train` does for a text recipe's `data:` section:

    loader = hotpath.text.Loader("train-{000000..000003}.tar", batch_size=32, max_tokens=4096, tokenizer="bert")
    for batch in loader:                    # {'input_ids', 'attention_mask', 'token_type_ids', 'labels'}
        loss = model(**batch).loss
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from . import _C
from ._settings import overrides_list

__all__ = ["BatchEncoding", "Loader", "Tokenizer"]

# transformers' LARGE_INTEGER: a model_max_length above it means "no limit".
_NO_LIMIT = int(1e30)


class BatchEncoding(dict):
    """The columns of an encoded batch (input_ids, token_type_ids, attention_mask, ...), as transformers'
    BatchEncoding: a dict whose keys are also attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device: Any) -> "BatchEncoding":
        """The tensors moved to `device` (return_tensors='pt' only)."""
        return BatchEncoding({k: v.to(device) if hasattr(v, "to") else v for k, v in self.items()})


def _padding(padding: bool | str) -> str:
    if padding is True or padding == "longest":
        return "longest"
    if padding is False or padding is None or padding == "do_not_pad":
        return "do_not_pad"
    if padding == "max_length":
        return "max_length"
    raise ValueError(f"padding: expected True, False, 'longest', 'max_length' or 'do_not_pad', got {padding!r}")


def _truncation(truncation: bool | str | None) -> str | None:
    """The strategy, or None for no truncation."""
    if truncation is True:
        return "longest_first"
    if truncation is False or truncation is None or truncation == "do_not_truncate":
        return None
    if truncation in ("longest_first", "only_first", "only_second"):
        return truncation
    raise ValueError(
        "truncation: expected True, False, 'longest_first', 'only_first', 'only_second' or 'do_not_truncate', "
        f"got {truncation!r}"
    )


def _texts(value: Any, name: str) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError(f"{name}: expected a str or a list of str, got {type(value).__name__}")


class Tokenizer:
    """A BERT WordPiece tokenizer (tokenizer.json or vocab.txt), token-for-token compatible with HF's."""

    def __init__(self, core: _C.Tokenizer, num_threads: int = 0) -> None:
        self._core = core
        self.num_threads = num_threads

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, num_threads: int = 0) -> "Tokenizer":
        """Loads a model directory: tokenizer.json if it has one, else vocab.txt (+ tokenizer_config.json).

        num_threads: threads that encode a batch (0: one per hardware thread); the result does not depend on it.
        Raises OSError when the directory cannot be read, ValueError when a file in it is malformed.
        """
        return cls(_C.Tokenizer.from_directory(os.fspath(directory)), num_threads)

    @property
    def vocab_size(self) -> int:
        """Vocabulary size, added tokens included (HF's len(tokenizer))."""
        return self._core.vocab_size

    def __len__(self) -> int:
        return self._core.vocab_size

    @property
    def model_max_length(self) -> int:
        """tokenizer_config.json's model_max_length (transformers' LARGE_INTEGER when it gives none)."""
        return self._core.model_max_length or _NO_LIMIT

    @property
    def pad_token_id(self) -> int:
        return self._core.pad_id

    def tokenize(self, text: str) -> list[str]:
        """The word pieces of `text`, no special tokens: ["hello", ",", "token", "##izer"]."""
        return self._core.tokenize(text)

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            return self._core.token_to_id(tokens)
        return [self._core.token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        if isinstance(ids, int):
            return self._core.id_to_token(ids)
        return [self._core.id_to_token(int(i)) for i in ids]

    def __call__(
        self,
        text: str | Sequence[str],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str = "right",
        truncation_side: str = "right",
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
    ) -> BatchEncoding:
        """Encodes one text or a batch (with `text_pair`: pairs), with transformers' arguments and rules.

        padding: False | True / 'longest' | 'max_length' (to max_length, else model_max_length).
        truncation: None / False | True / 'longest_first' | 'only_first' | 'only_second'; to max_length, else
        model_max_length. As in transformers, max_length alone (padding and truncation unset) truncates.
        return_tensors: None (lists) or 'pt' (int64 torch tensors; rows must then have one length).
        Offsets are in characters (code points), as HF's. A single str gives unbatched lists (tensors: 1 row).
        Raises ValueError for bad input (with what and where), as transformers does for the same call.
        """
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors: only None and 'pt' are supported, got {return_tensors!r}")
        single = isinstance(text, str)
        texts = _texts(text, "text")
        pairs = None if text_pair is None else _texts(text_pair, "text_pair")
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"  # transformers' backward-compatible rule
        pad = _padding(padding)
        strategy = _truncation(truncation)
        limit = self.model_max_length
        if max_length is None:
            if pad == "max_length":
                pad = "do_not_pad" if limit >= _NO_LIMIT else pad
                max_length = None if limit >= _NO_LIMIT else limit
            if strategy is not None:
                strategy = None if limit >= _NO_LIMIT else strategy
                max_length = None if limit >= _NO_LIMIT else limit
        if (strategy is not None and pad != "do_not_pad" and pad_to_multiple_of and max_length is not None
                and max_length % pad_to_multiple_of != 0):
            raise ValueError(
                f"Truncation and padding are both activated but truncation length ({max_length}) is not a multiple "
                f"of pad_to_multiple_of ({pad_to_multiple_of})."
            )
        out = self._core.encode(
            texts,
            pairs,
            add_special_tokens=add_special_tokens,
            max_length=(max_length or 0) if strategy is not None else 0,
            truncation=strategy or "longest_first",
            truncation_side=truncation_side,
            stride=stride,
            padding=pad,
            pad_length=(max_length or 0) if pad == "max_length" else 0,
            pad_to_multiple_of=pad_to_multiple_of or 0,
            padding_side=padding_side,
            return_offsets=return_offsets_mapping,
            return_special_tokens_mask=return_special_tokens_mask,
            return_overflowing_tokens=return_overflowing_tokens,
            as_tensors=return_tensors == "pt",
            threads=self.num_threads if len(texts) > 1 else 1,
        )
        if return_token_type_ids is False:
            del out["token_type_ids"]
        if return_attention_mask is False:
            del out["attention_mask"]
        if return_length:
            ids = out["input_ids"]
            out["length"] = [len(row) for row in ids] if return_tensors is None else ids.new_full(
                (ids.shape[0],), ids.shape[1])
        if single and return_tensors is None and not return_overflowing_tokens:
            out = {k: v[0] for k, v in out.items()}
        return BatchEncoding(out)

    def __repr__(self) -> str:
        return f"hotpath.text.Tokenizer(vocab_size={self.vocab_size}, model_max_length={self.model_max_length})"


class Loader:
    """Text shards (KEY.txt [+ KEY.pair.txt], or KEY.ids [+ KEY.type.ids]; KEY.cls) → padded batches, as a dict
    of torch tensors: input_ids, attention_mask, token_type_ids [B, L] and labels [B].

    The options are a text recipe's (`hotpath train`, data.kind: text): they go through the recipe's parser and
    the trainer's own recipe → loader mapping (train/text_loader_options.h), so the same settings give the
    batches `hotpath train` trains on, bit for bit.

    shards: paths or patterns, or a list of them (read and tokenized up front).
    batch_size: samples per batch (train.batch_size: the trainer's micro-batch with accum_steps 1); with
        max_tokens the nominal size: batches of short samples hold more, long ones fewer.
    tokenizer: directory with tokenizer.json or vocab.txt (needed for KEY.txt shards; its pad id pads).
    max_length: truncation. max_tokens: > 0: batch × padded length <= max_tokens, the batch size varies.
    pad_to_multiple_of: round each batch's length up. bucket: sort by length within windows of 100 batches.
    Each batch is padded to its own longest sample (dynamic padding).
    train: True shuffles (a function of seed and epoch); False keeps shard order.
    rank, world_size: data parallel: this rank takes every world_size-th sample of the epoch's permutation.
    dtype: torch.int64 (HF's and the trainer's) or torch.int32: then the tensors are the C++ batch's own
        memory (no copy).

    Raises ValueError for a bad option or sample (named like the recipe key, or the shard and member), OSError
    when a shard cannot be read.
    """

    def __init__(
        self,
        shards: str | os.PathLike | Sequence[str | os.PathLike],
        batch_size: int = 32,
        *,
        tokenizer: str | os.PathLike | None = None,
        max_length: int = 128,
        max_tokens: int = 0,
        pad_to_multiple_of: int = 0,
        bucket: bool = True,
        workers: int = 2,
        train: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        dtype: Any = None,
    ) -> None:
        import torch

        if isinstance(shards, (str, os.PathLike)):
            shards = [shards]
        if dtype not in (None, torch.int64, torch.int32):
            raise ValueError(f"dtype: expected torch.int64 or torch.int32, got {dtype}")
        settings = {
            "train.batch_size": batch_size,
            "train.seed": seed,
            "data.max_length": max_length,
            "data.max_tokens": max_tokens,
            "data.pad_to_multiple_of": pad_to_multiple_of,
            "data.bucket": bucket,
            "data.workers": workers,
        }
        if tokenizer is not None:
            settings["data.tokenizer"] = os.fspath(tokenizer)

        self._core = _C.TextLoader(
            [os.fspath(s) for s in shards],
            overrides_list(settings, "settings"),
            train=train,
            rank=rank,
            world_size=world_size,
            int64=dtype is not torch.int32,
        )

    def __iter__(self) -> Iterable[dict]:
        """The rest of the current epoch; afterwards the loader stands at the start of the next one."""
        while True:
            batch = self._core.next()
            if batch is None:
                self._core.seek(self._core.epoch + 1, 0)  # as hotpath.data.Loader: the next pass is the next epoch
                return
            yield batch

    def __len__(self) -> int:
        """Batches in the current epoch on this rank (with max_tokens the count depends on the epoch)."""
        return self._core.batches_in_epoch()

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from."""
        return self._core.epoch

    @property
    def num_samples(self) -> int:
        """Samples in the shards."""
        return self._core.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Starts `epoch` from its first batch."""
        self._core.seek(epoch, 0)

    def state_dict(self) -> dict[str, int]:
        """Where the next batch comes from: {'epoch': e, 'batch': b}."""
        return {"epoch": self._core.epoch, "batch": self._core.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resumes at `state` (from state_dict()): the next batch is the one an uninterrupted run gives."""
        try:
            epoch, batch = int(state["epoch"]), int(state["batch"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"load_state_dict: expected {{'epoch': int, 'batch': int}}, got {state!r}") from e
        self._core.seek(epoch, batch)

    def stats(self) -> dict[str, float]:
        """Batches, samples, real_tokens, padded_tokens and padding_fraction of the batches returned so far."""
        return self._core.stats()

    def __repr__(self) -> str:
        return f"hotpath.text.Loader({self.num_samples} samples, epoch {self.epoch})"
