"""Measure the link's curve (tracereader.analyses.linkcurve): all-reduce, all-gather and
reduce-scatter at every size from `low` to `high` bytes, doubling, timed on every rank with the
same fixed number of calls (timing.time_fixed), the slowest rank's best sample per point."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from common.cli import Run
from common.measuring import timing
from tracereader import LINK_KINDS as KINDS
from tracereader import LinkCurve, bus_factor

DTYPE = torch.bfloat16  # what the lessons' collectives move (FSDP's reduce-scatter: fp32)
HIGH = 1 << 30  # the largest message measured by default: 1 GiB, where NVLink saturates


def sizes(low: int, high: int) -> list[int]:
    """low, 2 low, 4 low, ... up to high (whole buffers, in bytes)."""
    out, size = [], low
    while size <= high:
        out.append(size)
        size *= 2
    return out


def _call(kind: str, nbytes: int, world: int, device) -> Callable[[], object]:
    elements = max(nbytes // DTYPE.itemsize // world * world, world)  # divisible by N
    whole = torch.randn(elements, dtype=DTYPE, device=device)
    part = torch.empty(elements // world, dtype=DTYPE, device=device)
    if kind == "all-reduce":
        return lambda: dist.all_reduce(whole)
    if kind == "all-gather":
        return lambda: dist.all_gather_into_tensor(whole, part)
    return lambda: dist.reduce_scatter_tensor(part, whole)


def measure(
    run: Run,
    *,
    world: int,
    backend: str,
    device_name: str,
    kinds=KINDS,
    low: int = 1 << 20,
    high: int = HIGH,
    calls: int = 10,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> LinkCurve:
    """Every rank calls this with the same arguments (the collectives must pair up)."""

    points: dict[str, list[tuple[int, float]]] = {}
    for kind in kinds:
        for nbytes in sizes(low, high):
            fn = _call(kind, nbytes, world, run.device)
            fn()  # NCCL sets up its channels on a size's first call
            timed = timing.time_fixed(fn, run, calls=calls, repeats=repeats)
            best = torch.tensor([timed.best_s or timed.median_s], dtype=torch.float64)
            if run.on_gpu:
                best = best.to(run.device)
            dist.all_reduce(best, op=dist.ReduceOp.MAX)  # the slowest rank's best sets the pace
            seconds = float(best.item())
            bus = bus_factor(kind, world) * nbytes / seconds
            points.setdefault(kind, []).append((nbytes, bus))
            if progress:
                progress(f"{kind:14} {nbytes / 2**20:9.2f} MiB  {seconds * 1e6:10.1f} us  "
                         f"{bus / 1e9:8.1f} GB/s")  # fmt: skip
            del fn
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    how = (f"best of {repeats}x{calls} queued calls per size, slowest rank, {DTYPE}, "
           f"torch {torch.__version__}, {stamp}")  # fmt: skip
    return LinkCurve(device_name, backend, world, how, {k: tuple(v) for k, v in points.items()})
