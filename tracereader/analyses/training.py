"""The training lessons' steps cut into their phases (06_train_step, 07_fsdp_train): the
lesson's own record_function ranges (forward, backward, optimizer) on the loop's thread; the
backward's work on a GPU is launched from the autograd engine's thread, so an op of another
thread belongs to the phase whose range holds its start. Per phase: its steps, a line of its
times, the GPU work launched under an op, the collectives it issued."""

from __future__ import annotations

from collections import Counter

from tracereader.analyses import ranks
from tracereader.trace import intervals
from tracereader.trace.model import CpuOp, Step, Trace, ancestors
from tracereader.units import duration


def collectives_by_phase(trace: Trace, phases: tuple[str, ...]) -> dict[str, Counter]:
    """Per phase, the collectives the last recorded step issued, by kind (read from the CPU
    lane, every thread: torch's c10d ops, alike on gloo and NCCL)."""
    found = {}
    for phase, steps in phase_steps(trace, phases).items():
        ops = (*steps[-1].cpu_ops, *steps[-1].other_ops) if steps else ()
        found[phase] = Counter(kind for _, kind in ranks.issued_collectives(ops))
    return found


def _holder(op: CpuOp, phases: tuple[str, ...], spans: list[tuple[str, float, float]]):
    """The phase an op belongs to: its annotation among its ancestors, else, for an op of
    another thread (the autograd engine's), the annotation whose range holds its start."""
    node = op
    while node.parent is not None and node.name not in phases:
        node = node.parent
    if node.name in phases:
        return node.name
    if node.index >= 0:
        return None  # the loop's thread, outside every phase
    return next((name for name, start, end in spans if start <= node.ts <= end), None)


def phase_steps(trace: Trace, phases: tuple[str, ...]) -> dict[str, list[Step]]:
    """Each recorded step cut into its phases: per phase, one Step holding that phase's CPU
    ops (both threads) and the GPU work they launched, so the reader's checks apply to it."""
    cut: dict[str, list[Step]] = {p: [] for p in phases}
    for step in trace.steps:
        spans = [(op.name, op.ts, op.end) for op in step.cpu_ops if op.name in phases]
        ops: dict[str, list[CpuOp]] = {p: [] for p in phases}
        for op in (*step.cpu_ops, *step.other_ops):
            phase = _holder(op, phases, spans)
            if phase is not None:
                ops[phase].append(op)
        gpu: dict[str, list] = {p: [] for p in phases}
        for item in step.gpu:
            phase = _holder(item.launcher, phases, spans) if item.launcher else None
            if phase is not None:
                gpu[phase].append(item)
        for name, start, end in spans:
            cut[name].append(
                Step(f"{step.name} {name}", start, end - start, ops[name], [], gpu[name])
            )
    return cut


def phase_line(steps: list[Step]) -> str:
    """A phase's median over the recorded steps: its CPU time (the annotation's span), the GPU
    time of the work it launched (union over streams), and its GPU work by kernel class."""
    if not steps:
        return "not seen in the recorded steps"
    cpu = sorted(s.dur for s in steps)[len(steps) // 2]
    busy = sorted(intervals.length(intervals.union([(i.ts, i.end) for i in s.gpu])) for s in steps)[
        len(steps) // 2
    ]
    last = Counter(i.klass.cls for i in steps[-1].gpu)
    if not any(s.gpu for s in steps):
        return f"CPU {duration(cpu)} per step (no GPU work recorded)"
    classes = ", ".join(f"{n} {c}" for c, n in last.most_common())
    return f"CPU {duration(cpu)}, GPU busy {duration(busy)} per step; GPU work: {classes}"


def launched_under(steps: list[Step], prefix: str) -> int:
    """GPU work launched, per step at most, from inside an op whose name starts with prefix."""

    def under(op: CpuOp | None) -> bool:
        return any(a.name.startswith(prefix) for a in ancestors(op))

    return max((sum(under(item.launcher) for item in s.gpu) for s in steps), default=0)
