"""Where a run's trace and table go, and writing them so that a failure leaves nothing behind."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.cli import Run, UsageError

DEFAULT_SCHEDULE = (1, 1, 3)  # wait, warmup, active: the posts' schedule


@dataclass(frozen=True)
class Outputs:
    trace: Path
    table: Path


def run_tag(shape: str, args: argparse.Namespace, run: Run, *, extra: str | None = None) -> str:
    """The file stem: the script's shape, then everything else that changes the trace.

    On a GPU with the posts' schedule this is exactly the posts' naming,
    e.g. `64_bf16_cold_eager`; CPU runs and other schedules get a suffix so
    they never overwrite a GPU trace.
    """
    parts = [shape, run.dtype_name] + ([extra] if extra else [])
    parts.append("compile" if args.compile else "eager")
    schedule = (args.wait, args.warmup_steps, args.active)
    if schedule != DEFAULT_SCHEDULE:
        parts.append("w{}-{}-{}".format(*schedule))
    if not run.on_gpu:
        parts.append("cpu")
    return "_".join(parts)


def writable_folder(traces_dir: str, script: str) -> Path:
    """Create DIR/<script> and prove it is writable before any expensive work starts."""
    folder = Path(traces_dir) / script
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise UsageError(f"cannot write traces to {folder}: {err.strerror or err}") from None
    return folder


def prepare(traces_dir: str, script: str, tag: str, *, gzip: bool) -> Outputs:
    folder = writable_folder(traces_dir, script)
    suffix = ".json.gz" if gzip else ".json"
    return Outputs(trace=folder / f"{tag}{suffix}", table=folder / f"{tag}.txt")


@contextmanager
def atomic(*finals: Path) -> Iterator[list[Path]]:
    """Yield temporary paths beside the final ones; rename them all only if the block succeeds.

    The temporary name keeps the final suffix (torch gzips a trace whose name ends in .gz).
    """
    temps = [p.with_name(f".{p.name}.{os.getpid()}.partial{''.join(p.suffixes)}") for p in finals]
    try:
        yield temps
        for temp, final in zip(temps, finals, strict=True):
            os.replace(temp, final)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
