"""The phases of a training step where the trace shows them: forward, backward (the
autograd engine's ops, usually on a thread of their own), the optimizer
(`Optimizer.step#...`, `Optimizer.zero_grad#...`), and what FSDP and DDP annotate
(`FSDP::...`, `DistributedDataParallel...`, the reducer's hooks).

Each CPU op at the top of its thread in the step belongs to the phase its name (or a name
inside it) says; the rest of the step's top-level ops are the forward when a backward
exists, else "other". Per phase: its CPU time (union of its ops' spans) and the GPU time of
the work it launched (union).
"""

from __future__ import annotations

import re

from tracereader.trace import intervals
from tracereader.trace.model import CpuOp, Step, ancestors

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


def _phase(name: str) -> str | None:
    for phase, pattern in _PHASES:
        if pattern.search(name):
            return phase
    return None


def _top(op: CpuOp) -> CpuOp:
    return ancestors(op)[-1]


def step(s: Step) -> list[dict]:
    """[{phase, cpu_us, gpu_us}] in the order the phases first appear; [] when the step
    shows no phase but the default one."""
    named: dict[int, str] = {}  # id(top-level op) -> phase
    ops = (*s.cpu_ops, *s.other_ops)
    tops = [op for op in ops if op.parent is None]
    for op in tops:
        found = _phase(op.name)
        if found:
            named[id(op)] = found
    for op in ops:  # a wrapper at the top: the annotations are usually one level down
        parent = op.parent
        if parent is not None and parent.parent is None and id(parent) not in named:
            found = _phase(op.name)
            if found:
                named[id(parent)] = found
    if not named:
        return []
    default = "forward" if "backward" in named.values() else "other"
    cpu: dict[str, list] = {}
    gpu: dict[str, list] = {}
    for op in tops:
        phase = named.get(id(op), default)
        cpu.setdefault(phase, []).append((op.ts, op.ts + op.dur))
        gpu.setdefault(phase, [])
    for item in s.gpu:
        if item.launcher is None:
            continue
        phase = named.get(id(_top(item.launcher)), default)
        gpu.setdefault(phase, []).append((item.ts, item.ts + item.dur))
        cpu.setdefault(phase, [])
    return [
        {
            "phase": phase,
            "cpu_us": intervals.length(intervals.union(cpu[phase])),
            "gpu_us": intervals.length(intervals.union(gpu[phase])),
        }
        for phase in cpu
    ]
