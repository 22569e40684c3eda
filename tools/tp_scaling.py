"""Does splitting the GeGLU MLP over N GPUs make its forward faster? 05_tp_mlp.py with --bench
at N = 1, 2, 4, 8 and every GPU of the machine (as many as it has), at the post's shape and at
one 8x larger, eager and compiled; one table at the end, a CSV and each run's log beside it.

    uv run python -m tools.tp_scaling OUT_DIR                      # every GPU of this machine
    uv run python -m tools.tp_scaling OUT_DIR --ranks 1,2,3,6 --modes eager
    uv run python -m tools.tp_scaling OUT_DIR --ranks 4 --shapes tiny --device cpu  # gloo
    PYTHON=python3 python3 -m tools.tp_scaling OUT_DIR             # without uv
    uv run python -m tools.tp_scaling OUT_DIR --dry-run            # the commands only

The 8x shape widens the model (dim 2048, hidden 9216: 8x the weights and GEMM FLOPs of dim
768, hidden 3072) at the same tokens, so the all-reduce (tokens x dim) grows only 2.7x: the
GEMMs it splits gain on the communication it adds. Each run is `torchrun --standalone`
(a free port each time), with the environment passed through as it is (NCCL settings
included). On a machine with 2 H200s the whole set takes about 5 minutes; a run that passes
--run-timeout is stopped, reported, and the rest go on.

Columns: the forward's time per call (the slowest rank, calls queued), speedup against N=1 of
the same shape and mode, the all-reduce alone and its bus bandwidth, and from the traces the
communication per step and the part of it no compute hides (exposed), averaged over ranks.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tracereader import Parser, Stopped, interrupted, read_run, run, runs_at, size_up_to

ROOT = Path(__file__).resolve().parent.parent

SHAPES = {
    "post": ["--batch", "64", "--seq", "128", "--dim", "768", "--hidden", "3072"],
    "8x": ["--batch", "64", "--seq", "128", "--dim", "2048", "--hidden", "9216"],
    "tiny": ["--batch", "2", "--seq", "4", "--dim", "16", "--hidden", "32"],  # a smoke test
}
MODES = {"eager": [], "compile": ["--compile"]}
SUMMARY = re.compile(r"^tp-scaling: (.*)$", re.MULTILINE)
RUN_LINE = re.compile(r"^all ranks, side by side: (.+)$", re.MULTILINE)  # ends with the stem
COLUMNS = (
    "shape",
    "mode",
    "ranks",
    "forward_us",
    "speedup",
    "host_us",
    "allreduce_us",
    "bus_GBps",
    "link_GBps",
    "comm_us",
    "exposed_us",
    "seconds",
    "status",
)


def parse_summary(stdout: str) -> dict[str, float]:
    """The `tp-scaling: key=value ...` line 05_tp_mlp.py --bench prints on rank 0."""
    found = SUMMARY.findall(stdout)
    if not found:
        return {}
    values = {}
    for pair in found[-1].split():
        key, _, value = pair.partition("=")
        try:
            values[key] = float(value)
        except ValueError:
            continue
    return values


def traced(stdout: str) -> dict[str, float]:
    """Communication and exposed communication per step, from the run's rank traces."""
    found = RUN_LINE.findall(stdout)
    if not found:
        return {}
    stem = Path(shlex.split(found[-1])[-1])
    runs = runs_at(stem)
    if stem not in runs:
        return {}
    reading = read_run(stem, runs[stem])
    rows = reading["per_rank"]
    out = {}
    for key in ("comm_us", "exposed_us"):
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            out[key] = sum(values) / len(values)
    return out


def gpu_count(python: list[str]) -> int:
    probe = [*python, "-c", "import torch; print(torch.cuda.device_count())"]
    try:
        return int(subprocess.run(probe, capture_output=True, text=True, timeout=120).stdout)
    except (ValueError, subprocess.SubprocessError, OSError):
        return 0


def command(
    python: list[str], n: int, shape: str, mode: str, traces: Path, device: str = "auto"
) -> list[str]:
    return [
        *python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(n),
        str(ROOT / "05_tp_mlp.py"),
        *SHAPES[shape],
        *MODES[mode],
        "--bench",
        "--strict",  # a run whose trace breaks its guess exits 3: its row says so
        "--device",
        device,
        "--traces-dir",
        str(traces),
    ]


MAX_RUN_TIMEOUT_S = 7 * 24 * 3600  # a week: past it, no launch of 05 is still worth waiting for
STOP_GRACE_S = 30  # what torchrun gets after SIGTERM to stop its workers, before SIGKILL


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a launch's whole process group (torchrun and its workers): SIGTERM, then SIGKILL
    to what is still there after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue


def run_one(argv: list[str], log: Path, timeout_s: float) -> tuple[int | None, str, float]:
    """Run one launch in its own process group. A timeout stops torchrun and its workers; so
    does anything else that ends the wait (Ctrl-C, an error here), before it goes on up."""
    start = time.monotonic()
    with open(log, "w") as err:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
        try:
            stdout, _ = proc.communicate(timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            stop(proc)
            stdout, code = "", None
        except BaseException:
            stop(proc)  # no torchrun left running behind the exception
            raise
    log.with_suffix(".out").write_text(stdout)
    return code, stdout, time.monotonic() - start


def _cell(value) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if value < 100 else f"{value:.1f}"
    return str(value)


def rank_counts(text: str) -> list[int]:
    """--ranks: comma-separated numbers of ranks, each at least 1."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of N") from None
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every N must be at least 1")
    return counts


def default_counts(gpus: int) -> list[int]:
    """1, 2, 4, 8 up to the GPUs and the GPU count itself; on the CPU (gloo), 1 and 2."""
    top = gpus or 2
    return sorted({n for n in (1, 2, 4, 8) if n <= top} | {top})


def hidden(shape: str) -> int:
    return int(SHAPES[shape][SHAPES[shape].index("--hidden") + 1])


def main(argv: list[str] | None = None) -> int:
    return run(lambda: scale(argv), known=_launch_stopped)


def _launch_stopped(err: BaseException) -> tuple[int, str] | None:
    """Ctrl-C (SIGTERM, SIGHUP) reached run_one, which stopped the running launch first."""
    stop = interrupted(err)
    if stop is None:
        return None
    how = f"stopped by {stop}" if isinstance(stop, Stopped) else "interrupted (Ctrl-C)"
    return 130, f"{how}; the running launch was stopped"


# long: the parser's flags, then the launch per rank count and its table
def scale(argv: list[str] | None) -> int:
    parser = Parser(prog="tp_scaling.py", description=__doc__)
    parser.add_argument("out", type=Path, help="folder for the table, the CSV, logs and traces")
    parser.add_argument(
        "--ranks",
        type=rank_counts,
        help="comma-separated N, any N the shapes' hidden splits over (default: 1, 2, 4, 8 "
        "and the GPU count, up to the GPUs; 1 and 2 on a CPU)",
    )
    parser.add_argument("--shapes", default="post,8x", help="of: " + ", ".join(SHAPES))
    parser.add_argument("--modes", default="eager,compile", help="of: " + ", ".join(MODES))
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="passed to 05_tp_mlp.py; cpu: gloo ranks on the CPU (default: auto)",
    )
    parser.add_argument(
        "--run-timeout",
        type=size_up_to(MAX_RUN_TIMEOUT_S, "seconds"),  # nan, inf, 0, -1: never as meant
        default=240,
        help="seconds per launch, finite and above 0; a launch past it is stopped, reported, "
        "and the rest go on (default: 240)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the runs start in the repository
    python = shlex.split(os.environ.get("PYTHON", "")) or [sys.executable]
    shapes, modes = args.shapes.split(","), args.modes.split(",")
    unknown = [s for s in shapes if s not in SHAPES] + [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown shape or mode: {', '.join(unknown)}")
    gpus = 0 if args.device == "cpu" or args.dry_run else gpu_count(python)
    counts = sorted(set(args.ranks or default_counts(gpus)))  # N=1 first: the speedups' base
    if gpus and max(counts) > gpus:
        parser.error(f"--ranks {max(counts)}: this machine has {gpus} GPU(s), one per rank")
    for shape in shapes:
        for n in counts:
            if hidden(shape) % n:
                parser.error(f"the {shape} shape's hidden {hidden(shape)} does not split over {n}")
    traces = args.out / "traces"
    plan = [(s, m, n) for s in shapes for m in modes for n in counts]
    if args.dry_run:
        for shape, mode, n in plan:
            print(shlex.join(command(python, n, shape, mode, traces, args.device)))
        return 0
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    rows, baseline = [], {}
    total = time.monotonic()
    for shape, mode, n in plan:
        name = f"{shape}_{mode}_tp{n}"
        code, stdout, seconds = run_one(
            command(python, n, shape, mode, traces, args.device),
            args.out / "logs" / f"{name}.log",
            args.run_timeout,
        )
        status = "ok" if code == 0 else ("timed out" if code is None else f"exit {code}")
        row = {"shape": shape, "mode": mode, "ranks": n, "seconds": seconds, "status": status}
        row.update({k: v for k, v in parse_summary(stdout).items() if k != "ranks"})
        try:
            row.update(traced(stdout))
        except Exception as err:  # a damaged trace costs its columns, not the table
            row["status"] += f" (trace: {type(err).__name__})"
        if "forward_us" in row:
            baseline.setdefault((shape, mode), row["forward_us"] if n == 1 else None)
            base = baseline.get((shape, mode))
            row["speedup"] = base / row["forward_us"] if base else None
        rows.append(row)
        print(f"{name}: {status}, {seconds:.0f} s", flush=True)
    with open(args.out / "tp_scaling.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.rjust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(_cell(r.get(c)).rjust(widths[c]) for c in COLUMNS) for r in rows]
    table = "\n".join(lines)
    (args.out / "tp_scaling.txt").write_text(table + "\n")
    print(table)
    print(f"total {time.monotonic() - total:.0f} s; CSV, table and logs in {args.out}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
