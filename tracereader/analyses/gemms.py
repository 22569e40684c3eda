"""A GEMM kernel's problem, read off the CPU op that launched it: (batch, m, n, k) from its
recorded input shapes, its FLOPs and its achieved rate. The operands are the first two shapes
that contract ([.., m, k] then [.., k, n]: mm, bmm, addmm after its bias); None where the op
recorded no shapes (record_shapes=False) or none contract."""

from __future__ import annotations

import math

from tracereader.trace.model import ELEMENT_BYTES, GpuItem


def shape(item: GpuItem) -> tuple[int, int, int, int] | None:
    if item.launcher is None or item.klass.cls != "gemm" or item.klass.joins_previous:
        return None
    dims = item.launcher.args.get("Input Dims") or ()
    for a, b in zip(dims, dims[1:], strict=False):
        if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
            return math.prod(a[:-2]) or 1, a[-2], b[-1], a[-1]
    return None


def element_bytes(item: GpuItem) -> int | None:
    types = item.launcher.args.get("Input type") if item.launcher is not None else None
    return next((ELEMENT_BYTES[t] for t in types or () if t in ELEMENT_BYTES), None)


def flops(item: GpuItem) -> float | None:
    found = shape(item)
    return 2.0 * math.prod(found) if found else None


def rate(item: GpuItem) -> float | None:
    """FLOP/s achieved by the kernel alone (its FLOPs over its duration)."""
    work = flops(item)
    return work / (item.dur * 1e-6) if work and item.dur > 0 else None
