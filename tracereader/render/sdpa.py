"""04_c's comparison table of SDPA backends (analyses.sdpa's rows): formats, computes nothing."""

from __future__ import annotations

from tracereader.analyses.sdpa import Row


def comparison(rows: list[Row], title: str, *, on_gpu: bool) -> str:
    """The summary table, one row per backend; a CPU run keeps only the CPU time."""
    columns = [
        ("backend", lambda r: r.backend),
        ("kernels", lambda r: r.kernels),
        ("GPU us", lambda r: r.gpu_us),
        ("CPU us", lambda r: r.cpu_us),
        ("occupancy", lambda r: r.occupancy + ("*" if r.occupancy_unmeasured else "")),
        ("main kernel", lambda r: r.main_kernel),
        ("status", lambda r: r.status),
    ]
    if not on_gpu:
        columns = [c for c in columns if c[0] in ("backend", "CPU us", "status")]
    cells = [[head for head, _ in columns]] + [[cell(r) for _, cell in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [title]
    for line in cells:
        lines.append(
            "  " + "  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        )
    if any(r.occupancy_unmeasured for r in rows):
        lines.append(
            "  * launched with cuLaunchKernelEx(C): the profiler reports no achieved occupancy for "
            "such launches; estimate it from the kernel's registers, shared memory and block size"
        )
    if not on_gpu:
        lines.append("  (a CPU run: kernels, GPU time and occupancy need a CUDA GPU)")
    return "\n".join(lines)
