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

from tracereader.analyses.nesting import innermost, outermost
from tracereader.trace.model import CpuOp, Step, per_step

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
    scalar = call.step is not None and _around(call.step)[0](call.launcher) is not None
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


@per_step
def blocking(s: Step) -> list[tuple]:
    """The step's runtime calls that blocked its host, each with why, in time order: read once
    per step (the summary, the idle split's host work and the cause-first candidates all ask)."""
    copies = {id(i.call): i for i in s.gpu if i.kind == "memcpy" and i.call is not None}
    found = []
    for call in s.runtime:
        if id(call) in copies or call.name in SYNC_CALLS:  # the rest are launches: none blocks
            reason = _reason(call, copies)
            if reason is not None:
                found.append((call, reason))
    return found


# Ops that only carry a sync for the op that called them: a copy, a conversion, a scalar read.
CARRIERS = frozenset(
    {
        "aten::copy_",
        "aten::_to_copy",
        "aten::to",
        "aten::cpu",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::contiguous",
        "aten::clone",
        "aten::empty",
        "aten::empty_strided",
        "aten::resize_",
        "aten::lift_fresh",
    }
)


def _scalar(op: CpuOp) -> bool:
    return op.name in SCALAR_OPS


def _named(op: CpuOp) -> bool:
    return "::" in op.name and "autograd::" not in op.name  # autograd's nodes: never a culprit


def _meaningful(op: CpuOp) -> bool:
    return _named(op) and op.name not in CARRIERS


@per_step
def _around(s: Step) -> tuple:
    """For the ops of one step, the innermost and the outermost item() around an op, the
    innermost meaningful op and the outermost named one: asked of every copy and sync in the
    step, so each kept (nesting) rather than walked up the nest per call."""
    return innermost(_scalar), outermost(_scalar), innermost(_meaningful), outermost(_named)


def culprit_op(call):
    """The innermost meaningful op around a blocking call: the first op up its chain that is
    more than a copy, conversion or scalar read (`aten::_grouped_mm` over the `aten::copy_`
    its fp32 path reads the group offsets with, `aten::is_nonzero` over `aten::item`), else
    the outermost of those (`aten::item`, `aten::to`: what the user called); autograd's
    nodes are skipped. None where no op is open."""
    if call.step is None:
        return call.launcher  # outside the steps no op is open: None
    _, _, meaningful, named = _around(call.step)
    return meaningful(call.launcher) or named(call.launcher) or call.launcher


def culprit(call) -> str:
    """culprit_op's name, else the call's own."""
    op = culprit_op(call)
    return op.name if op is not None else call.name


def step(s: Step) -> list[dict]:
    """The step's host-stalling calls by reason: count, blocked us, the op that made them (the
    innermost meaningful op: culprit) with its input types. An item()'s count is of item()
    calls (its copy and its wait are two runtime calls), the others' of runtime calls."""
    rows: dict[str, dict] = {}
    for call, reason in blocking(s):
        row = rows.setdefault(reason, {"what": reason, "count": 0, "blocked_us": 0.0, "by": {},
                                       "reads": set()})  # fmt: skip
        scalar = _around(s)[1](call.launcher)
        if scalar is not None:
            row["reads"].add(id(scalar))  # one item() call, however many runtime calls
        else:
            row["count"] += 1
        row["blocked_us"] += call.dur
        op = culprit_op(call)
        by = op.name if op is not None else "(no op)"
        got = row["by"].setdefault(by, [0.0, op])
        got[0] += call.dur
    for row in rows.values():
        row["count"] += len(row.pop("reads"))
        name = max(row["by"], key=lambda k: row["by"][k][0])
        op = row["by"][name][1]
        row["by"] = name
        row["by_types"] = [t for t in op.args.get("Input type", ()) if t] if op else []
    return sorted(rows.values(), key=lambda r: -r["blocked_us"])
