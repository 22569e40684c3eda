"""Read an exported profiler trace (.json or .json.gz) into steps a person can check.

Per recorded ProfilerStep: the CPU ops under it as a tree (the dispatch chain), the CUDA runtime
and driver calls, and the GPU work (kernels, memcpys, memsets) in launch order, each attributed
to the CPU op that launched it. The link is the trace's correlation id: a GPU event carries the
id of the runtime call (cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, ...) that queued
it, and the innermost CPU op around that call is its launcher. Steps own the GPU work they
launched, even when it runs after the step's CPU side has ended.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from common.kernel_names import KernelClass, classify

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_CATEGORIES = ("cpu_op", "user_annotation")


class TraceError(Exception):
    """The file is not a readable profiler trace."""


@dataclass
class CpuOp:
    name: str
    ts: float
    dur: float
    depth: int  # 0 = directly under the step
    args: dict = field(repr=False)
    launched: list[GpuItem] = field(default_factory=list, repr=False)  # directly, not children

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class GpuItem:
    name: str
    kind: str  # kernel | memcpy | memset
    ts: float
    dur: float
    runtime: str  # the runtime/driver call that queued it
    launcher: CpuOp | None = field(repr=False)
    klass: KernelClass = field(repr=False)

    @property
    def launched_by(self) -> str:
        return self.launcher.name if self.launcher else "?"


@dataclass
class RuntimeCall:
    name: str
    ts: float
    dur: float


@dataclass
class Step:
    name: str
    ts: float
    dur: float
    cpu_ops: list[CpuOp]  # in start order, with depth
    runtime: list[RuntimeCall]
    gpu: list[GpuItem]  # in launch order

    @property
    def gpu_time(self) -> float:
        return sum(item.dur for item in self.gpu)

    def op_names(self) -> list[str]:
        return [op.name for op in self.cpu_ops]

    def count(self, cls: str) -> int:
        return sum(item.klass.cls == cls for item in self.gpu)


@dataclass
class Trace:
    path: Path
    steps: list[Step]
    device: str | None  # the GPU's name, None for a CPU-only trace
    runtime_outside_steps: list[RuntimeCall]
    has_runtime: bool  # CUDA runtime calls were recorded (so the CUDA activity was on)

    @property
    def gpu_items(self) -> int:
        return sum(len(s.gpu) for s in self.steps)


def load(path: str | Path) -> Trace:
    path = Path(path)
    events, meta = _read_events(path)
    return _build(path, events, meta)


def _read_events(path: Path) -> tuple[list[dict], dict]:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            raise TraceError(f"{path} is a damaged or truncated gzip file") from None
    if not raw.strip():
        raise TraceError(f"{path} is empty")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(f"{path} is not valid JSON (truncated?): {err}") from None
    if isinstance(data, list):  # the bare-array form of the Chrome trace format
        data = {"traceEvents": data}
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceError(f"{path} is JSON but not a profiler trace (no traceEvents list)")
    return events, data


def _device_name(meta: dict) -> str | None:
    props = meta.get("deviceProperties") or []
    if props and isinstance(props, list) and isinstance(props[0], dict):
        return props[0].get("name")
    return None


def _build(path: Path, events: list[dict], meta: dict) -> Trace:
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    step_events = sorted(
        (e for e in complete if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    runtime = [e for e in complete if e.get("cat") in RUNTIME_CATEGORIES]
    by_correlation = {e.get("args", {}).get("correlation"): e for e in runtime}
    gpu_events = sorted(
        (e for e in complete if e.get("cat") in GPU_CATEGORIES),
        key=lambda e: by_correlation.get(e.get("args", {}).get("correlation"), e)["ts"],
    )

    steps = []
    for step in step_events:
        start, end = step["ts"], step["ts"] + step["dur"]
        same_thread = [
            e
            for e in complete
            if e.get("tid") == step.get("tid")
            and e.get("pid") == step.get("pid")
            and e is not step
            and start <= e["ts"] <= end
        ]
        ops = _tree([e for e in same_thread if e.get("cat") in CPU_CATEGORIES])
        calls = [e for e in runtime if start <= e["ts"] <= end]
        items = []
        for event in gpu_events:
            call = by_correlation.get(event.get("args", {}).get("correlation"))
            if call is None or not start <= call["ts"] <= end:
                continue
            launcher = _innermost(ops, call["ts"])
            item = GpuItem(
                name=event["name"],
                kind=GPU_CATEGORIES[event["cat"]],
                ts=event["ts"],
                dur=float(event["dur"]),
                runtime=call["name"],
                launcher=launcher,
                klass=classify(event["name"]),
            )
            if launcher:
                launcher.launched.append(item)
            items.append(item)
        steps.append(
            Step(
                name=step["name"],
                ts=start,
                dur=float(step["dur"]),
                cpu_ops=ops,
                runtime=[
                    RuntimeCall(e["name"], e["ts"], float(e["dur"]))
                    for e in sorted(calls, key=lambda e: e["ts"])
                ],
                gpu=items,
            )
        )
    in_steps = {
        id(c) for s in step_events for c in runtime if s["ts"] <= c["ts"] <= s["ts"] + s["dur"]
    }
    outside = [
        RuntimeCall(e["name"], e["ts"], float(e["dur"]))
        for e in sorted(runtime, key=lambda e: e["ts"])
        if id(e) not in in_steps
    ]
    return Trace(
        path=path,
        steps=steps,
        device=_device_name(meta),
        runtime_outside_steps=outside,
        has_runtime=bool(runtime),
    )


def _tree(events: list[dict]) -> list[CpuOp]:
    """Nest events by time containment (a stack sweep); returns ops in start order."""
    ops: list[CpuOp] = []
    stack: list[CpuOp] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1].end:
            stack.pop()
        op = CpuOp(
            name=e["name"],
            ts=e["ts"],
            dur=float(e["dur"]),
            depth=len(stack),
            args=e.get("args", {}),
        )
        ops.append(op)
        stack.append(op)
    return ops


def _innermost(ops: list[CpuOp], ts: float) -> CpuOp | None:
    """The deepest op whose span holds `ts`: the CPU op that issued a runtime call."""
    holding = [op for op in ops if op.ts <= ts <= op.end]
    return max(holding, key=lambda op: op.depth) if holding else None


def subtree(step: Step, op: CpuOp) -> list[CpuOp]:
    """`op` and everything nested under it, in start order."""
    start = step.cpu_ops.index(op)
    out = [op]
    for other in step.cpu_ops[start + 1 :]:
        if other.depth <= op.depth:
            break
        out.append(other)
    return out


def silent_ops(step: Step) -> list[str]:
    """CPU ops that launched no GPU work, themselves or below them (metadata ops like aten::t)."""
    names = []
    for op in step.cpu_ops:
        if not op.name.startswith("aten::"):
            continue
        if not any(o.launched for o in subtree(step, op)) and op.name not in names:
            names.append(op.name)
    return names
