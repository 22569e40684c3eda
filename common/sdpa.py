"""04_c's plumbing around SDPA: a refused backend's reason in one line, and the table that
compares the backends after `--backend all`.

SDPA gives its reasons for refusing a backend as warnings, then raises a generic RuntimeError;
try_once turns that into CannotRun with the pinned backend's own reason.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from common import profiling
from common.check import MismatchError
from common.cli import Run, UsageError, one_line
from common.outputs import Outputs
from tracereader import SdpaRow as Row
from tracereader import sdpa_comparison as comparison

# How SDPA's "<kernel> not used because:" warnings name each backend.
HEADINGS = {"efficient": "memory efficient", "flash": "flash attention", "cudnn": "cudnn"}


class CannotRun(Exception):
    """The pinned backend has no kernel for this device, dtype or shape."""


def try_once(backend: str, run: Run, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """One call under the pin (the caller holds it): the output, or CannotRun with SDPA's
    reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            y = call()
        except RuntimeError as err:
            text = str(err)
            if "No available kernel" not in text and "No viable backend" not in text:
                raise
            raise CannotRun(why_not(backend, run, caught, err)) from None
    for w in caught:  # a backend that ran may still have something to say
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return y


def why_not(backend: str, run: Run, caught, err: RuntimeError) -> str:
    """SDPA's reason in one line. On a GPU, a refused call warns "<kernel> not used because:"
    for each fused kernel in turn, each heading followed by its reasons; the pinned backend's
    reasons are the ones that matter (the others only say they were switched off)."""
    if not run.on_gpu:
        return f"{backend} has no CPU kernel (on a CPU, SDPA runs math and flash)"
    lines = [_warning_text(w.message) for w in caught]
    reasons, inside = [], False
    for line in lines:
        if line.lower().endswith("not used because:"):
            inside = line.lower().startswith(HEADINGS[backend])
        elif inside and line:
            reasons.append(line)
    if not reasons:  # an SDPA that words its warnings otherwise: its first specific one
        reasons = [x for x in lines if x and not x.lower().endswith("because:")][:1]
    return _short("; ".join(reasons) if reasons else one_line(err))


def _warning_text(message) -> str:
    """A warning's first line without the "(Triggered internally at file:line.)" that
    C++ warnings carry."""
    text = str(message).strip()
    first = text.splitlines()[0] if text else ""
    return re.sub(r"\s*\(Triggered internally at [^)]*\)\s*$", "", first).strip()


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


@dataclass
class Result:
    """What profiling one backend left: its table row, its outputs (None: nothing written)."""

    row: Row
    out: Outputs | None = None
    as_expected: bool = True
    wrong: bool = False


def attempt(backend: str, profile_one: Callable[[], Result]) -> Result:
    """One backend of `--backend all`: a backend that cannot run, or computes the wrong thing,
    costs its row, not the run."""
    try:
        return profile_one()
    except CannotRun as why:
        print(f"{backend}: cannot run here: {why}")
        return Result(Row(backend, f"cannot run: {why}"))
    except MismatchError as err:
        return Result(Row(backend, f"WRONG OUTPUT: {err}"), wrong=True)


def finish_all(results: list[Result], args, run: Run, shape: str) -> int:
    """After `--backend all`: the comparison table, then the run's exit code (1 when a backend
    computed the wrong thing; bad input when none could run)."""
    where = torch.cuda.get_device_name(run.device) if run.on_gpu else "CPU"
    title = (
        f"backends compared ({shape}, {run.dtype_name}, {where}; "
        f"per forward, median of the {args.active} recorded steps):"
    )
    print("\n" + comparison([r.row for r in results], title, on_gpu=run.on_gpu))
    written = [r for r in results if r.out is not None]
    if not written:
        raise UsageError("no SDPA backend could run here")
    code = profiling.finish(args, written[-1].out, all(r.as_expected for r in results))
    return 1 if any(r.wrong for r in results) else code
