"""The shape sweep's output: a progress line per shape, the table, a CSV and a PNG plot."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, fields
from pathlib import Path

from common.outputs import atomic


def _compile_note(row) -> str:
    if row.limit_hit and not row.ran_compiled:
        return "RECOMPILE LIMIT HIT: ran eagerly"
    if row.ran_compiled is False:
        return "NOT COMPILED: ran eagerly"
    if row.compiles:
        return f"{row.compiles} compile{'s' if row.compiles > 1 else ''} ({row.compile_s:.1f} s)"
    return "cache hit" if row.ran_compiled else "-"


def progress(row) -> str:
    geglu = f", GeGLU kernels {row.geglu_us:.1f} us" if row.geglu_us is not None else ""
    return (
        f"{row.variant:<15} {row.batch}x{row.seq} h{row.hidden}: {_compile_note(row)}, "
        f"forward {row.forward_us:.1f} us (queued {row.queued_us:.1f}){geglu}"
    )


def table(rows, *, limit: int, device: str) -> str:
    head = (
        f"{'variant':<15} {'batch x seq':>11} {'hidden':>6} {'compile':<34} "
        f"{'forward us':>10} {'p20-p80':>15} {'queued us':>9} {'GeGLU us':>9}"
    )
    lines = [f"shape sweep on {device}; Dynamo recompile_limit = {limit}", head, "-" * len(head)]
    for r in rows:
        geglu = f"{r.geglu_us:9.1f}" if r.geglu_us is not None else f"{'-':>9}"
        spread = f"{r.p20_us:.1f}-{r.p80_us:.1f}"
        lines.append(
            f"{r.variant:<15} {f'{r.batch}x{r.seq}':>11} {r.hidden:>6} "
            f"{_compile_note(r):<34} {r.forward_us:10.1f} {spread:>15} {r.queued_us:9.1f} {geglu}"
        )
    fell_back = [r for r in rows if r.ran_compiled is False]
    totals = {}
    for r in rows:
        totals.setdefault(r.variant, [0, 0.0])
        totals[r.variant][0] += r.compiles
        totals[r.variant][1] += r.compile_s
    lines.append(
        "compiles per variant: " + ", ".join(f"{v} {n} ({s:.1f} s)" for v, (n, s) in totals.items())
    )
    if fell_back:
        lines.append(
            f"WARNING: {len(fell_back)} 'compiled' row(s) ran eagerly (recompile limit "
            f"{limit}); their times are eager times, not compiled ones"
        )
    return "\n".join(lines)


def _csv(rows) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(rows[0])])
    writer.writeheader()
    for r in rows:
        writer.writerow(asdict(r))
    return out.getvalue()


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    with_kernels = any(r.geglu_us is not None for r in rows)
    fig, axes = plt.subplots(1, 3 if with_kernels else 2, figsize=(18 if with_kernels else 12, 4.8))
    ax_time, ax_compile = axes[0], axes[1]
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant]
        labels = [
            f"{r.batch}x{r.seq}" + ("" if r.hidden == mine[0].hidden else f"\nh{r.hidden}")
            for r in mine
        ]
        line = ax_time.plot(labels, [r.forward_us for r in mine], marker="o", label=variant)[0]
        ax_time.plot(labels, [r.queued_us for r in mine], linestyle=":", color=line.get_color())
        ax_compile.plot(labels, [r.compile_s for r in mine], marker="o", label=variant)
        if with_kernels:
            axes[2].plot(labels, [r.geglu_us for r in mine], marker="o", label=variant)
        for i, r in enumerate(mine):
            if r.ran_compiled is False:
                ax_time.annotate("eager!", (i, r.forward_us), color="red")
    ax_time.set(
        title="forward, no profiler (solid: one call; dotted: queued)",
        ylabel="us",
        xlabel="batch x seq",
    )
    ax_compile.set(title="Dynamo compile time at each new shape", ylabel="s", xlabel="batch x seq")
    if with_kernels:
        axes[2].set(
            title="GeGLU kernels between the GEMMs (GPU time)", ylabel="us", xlabel="batch x seq"
        )
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def write(folder: Path, tag: str, rows, table_text: str) -> list[Path]:
    finals = [folder / f"{tag}.txt", folder / f"{tag}.csv", folder / f"{tag}.png"]
    with atomic(*finals) as (txt, csv_path, png):
        txt.write_text(table_text + "\n")
        csv_path.write_text(_csv(rows))
        _plot(rows, png)
    return finals
