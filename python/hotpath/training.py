"""hotpath.train: the training loop `hotpath train` runs, from a script.

    result = hotpath.train("configs/fashion_mnist.yaml", overrides={"train.epochs": 1},
                           callback=lambda line: print(line["split"], line["step"], line.get("loss")))
    print(result.eval["top1"], result.run_dir)        # the run directory `hotpath predict --model-dir` reads
    clf = hotpath.infer.ImageClassifier.from_dir(result.run_dir)

The recipe is a YAML file or a dict of the same sections (model, data, train, optimizer, schedule, checkpoint); the
overrides are the CLI's `--set key=value`. The run writes what `hotpath train` writes (config.yaml, metrics.jsonl,
TensorBoard events, checkpoints, best/, the trained model) and resumes exactly with resume=True.

Ctrl-C (SIGINT) finishes the current step, writes a checkpoint and raises KeyboardInterrupt; SIGTERM (torchrun's
agent stopping the job) does the same and raises SystemExit(143). An exception raised by the callback stops the run
the same way, with a checkpoint, and propagates. Under torchrun (RANK, WORLD_SIZE, ... in the environment) every
process trains its share, data parallel, as `hotpath train` does; the callback runs on rank 0 only.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Union

from . import _C
from ._settings import overrides_list

__all__ = ["TrainResult", "train"]


class TrainResult(NamedTuple):
    run_dir: str  # the run directory (recipe output_dir)
    steps: int  # optimizer steps done in total, resumed ones included
    epochs_completed: int
    eval: Optional[dict]  # the last evaluation: top1, top5 (percent), loss, majority_top1, samples; None without
    seconds: float  # wall time of this call
    samples_per_s: float  # training throughput of this call
    summary: str  # where step time went: "step 21.4 ms: data 2.1% · forward 30.8% · ... bottleneck: backward"


def train(
    recipe: Union[str, os.PathLike, Mapping[str, Any]],
    overrides: Union[Mapping[str, Any], Sequence[str], None] = None,
    callback: Optional[Callable[[dict], Any]] = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
    trace: Union[str, os.PathLike, None] = None,
    trace_steps: int = 5,
) -> TrainResult:
    """Trains the recipe (`hotpath train RECIPE --set ...`) and returns the result.

    recipe: a recipe file, or a dict {"model": {...}, "data": {...}, ...} (relative paths are relative to the
        current directory).
    overrides: {"train.epochs": 3, "data.train": ["a.tar", "b.tar"]} or ["train.epochs=3"] (`--set`); types and
        ranges are checked by the recipe, errors name the key (ValueError).
    callback: called with each metrics.jsonl line as a dict ({"split": "train", "step", "epoch", "loss", "lr", ...}
        or {"split": "eval", "step", "epoch", "top1", "top5", "loss", ...}) as the run writes it. Raising in it
        stops the run at the end of the next step, with a checkpoint; the exception then propagates.
    resume: continue from the latest checkpoint in the run directory (`--resume`).
    overwrite: the run directory holds another run: clear its outputs first (`--overwrite`).
    quiet: no progress lines on stderr. trace: write a Chrome trace of `trace_steps` steps to this file.
    """
    if isinstance(recipe, Mapping):
        path, text = "", json.dumps(dict(recipe))  # JSON is YAML: the recipe parser reads it as it is
    elif isinstance(recipe, (str, os.PathLike)):
        path, text = os.fspath(recipe), ""
    else:
        raise ValueError(f"recipe: expected a file path or a dict, got {type(recipe).__name__}")
    core_callback = None
    if callback is not None:
        def core_callback(line: str) -> None:
            callback(json.loads(line))

    r = _C.train(
        path=path,
        text=text,
        overrides=overrides_list(overrides, "overrides"),
        resume=resume,
        overwrite=overwrite,
        quiet=quiet,
        trace=os.fspath(trace) if trace is not None else "",
        trace_steps=trace_steps,
        callback=core_callback,
        handle_signals=threading.current_thread() is threading.main_thread(),
    )
    if r["signal"] == signal.SIGINT:
        raise KeyboardInterrupt(f"interrupted at step {r['steps']}; checkpoint saved in {r['run_dir']}; "
                                f"resume with resume=True")
    if r["signal"] == signal.SIGTERM:
        raise SystemExit(128 + signal.SIGTERM)
    return TrainResult(r["run_dir"], r["steps"], r["epochs_completed"], r["eval"], r["seconds"], r["samples_per_s"],
                       r["summary"])
