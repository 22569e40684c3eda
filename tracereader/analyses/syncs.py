"""Synchronizations that stall the host: the CPU stops until the GPU has caught up.

  runtime calls  cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, the
                 synchronous cudaMemcpy, and their driver twins: their duration is the time
                 the host was blocked
  item()         aten::item / aten::_local_scalar_dense: a GPU scalar read on the CPU (a
                 device-to-host copy, then a wait)
  DtoH copies    device-to-host copies, and copies from pageable host memory (not pinned:
                 the copy cannot run asynchronously): the runtime call that queued them
                 blocks the host

Each is reported with the time its runtime calls blocked the host, per step.
"""

from __future__ import annotations

from tracereader.trace.model import Step, ancestors

SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
SCALAR_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})


def _reason(call, copies: dict) -> str | None:
    """Why a runtime call blocked the host, or None when it did not."""
    copy = copies.get(id(call))
    if copy is None and call.name not in SYNC_CALLS:
        return None  # a launch: most calls, and none of them blocks
    scalar = any(op.name in SCALAR_OPS for op in ancestors(call.launcher))
    if scalar and (call.name in SYNC_CALLS or copy is not None):
        return "item() (a GPU scalar read on the CPU)"
    if copy is not None:
        if "Pageable" in copy.name:
            return "copy with pageable host memory"
        if "DtoH" in copy.name:
            return "device-to-host copy"
    if call.name in SYNC_CALLS:
        return call.name
    return None


def step(s: Step) -> list[dict]:
    """The step's host-stalling calls by reason: count, blocked us, the op that made them."""
    copies = {id(i.call): i for i in s.gpu if i.kind == "memcpy" and i.call is not None}
    rows: dict[str, dict] = {}
    for call in s.runtime:
        reason = _reason(call, copies)
        if reason is None:
            continue
        row = rows.setdefault(reason, {"what": reason, "count": 0, "blocked_us": 0.0, "by": {}})
        row["count"] += 1
        row["blocked_us"] += call.dur
        by = call.launcher.name if call.launcher else "(no op)"
        row["by"][by] = row["by"].get(by, 0.0) + call.dur
    for row in rows.values():
        row["by"] = max(row["by"], key=row["by"].get)
    return sorted(rows.values(), key=lambda r: -r["blocked_us"])
