"""The phases of a training step where the trace shows them: forward, backward (the
autograd engine's ops, usually on a thread of their own), the optimizer
(`Optimizer.step#...`, `Optimizer.zero_grad#...`), and what FSDP and DDP annotate
(`FSDP::...`, `DistributedDataParallel...`, the reducer's hooks).

An op belongs to the phase of its outermost ancestor whose name says one (a wrapper around
the whole step says none: the phases are found inside it); the rest of the step is the
forward when a backward exists, else "other". Per phase: its share of the step's CPU time
(they add up to the step) and the GPU time of the work it launched (union).
"""

from __future__ import annotations

import functools
import re

from tracereader.analyses.nesting import outermost
from tracereader.trace import intervals
from tracereader.trace.model import Step, per_step

_PHASES = (
    (
        "optimizer",
        re.compile(r"^Optimizer\.(step|zero_grad)#|^(## optimizer|optimizer$)|optimizer\.step"),
    ),
    (
        "backward",
        re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|^(## backward|backward$)"),
    ),
    ("FSDP", re.compile(r"^FSDP::")),
    ("DDP", re.compile(r"^DistributedDataParallel|^DDP|Reducer::|c10d::Reducer")),
    ("forward", re.compile(r"^## forward|\.forward$|^forward$")),
)


SMALL = 0.05  # the step's time left after the backward, below this share, joins its neighbour


@functools.lru_cache(maxsize=4096)  # names repeat: every op's ancestors are asked each time
def _phase(name: str) -> str | None:
    for phase, pattern in _PHASES:
        if pattern.search(name):
            return phase
    return None


def _markers():
    """Per op (nesting.outermost), the outermost op among it and its ancestors whose name says
    a phase: a wrapper around the whole step (a user's `record_function("train_step")`, a
    `train_step()` with its own annotation) says none, so the phases inside it are found
    below it."""
    return outermost(lambda op: _phase(op.name))


@per_step  # the summary and the findings both ask
def step(s: Step) -> list[dict]:
    """[{phase, cpu_us, gpu_us}] in the order the phases first appear; [] when the step
    shows no phase but the default one.

    CPU: the step thread's span split among the phases, so they add up to it: the time
    inside an outermost phase op of that thread is that phase's; the rest is the phase of
    another thread's op running then (the loop's thread waits inside `loss.backward()` while
    autograd's thread runs the backward), else the default: "forward" before the backward
    starts (where a backward exists), "other" after it or without one. GPU: each kernel
    belongs to the phase of the op that launched it (by correlation), never to a phase merely
    running when it ran; union per phase."""
    split = _split(s)
    if split is None:
        return []
    cpu, order, marker_of, default, backward = split
    gpu: dict[str, list] = {}
    for item in s.gpu:
        m = marker_of(item.launcher)
        if m is not None:
            phase = _phase(m.name)
        else:  # launched outside every phase op: the phase its launch falls in on the CPU
            at = item.call.ts if item.call is not None else item.ts
            phase = default if backward is None or at < backward else "other"
        gpu.setdefault(phase, []).append((item.ts, item.ts + item.dur))
        order.setdefault(phase, item.ts)
    return [
        {
            "phase": phase,
            "cpu_us": intervals.length(cpu.get(phase, [])),
            "gpu_us": intervals.length(intervals.union(gpu.get(phase, []))),
        }
        for phase in sorted(order, key=lambda p: (p == "other", order[p]))
    ]


def spans(s: Step) -> list[tuple[str, float, float]]:
    """The step's CPU time as step() splits it among the phases: (phase, start, end) in time
    order, tiling the step; [] when the step shows no phase but the default one."""
    split = _split(s)
    if split is None:
        return []
    return sorted(((p, a, b) for p, parts in split[0].items() for a, b in parts), key=_start)


def _start(span: tuple) -> float:
    return span[1]


def _split(s: Step) -> tuple | None:
    """step()'s CPU split: (phase -> intervals, each phase's first time, each op's outermost
    phase op (_markers), the default phase, the backward's start); None without a phase op."""
    ops = (*s.cpu_ops, *s.other_ops)
    marker_of = _markers()  # also answers for the ops' ancestors outside the step
    markers = marker_of.each(ops)
    outermost = {id(m): m for m in markers if m is not None}.values()
    if not outermost:
        return None
    default = "forward" if any(_phase(m.name) == "backward" for m in outermost) else "other"
    order: dict[str, float] = {}
    main: dict[str, list] = {}
    other: dict[str, list] = {}
    mains = {id(op) for op in s.cpu_ops}
    for m in outermost:
        phase = _phase(m.name)
        order[phase] = min(order.get(phase, m.ts), m.ts)
        (main if id(m) in mains else other).setdefault(phase, []).append((m.ts, m.end))
    whole = [(s.ts, s.end)]
    cpu = {p: intervals.intersect(intervals.union(spans), whole) for p, spans in main.items()}
    left = intervals.subtract(whole, intervals.union(v for u in cpu.values() for v in u))
    for phase, spans in sorted(other.items(), key=lambda kv: order[kv[0]]):
        taken = intervals.intersect(left, intervals.union(spans))
        if taken:
            cpu[phase] = intervals.union([*cpu.get(phase, []), *taken])
            left = intervals.subtract(left, taken)
    # The rest: the forward up to the backward's start (where a backward exists), after it
    # whatever closes the step (a sync, a loss read, data loading): "other".
    backward = min((m.ts for m in outermost if _phase(m.name) == "backward"), default=None)
    if backward is not None:  # the loop's thread waits in backward() between autograd's ops
        last = max(m.end for m in outermost if _phase(m.name) == "backward")
        inside = intervals.intersect(left, [(backward, last)])
        if inside:
            cpu["backward"] = intervals.union([*cpu.get("backward", []), *inside])
            left = intervals.subtract(left, inside)
    split_at = backward if backward is not None else s.end
    after = intervals.intersect(left, [(split_at, s.end)])
    pieces = [(default, intervals.intersect(left, [(s.ts, split_at)]))]
    if intervals.length(after) >= SMALL * s.dur:
        pieces.append(("other", after))
    else:  # slivers between the phases (the loop's own steps): the phase they follow
        ends = sorted((m.end, _phase(m.name)) for m in outermost)
        for start, end in after:
            before = [phase for stop, phase in ends if stop <= start]
            pieces.append((before[-1] if before else default, [(start, end)]))
    for phase, part in pieces:
        if part:
            cpu[phase] = intervals.union([*cpu.get(phase, []), *part])
            order.setdefault(phase, part[0][0])
    return cpu, order, marker_of, default, backward
