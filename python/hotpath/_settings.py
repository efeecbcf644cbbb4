"""Python values → the recipe's `key=value` overrides (`hotpath train --set`), the one conversion every binding that
configures through the recipe parser uses (hotpath.data.Loader, hotpath.text.Loader, hotpath.train). The recipe then
checks each value's type and range and names the key in its error."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence, Union


def yaml_scalar(value: Any) -> str:
    """A python value as an override's YAML value: bool → true/false, numbers as written, lists as flow
    sequences, anything else as a double-quoted string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return json.dumps(str(value))  # a double-quoted YAML string


def overrides_list(overrides: Union[Mapping[str, Any], Sequence[str], None], what: str) -> list[str]:
    """{"train.epochs": 3} or ["train.epochs=3"] → ["train.epochs=3"]."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={yaml_scalar(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ValueError(f"{what}: expected a dict of key → value or a list of 'key=value' strings")
    return list(overrides)
