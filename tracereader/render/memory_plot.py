"""The memory reading drawn (`explain --memory`): allocated memory over the trace, one panel
per device (GPUs first, the CPU's allocations apart), the reserved total dashed, the steps
marked by lines and the phases shaded, the peak dotted. matplotlib is imported here only, and
only when a plot is drawn: the reader starts without it."""

from __future__ import annotations

PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}


def _unit(peak: int) -> tuple[str, int]:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if peak >= scale:
            return unit, scale
    return "bytes", 1


def draw(reading: dict, out, title: str) -> None:
    """Write the PNG of `reading` (analyses.memory.read) to `out`, a binary file."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    devices, steps = reading["devices"], reading["steps"]
    origin = steps[0]["ts"] if steps else min(d["timeline"][0][0] for d in devices)
    fig, axes = plt.subplots(
        len(devices), 1, figsize=(11, 3.6 * len(devices) + 0.6), sharex=True, squeeze=False
    )
    for ax, d in zip(axes[:, 0], devices, strict=True):
        ts, allocated, reserved = d["timeline"]
        unit, scale = _unit(max(max(reserved), max(allocated)))
        x = [(t - origin) / 1e3 for t in ts]
        for k, s in enumerate(steps):
            ax.axvline((s["ts"] - origin) / 1e3, color="black", lw=0.8, alpha=0.6)
            ax.text((s["ts"] - origin) / 1e3, 1.0, f" {s['step']}", ha="left", va="bottom",
                    fontsize="small", transform=ax.get_xaxis_transform())  # fmt: skip
            for phase, a, b in s["phases"]:
                color = PHASE_COLORS.get(phase, "grey")
                label = phase if k == 0 else None
                ax.axvspan((a - origin) / 1e3, (b - origin) / 1e3, color=color, alpha=0.1,
                           label=label, lw=0)  # fmt: skip
        if steps:
            ax.axvline((steps[-1]["end"] - origin) / 1e3, color="black", lw=0.8, alpha=0.6)
        if any(reserved):  # the CPU's allocator reserves nothing it reports
            ax.plot(x, [b / scale for b in reserved], drawstyle="steps-post", color="grey",
                    ls="--", lw=0.9, label="reserved")  # fmt: skip
        ax.plot(x, [b / scale for b in allocated], drawstyle="steps-post", color="tab:red",
                lw=1.2, label="allocated")  # fmt: skip
        peak = d["peak"]
        px, py = (peak["ts"] - origin) / 1e3, peak["bytes"] / scale
        ax.plot([px], [py], "o", color="black", ms=4)
        label = f"peak {py:.2f} {unit}" if scale > 1 else f"peak {peak['bytes']} bytes"
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(6, -12),
                    fontsize="small")  # fmt: skip
        ax.set_ylabel(f"{d['device']}: {unit}")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower right", fontsize="small", ncol=5)
    axes[-1, 0].set_xlabel("ms from the first step's start" if steps else "ms")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(out, format="png", dpi=110)
    plt.close(fig)
