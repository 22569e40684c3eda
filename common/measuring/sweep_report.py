"""The shape sweep's output: a progress line per shape, a CSV written row by row, and at the
end the table and a PNG plot.

Three times per row, because at small shapes they disagree: the GPU time of the forward's
kernels (profiled), the host's time to issue one call, and the per-call time of calls queued
back to back, which is the larger of the two plus whatever gaps remain. Beside them, the
kernels a forward runs and the launch calls the host makes for them (a CUDA graph replays its
kernels from one launch), and the GPU time of the part that fusion changes: gate, up and the
GeGLU, with the GeGLU's own kernels apart where it has any.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, fields
from pathlib import Path

from common.outputs import publishing
from tracereader import cell


class RowWriter:
    """Append rows to a CSV as they complete, flushed, so a stopped sweep keeps them."""

    def __init__(self, path: Path, row_type):
        self.path = path
        self._names = [f.name for f in fields(row_type)]
        self._file = None
        self._writer = None

    def __enter__(self):
        return self

    def write(self, row) -> None:
        if self._file is None:  # created at the first row: a sweep that measured nothing
            self._file = self.path.open("w", newline="")  # leaves no empty CSV
            self._writer = csv.DictWriter(self._file, fieldnames=self._names)
            self._writer.writeheader()
        self._writer.writerow(asdict(row))
        self._file.flush()

    def __exit__(self, *exc):
        if self._file is not None:
            self._file.close()
        return False


def _compile_note(row) -> str:
    if row.limit_hit and not row.ran_compiled:
        return "RECOMPILE LIMIT HIT: ran eagerly"
    if row.ran_compiled is False:
        return "NOT COMPILED: ran eagerly"
    if row.compiles:
        return f"{row.compiles} compile{'s' if row.compiles > 1 else ''} ({row.compile_s:.1f} s)"
    return "cache hit" if row.ran_compiled else "-"


def _launches(row) -> str:
    if row.launches is None:
        return "-"
    return f"{row.launches} (graph)" if row.replayed else str(row.launches)


def _geglu(row) -> str:
    """The GeGLU kernels' time; "in GEMM" where the GeGLU is a GEMM's epilogue (the fused
    kernel: no kernel of its own, its time is in gate/up+GeGLU)."""
    if row.geglu_us is None and row.gpu_us is not None:
        return "in GEMM"
    return cell(row.geglu_us)


def _bound(row) -> str:
    """Which side sets the queued time: the host's dispatch or the GPU's kernels."""
    if row.host_us is None or row.gpu_us is None:
        return "-"
    return "host" if row.host_us > row.gpu_us else "GPU"


def progress(row) -> str:
    times = f"queued {row.queued_us:.1f} us"
    if row.gpu_us is not None:
        launches = f"{row.launches} launch{'es' if row.launches != 1 else ''}"
        if row.replayed:
            launches += ", replayed from a CUDA graph"
        elif row.replayed is False:
            launches += ", NO CUDA GRAPH LAUNCHED"
        geglu = (
            "GeGLU in the GEMM's epilogue"
            if row.geglu_us is None
            else f"GeGLU kernels {row.geglu_us:.1f} us"
        )
        times += (
            f" (GPU {row.gpu_us:.1f} in {row.kernels} kernels from {launches}, "
            f"host {cell(row.host_us)}), gate/up+GeGLU {cell(row.gate_up_geglu_us)} us, {geglu}"
        )
    return f"{row.variant:<15} {row.batch}x{row.seq} h{row.hidden}: {_compile_note(row)}, {times}"


def table(rows, *, limit: int, device: str, stopped: tuple[int, int] | None = None) -> str:
    head = (
        f"{'variant':<15} {'batch x seq':>11} {'hidden':>6} {'compile':<34} "
        f"{'queued us':>9} {'p20-p80':>13} {'GPU us':>8} {'host us':>8} {'bound':>5} "
        f"{'kernels':>7} {'launches':>9} {'gate/up+GeGLU us':>16} {'GeGLU us':>8}"
    )
    lines = [f"shape sweep on {device}; Dynamo recompile_limit = {limit}", head, "-" * len(head)]
    for r in rows:
        spread = f"{r.p20_us:.1f}-{r.p80_us:.1f}"
        lines.append(
            f"{r.variant:<15} {f'{r.batch}x{r.seq}':>11} {r.hidden:>6} {_compile_note(r):<34} "
            f"{r.queued_us:9.1f} {spread:>13} {cell(r.gpu_us):>8} {cell(r.host_us):>8} "
            f"{_bound(r):>5} {r.kernels or '-':>7} {_launches(r):>9} "
            f"{cell(r.gate_up_geglu_us):>16} {_geglu(r):>8}"
        )
    lines.append(
        "queued: per call with calls issued back to back (what a loop gets); GPU: the "
        "forward's kernels (profiled); host: time to issue one call. Where host > GPU the "
        "queued time is the host's, not the kernels'."
    )
    if any(r.gpu_us is not None for r in rows):
        lines.append(
            "kernels: GPU work per forward, CUDA graph replays included (CUPTI records a "
            "graph's kernels); launches: the host's launch calls per forward, a graph launch "
            "counting one ('(graph)': the kernels are replayed from a CUDA graph, after a copy "
            "of x into the graph's static input)."
        )
        lines.append(
            "gate/up+GeGLU: the kernels from the gate GEMM up to the down GEMM, comparable "
            "across variants; GeGLU: the kernels between the GEMMs alone. 'in GEMM': fused has "
            "none, its GeGLU is the gate/up GEMM's epilogue and its one kernel's whole time is "
            "in gate/up+GeGLU."
        )
    totals: dict[str, list] = {}
    for r in rows:
        totals.setdefault(r.variant, [0, 0.0])
        totals[r.variant][0] += r.compiles
        totals[r.variant][1] += r.compile_s
    lines.append(
        "compiles per variant: " + ", ".join(f"{v} {n} ({s:.1f} s)" for v, (n, s) in totals.items())
    )
    fell_back = [r for r in rows if r.ran_compiled is False]
    if fell_back:
        lines.append(
            f"WARNING: {len(fell_back)} 'compiled' row(s) ran eagerly (recompile limit "
            f"{limit}); their times are eager times, not compiled ones"
        )
    not_replayed = [r for r in rows if r.replayed is False]
    if not_replayed:
        lines.append(
            f"WARNING: {len(not_replayed)} CUDA-graph row(s) launched no CUDA graph in the "
            "profiled calls: Inductor skipped CUDA graphs (TORCH_LOGS=perf_hints says why) and "
            "their times are plain compiled times, or the profiler did not record the graph "
            "launch (then 'kernels' still shows the replayed kernels)"
        )
    if stopped:
        lines.append(f"STOPPED after {stopped[0]} of {stopped[1]} rows: the rest were not measured")
    return "\n".join(lines)


NOISY_LABEL = "noisy: repeats disagree (machine busy)"


def _plot(rows, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(rows)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def figure(rows):
    """The sweep's plot: time per call, compile time and (on a GPU) host time per shape, one
    line per variant; a noisy row's time (its repeats disagreed: a busy machine) ringed."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    on_gpu = any(r.gpu_us is not None for r in rows)
    fig, axes = plt.subplots(1, 3 if on_gpu else 2, figsize=(18 if on_gpu else 12, 4.8))
    ax_time, ax_compile = axes[0], axes[1]
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant]
        labels = [_x(r, rows) for r in mine]
        line = ax_time.plot(labels, [r.queued_us for r in mine], marker="o", label=variant)[0]
        if on_gpu:
            ax_time.plot(labels, [r.gpu_us for r in mine], linestyle=":", color=line.get_color())
            axes[2].plot(labels, [r.host_us for r in mine], marker="o", label=variant)
        ax_compile.plot(labels, [r.compile_s for r in mine], marker="o", label=variant)
        for i, r in enumerate(mine):
            if r.ran_compiled is False:
                ax_time.annotate("eager!", (i, r.queued_us), color="red")
    # a noisy row's point ringed, not dropped: its median still stands, but one burst of load
    # set two rows of 100 us to 45 ms before (issue 43), and a line's jump reads as the code's
    noisy = [r for r in rows if r.noisy]
    if noisy:
        ax_time.plot(
            [_x(r, rows) for r in noisy],
            [r.queued_us for r in noisy],
            linestyle="none",
            marker="o",
            markersize=12,
            markerfacecolor="none",
            markeredgecolor="red",
            label=NOISY_LABEL,
        )
    ax_time.set(
        title="forward per call, queued (solid); GPU kernels (dotted)",
        ylabel="us",
        xlabel="batch x seq",
    )
    ax_compile.set(title="Dynamo compile time at each new shape", ylabel="s", xlabel="batch x seq")
    if on_gpu:
        axes[2].set(title="host time to issue one call", ylabel="us", xlabel="batch x seq")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _x(row, rows) -> str:
    """A row's place on the x axis: its shape, and its hidden size where its variant's first
    row has another (the --hidden-change row)."""
    first = next(r for r in rows if r.variant == row.variant)
    return f"{row.batch}x{row.seq}" + ("" if row.hidden == first.hidden else f"\nh{row.hidden}")


def write(folder: Path, tag: str, rows, table_text: str) -> list[Path]:
    """The table and the plot, published together (the CSV is already on disk)."""
    finals = [folder / f"{tag}.txt", folder / f"{tag}.png"]
    with publishing(*finals) as (txt, png):
        txt.write_text(table_text + "\n")
        _plot(rows, png)
    return finals
