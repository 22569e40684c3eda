"""Where a training step's memory goes: one step profiled with the profiler's memory events
(categories: parameters, gradients, optimizer state, activations, temporaries), drawn over
time with the phases marked, its peak per phase, and on a GPU the allocator's own history.

The categories come from torch.profiler's memory profile (`profile(profile_memory=True,
record_shapes=True, with_stack=True)`), which tells a tensor's role from the autograd graph
and the optimizer; it works on a CPU too. The allocator's history
(`torch.cuda.memory._record_memory_history`, then `_dump_snapshot`) is CUDA-only: its
.pickle opens at https://pytorch.org/memory_viz (which needs a network; the PNG does not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import profile
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

from common import outputs, profiling
from common.cli import Run

NAMES = {  # torch's categories, in the order it indexes them, as the lesson names them
    "PARAMETER": "parameters",
    "OPTIMIZER_STATE": "optimizer state",
    "INPUT": "inputs",
    "TEMPORARY": "temporary",
    "ACTIVATION": "activations",
    "GRADIENT": "gradients",
    "AUTOGRAD_DETAIL": "autograd detail",
}
CATEGORIES = [NAMES.get(c.name, "unknown") if c else "unknown" for c in _CATEGORY_TO_INDEX]
WITHIN = 0.10  # the arithmetic and the measurement agree within this share


@dataclass(frozen=True)
class StepMemory:
    times_us: list[float]  # from the step's start
    sizes: list[list[int]]  # bytes per category (CATEGORIES' order) at each time
    phases: list[tuple[str, float, float]]  # (name, start, end) in us from the step's start

    def largest(self, category: str) -> int:
        i = CATEGORIES.index(category)
        return max((s[i] for s in self.sizes), default=0)

    def peak(self, start: float = float("-inf"), end: float = float("inf")) -> int:
        pairs = zip(self.times_us, self.sizes, strict=True)
        return max((sum(s) for t, s in pairs if start <= t <= end), default=0)


def record(step: Callable[[], object], run: Run, phases: tuple[str, ...], snapshot: Path | None):
    """Profile one step with its memory events; on a GPU also record the allocator's history
    into `snapshot` (a .pickle)."""
    if snapshot is not None:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    try:
        with profile(
            activities=profiling.activities(run),
            record_shapes=True,
            profile_memory=True,
            with_stack=True,  # all three are what the memory profile needs to categorize
        ) as prof:
            step()
            profiling.synchronize(run)
        if snapshot is not None:
            torch.cuda.memory._dump_snapshot(str(snapshot))
    finally:
        if snapshot is not None:
            torch.cuda.memory._record_memory_history(enabled=None)
    device = str(run.device) if run.device.type == "cpu" else f"cuda:{torch.cuda.current_device()}"
    times, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(device)
    spans = [(e.name(), e.start_ns() / 1e3, e.end_ns() / 1e3)  # the host's: a GPU copy too
             for e in prof.profiler.kineto_results.events()
             if e.name() in phases and e.device_type() == DeviceType.CPU]  # fmt: skip
    start = min((s for _, s, _ in spans), default=times[0] if times else 0)
    return StepMemory(
        [t - start for t in times],
        [s[1:] for s in sizes],  # torch's first column is unused
        sorted(((name, s - start, e - start) for name, s, e in spans), key=lambda p: p[1]),
    )


def plot(memory: StepMemory, path: Path, title: str) -> None:
    """Allocated memory over the step, stacked by category, the phases shaded."""
    fig = draw(memory, title)
    fig.savefig(path, format="png", dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def draw(memory: StepMemory, title: str):
    """The figure `plot` saves (returned open, for the tests to measure its labels)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    mib = [[b / 2**20 for b in s] for s in memory.sizes]
    shown = [i for i in range(len(CATEGORIES)) if any(row[i] for row in mib)]
    ax.stackplot(
        [t / 1e3 for t in memory.times_us],
        *[[row[i] for row in mib] for i in shown],
        labels=[CATEGORIES[i] for i in shown],
        step="post",
    )
    labels = []
    for k, (name, start, end) in enumerate(memory.phases):
        ax.axvspan(start / 1e3, end / 1e3, color="grey", alpha=0.08 + 0.08 * (k % 2))
        labels.append(ax.text((start + end) / 2e3, 1.0, name, ha="center", va="bottom",
                              transform=ax.get_xaxis_transform()))  # fmt: skip
    ax.set_xlabel("ms from the step's start")
    ax.set_ylabel("allocated MiB")
    rows = stagger(fig, labels)
    ax.set_title(title, pad=18 + 12 * (rows - 1))  # above the highest row of labels
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    stagger(fig, labels)  # tight_layout moved the axes: place the labels again
    return fig


def stagger(fig, labels) -> int:
    """Lift a phase label into the next row above the axes wherever it would overlap a label
    already placed in its row: at small shapes the backward and optimizer phases are a few
    pixels wide and their centred names land on top of each other. Returns the rows used."""
    renderer = fig.canvas.get_renderer()
    for text in labels:
        text.set_y(1.0)
    placed: list[list] = []  # per row, the boxes (in pixels) of the labels in it
    for text in labels:
        row = 0
        while True:
            text.set_y(1.0 + 0.07 * row)
            box = text.get_window_extent(renderer).expanded(1.05, 1.0)
            if row == len(placed):
                placed.append([])
            if not any(box.overlaps(other) for other in placed[row]):
                placed[row].append(box)
                break
            row += 1
    return max(len(placed), 1)


def report(memory: StepMemory, arithmetic: dict[str, int]) -> bool:
    """Print the peak per phase and each category's largest size against the arithmetic;
    True when every category the arithmetic covers agrees within WITHIN."""
    mib = 2**20
    print(f"memory of one step (the profiler's memory events): peak {memory.peak() / mib:.2f} MiB")
    for name, start, end in memory.phases:
        print(f"  peak during {name:<10} {memory.peak(start, end) / mib:10.2f} MiB")
    ok = True
    for category, expected in arithmetic.items():
        seen = memory.largest(category)
        off = abs(seen - expected) / max(expected, 1)
        ok &= off <= WITHIN
        print(f"  {category:<16} {seen / mib:10.3f} MiB, arithmetic {expected / mib:10.3f} MiB "
              f"({'ok' if off <= WITHIN else 'OFF'}: {off:.0%} apart)")  # fmt: skip
    return ok


def write(memory: StepMemory, png: Path, snapshot_tmp: Path | None, title: str) -> None:
    """The PNG (and the snapshot already dumped) published together, or neither."""
    finals = [png] + ([png.with_suffix(".pickle")] if snapshot_tmp else [])
    with outputs.publishing(*finals) as tmps:
        plot(memory, tmps[0], title)
        if snapshot_tmp:
            snapshot_tmp.replace(tmps[1])
    for path in finals:
        print(f"memory: {path}")
