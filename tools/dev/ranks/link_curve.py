"""The link between this machine's GPUs, measured at every message size: bus bandwidth of
all-reduce, all-gather and reduce-scatter from 1 MiB to 1 GiB (doubling), nccl-tests' way,
one process per GPU under torchrun. Rank 0 prints the table and writes a CSV and a PNG plot
into OUT_DIR, and caches the curve (~/.cache/profiling-pytorch/links.json) for the lessons'
readings, which judge each collective against the curve at its own size and kind.

    uv run torchrun --nproc-per-node 2 -m tools.dev.ranks.link_curve docs/        # two GPUs
    uv run torchrun --nproc-per-node 4 -m tools.dev.ranks.link_curve OUT --max-mib 256
    uv run torchrun --nproc-per-node 2 -m tools.dev.ranks.link_curve OUT --device cpu --max-mib 4
                                                                                # gloo ranks

About 20 s for the three kinds at N = 2 to 8 on NVLink (most of it the 1 GiB calls).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from common import cli, torchrun
from common.measuring import link
from tracereader import LINK_KINDS, LinkCurve, cache_path, link_curve_key, load_cache

SCRIPT = "-m tools.dev.ranks.link_curve"


mib = cli.size_up_to(16384, "MiB", low=1 / 1024)  # --min-mib, --max-mib


def parse(argv):
    parser = cli.Parser(prog="link_curve.py", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("out", type=Path, help="folder for the CSV and the PNG (rank 0 writes)")
    parser.add_argument("--min-mib", type=mib, default=1.0, help="smallest size (default: 1)")
    parser.add_argument("--max-mib", type=mib, default=1024.0, help="largest size (default: 1024)")
    parser.add_argument("--kinds", default=",".join(LINK_KINDS),
                        help="comma-separated, of: " + ", ".join(LINK_KINDS))  # fmt: skip
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="cpu: gloo ranks (a smoke test: loopback is no link)")  # fmt: skip
    torchrun.add_flags(parser)
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    if bad := [k for k in kinds if k not in LINK_KINDS]:
        raise cli.UsageError(f"unknown collective kind: {', '.join(bad)}")
    if args.min_mib > args.max_mib:
        raise cli.UsageError(f"--min-mib {args.min_mib:g} is above --max-mib {args.max_mib:g}")
    # Before the measuring (20 s of every GPU): OUT, or the nearest folder above it that is
    # there, must be a folder; a file there would fail the writing only after it.
    there = next(p for p in (args.out, *args.out.absolute().parents) if os.path.lexists(p))
    if not there.is_dir():
        raise cli.UsageError(f"OUT {args.out}: {there} is not a folder")
    args.kinds, args.dtype, args.seed, args.compile = tuple(kinds), "bf16", 0, False
    return args


def plot(curve: LinkCurve, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, points in curve.points.items():
        ax.plot([b / 2**20 for b, _ in points], [v / 1e9 for _, v in points], marker="o",
                label=kind)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (MiB, the whole buffer)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{curve.device}, {curve.world} ranks, {curve.backend}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = png.with_name(f".{png.name}.{os.getpid()}.partial")
    try:
        fig.savefig(tmp, dpi=110, format="png")
        tmp.replace(png)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)  # gone once renamed; a half file where the write failed


def write_whole(path: Path, text: str) -> None:
    """`text` into path through a temporary name, renamed into place: a reader sees the old
    file or the new one, and a write that fails (a full disk) leaves no half file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def cache(curve: LinkCurve) -> Path:
    """The curve into the lessons' cache (tracereader's links.json), for their readings. Not
    through store_link_curve: that skips a cache it cannot write, and this tool's user asked
    for it, so a full disk is said (one line, exit 2), not passed over."""
    file = cache_path("links.json")
    entries = load_cache(file)
    entries[link_curve_key(curve.device, curve.backend, curve.world)] = curve.to_csv()
    file.parent.mkdir(parents=True, exist_ok=True)
    write_whole(file, json.dumps(entries, indent=2))
    return file


def main(argv=None) -> int:
    args = parse(argv)
    launch = torchrun.launched(SCRIPT, argv)
    run = torchrun.resolve(args, launch)
    if launch.world < 2:
        raise cli.UsageError("the link joins two ranks or more: launch with --nproc-per-node 2+")
    group = torchrun.init_process_group(run, launch, timeout_s=args.timeout)
    name = torch.cuda.get_device_name(run.device) if run.on_gpu else "CPU"
    say = print if launch.rank == 0 else None
    curve = link.measure(
        run, world=group.world, backend=group.backend, device_name=name, kinds=args.kinds,
        low=int(args.min_mib * 2**20), high=int(args.max_mib * 2**20), progress=say,
    )  # fmt: skip
    if launch.rank != 0:
        return 0
    slug = "".join(c if c.isalnum() else "_" for c in f"{name}_{group.backend}_n{group.world}")
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"link_curve_{slug}.csv"
    write_whole(csv_path, curve.to_csv())
    plot(curve, csv_path.with_suffix(".png"))
    try:
        cached = cache(curve)
    except OSError as err:  # the measurement is kept: the line says where
        raise cli.UsageError(
            f"cannot write the lessons' cache {cache_path('links.json')}: {err.strerror or err} "
            f"(the curve is in {csv_path})"
        ) from None
    print(f"curve: {csv_path} and {csv_path.with_suffix('.png')}; cached in {cached}")
    return 0


if __name__ == "__main__":
    sys.exit(torchrun.run_main(main))
