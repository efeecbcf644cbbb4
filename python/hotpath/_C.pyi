# Type stubs of the extension module hotpath._C (python/src/*.cpp). Use the `hotpath` package's classes.
from typing import Optional

import torch

TORCH_VERSION: str

class Tokenizer:
    @staticmethod
    def from_directory(dir: str) -> Tokenizer: ...
    def encode(
        self,
        texts: list[str],
        pairs: Optional[list[str]],
        *,
        add_special_tokens: bool = True,
        max_length: int = 0,
        truncation: str = "longest_first",
        truncation_side: str = "right",
        stride: int = 0,
        padding: str = "do_not_pad",
        pad_length: int = 0,
        pad_to_multiple_of: int = 0,
        padding_side: str = "right",
        return_offsets: bool = False,
        return_special_tokens_mask: bool = False,
        return_overflowing_tokens: bool = False,
        as_tensors: bool = False,
        threads: int = 1,
    ) -> dict: ...
    def tokenize(self, text: str) -> list[str]: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def model_max_length(self) -> int: ...
    @property
    def pad_id(self) -> int: ...
    def num_special_tokens(self, pair: bool) -> int: ...

class Loader:
    def __init__(
        self,
        shards: list[str],
        settings: list[str],
        *,
        train: bool = True,
        rank: int = 0,
        world_size: int = 1,
        check_labels: bool = False,
    ) -> None: ...
    def next(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]: ...
    def seek(self, epoch: int, batch: int) -> None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def batch(self) -> int: ...
    def batches_per_epoch(self) -> int: ...
    def stats(self) -> dict[str, float]: ...
    def bad_samples(self) -> list[str]: ...
    def describe(self) -> str: ...
    @property
    def _last_images_address(self) -> int: ...
