"""Record the labelled set: workloads with ONE planted cause each, beside their unplanted twin,
so that what the cause costs is measured (the twin difference), never guessed.

Per workload, in one process: the planted step and its twin each timed WITHOUT the profiler
(blocks of steps queued back to back, torch.cuda.synchronize around each block; the median
block's mean per step), then each profiled with torch.profiler (schedule wait=1, warmup=1,
active=3 or 2, record_shapes=True, profile_memory where memory is the cause, with_stack=False)
and written gzipped: `<name>.json.gz` (planted), `<name>.twin.json.gz`, and `<name>.label.json`:
{cause, culprit, planted_ms (planted step minus twin step), the steps' times, device, torch,
date, command}; where memory is the cause, `planted_mib_per_step` (what stays allocated after
each step, planted minus twin). `provenance.json` lists what was recorded and what failed.

    # on the GPU (one H200; every workload, a few minutes):
    python3 -m tools.dev.labelled.record --device cuda --out /tmp/labelled
    # anywhere, tiny sizes on the CPU: the code paths, not the causes' sizes
    uv run python -m tools.dev.labelled.record --device cpu --quick --out /tmp/labelled

The CPU rank folders (gloo ranks): `python -m tools.dev.labelled.ranks` (ranks.py).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import gzip
import json
import os
import platform
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from tracereader import Parser, run

from . import device as device_workloads
from . import host as host_workloads
from .common import Ctx, Plan
from .spares import SPARES

WAIT, WARMUP = 1, 1
# host and device causes first; the compiled ones last (each step compiles: the slowest)
# (the spares last: they stand in for a workload whose plant came out too small, time allowing)
ALL = {
    **host_workloads.WORKLOADS,
    **device_workloads.WORKLOADS,
    **host_workloads.COMPILED,
    **SPARES,
}


def sync(ctx: Ctx) -> None:
    if ctx.cuda:
        torch.cuda.synchronize()


def timed(step, plan: Plan, ctx: Ctx) -> dict:
    """The step's time without the profiler: `plan.warm` steps, then `plan.blocks` blocks of
    `plan.block` steps queued back to back; per block its mean per step; the median block."""
    for _ in range(plan.warm):
        step()
    sync(ctx)
    samples = []
    for _ in range(plan.blocks):
        sync(ctx)
        start = time.perf_counter()
        for _ in range(plan.block):
            step()
        sync(ctx)
        samples.append((time.perf_counter() - start) * 1e3 / plan.block)
    return {"median_ms": statistics.median(samples), "samples_ms": [round(s, 4) for s in samples]}


def growth(step, ctx: Ctx, steps: int = 6) -> float | None:
    """MiB that stay allocated per step (the slope of memory_allocated at each step's end)."""
    if not ctx.cuda:
        return None
    ends = []
    for _ in range(steps):
        step()
        sync(ctx)
        ends.append(torch.cuda.memory_allocated() / 2**20)
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def profiled(step, plan: Plan, ctx: Ctx, path: Path) -> list[float]:
    """`step` under the profiler (the schedule above, plan.active recorded steps), written to
    `path` gzipped (level 9); returns the recorded steps' wall times, ms."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    times = []
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=plan.active),
        record_shapes=True,
        profile_memory=plan.memory,
        with_stack=False,
    ) as prof:
        for i in range(WAIT + WARMUP + plan.active):
            start = time.perf_counter()
            step()
            sync(ctx)
            if i >= WAIT + WARMUP:
                times.append(round((time.perf_counter() - start) * 1e3, 3))
            prof.step()
    raw = path.with_name(f".{path.name}.partial.json")
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return times


def versions() -> dict:
    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    for name in ("torchvision", "timm", "transformers", "triton"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    return out


def device_name(ctx: Ctx) -> str:
    if not ctx.cuda:
        return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    return torch.cuda.get_device_name()


def record_one(name: str, ctx: Ctx, out: Path, common: dict) -> dict:
    start = time.perf_counter()
    plan = ALL[name](ctx)
    setup_s = time.perf_counter() - start
    planted = timed(plan.planted, plan, ctx)
    twin = timed(plan.twin, plan, ctx)
    label = {
        "name": name,
        "trace": f"{name}.json.gz",
        "twin_trace": f"{name}.twin.json.gz",
        "cause": plan.cause,
        "culprit": plan.culprit,
        "planted_ms": round(planted["median_ms"] - twin["median_ms"], 4),
        "planted_step_ms": round(planted["median_ms"], 4),
        "twin_step_ms": round(twin["median_ms"], 4),
        "timing": {
            "planted": planted,
            "twin": twin,
            "alternatives": {k: timed(f, plan, ctx) for k, f in plan.alternatives.items()},
            "block": plan.block,
            "blocks": plan.blocks,
        },
        "what": plan.what,
    }
    if plan.memory:
        grown, kept = growth(plan.planted, ctx), growth(plan.twin, ctx)
        if grown is not None and kept is not None:
            label["planted_mib_per_step"] = round(grown - kept, 3)
    label["profiled_step_ms"] = profiled(plan.planted, plan, ctx, out / label["trace"])
    label["twin_profiled_step_ms"] = profiled(plan.twin, plan, ctx, out / label["twin_trace"])
    label["schedule"] = {"wait": WAIT, "warmup": WARMUP, "active": plan.active}
    label["record_shapes"], label["profile_memory"] = True, plan.memory
    label["extra"] = plan.extra
    label["setup_s"] = round(setup_s, 2)
    label["record_s"] = round(time.perf_counter() - start, 2)
    label.update(common)
    (out / f"{name}.label.json").write_text(json.dumps(label, indent=1) + "\n")
    return label


def cleanup(ctx: Ctx) -> None:
    torch.set_float32_matmul_precision("highest")
    gc.collect()
    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog="tools.dev.labelled.record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU, seconds)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(ALL)}")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="start no workload after this many seconds")  # fmt: skip
    args = parser.parse_args(argv)
    args.only = [n.strip() for n in args.only.split(",") if n.strip()] or list(ALL)
    unknown = sorted(set(args.only) - set(ALL))
    if unknown:
        parser.error(f"--only: unknown {unknown}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    ctx = Ctx(torch.device(args.device), args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    common = {
        "device": device_name(ctx),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python3 -m tools.dev.labelled.record", *(argv or sys.argv[1:])]),
    }
    recorded, failed, skipped = [], {}, []
    for name in args.only:
        if args.deadline_s is not None and time.perf_counter() - began > args.deadline_s:
            skipped.append(name)
            continue
        torch.manual_seed(0)
        try:
            label = record_one(name, ctx, args.out, common)
            recorded.append(name)
            print(f"{name}: planted {label['planted_step_ms']:.3f} ms, twin "
                  f"{label['twin_step_ms']:.3f} ms, difference {label['planted_ms']:.3f} ms"
                  + (f", {label['planted_mib_per_step']:.1f} MiB/step"
                     if "planted_mib_per_step" in label else "")
                  + f" ({label['record_s']:.0f} s)", flush=True)  # fmt: skip
        except Exception:  # noqa: BLE001 - one failing workload must not cost the others
            failed[name] = traceback.format_exc(limit=6)
            print(f"{name}: FAILED\n{failed[name]}", file=sys.stderr, flush=True)
        finally:
            cleanup(ctx)
    provenance = {
        **common,
        "versions": versions(),
        "cpu_count": os.cpu_count(),
        "quick": args.quick,
        "recorded": recorded,
        "failed": failed,
        "skipped_for_time": skipped,
        "seconds": round(time.perf_counter() - began, 1),
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
