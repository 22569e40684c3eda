"""Measure what one profiled step holds in memory, per lesson, on this machine: the source of
common.cli's TRACE_BYTES_PER_EVENT and of each lesson's EVENTS_PER_STEP.

Each lesson runs twice on the CPU at its default shapes, with --active LOW and --active HIGH, in
a child process; the difference of the children's peak resident memory (ru_maxrss, os.wait4),
over the difference of recorded steps, is the memory one more step costs (the profiler's
events, held until the export, and the export's own copy). The events one step adds come
from the written traces the same way: (events at HIGH - events at LOW) / (HIGH - LOW).

    uv run python -m tools.dev.step_memory                       # every single-process lesson
    uv run python -m tools.dev.step_memory 06_train_step --high 200
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tracereader import Parser, UsageError, positive_int, run

ROOT = Path(__file__).resolve().parents[2]
LESSONS = {  # the lesson and the flags that keep it small on a CPU
    "01_matmul_add": ["--warmup"],
    "02_linear": [],
    "03_simple_mlp": [],
    "04_a_naive_attention": [],
    "04_c_sdpa_attention": [],
    "06_train_step": ["--batch", "2", "--seq", "16", "--dim", "64", "--hidden", "128",
                      "--heads", "2", "--layers", "2"],
    "08_generate": [],
}  # fmt: skip


def one_run(script: str, flags: list[str], active: int) -> tuple[int, int]:
    """(peak RSS in bytes, events in the written trace) of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, str(ROOT / f"{script}.py"), "--device", "cpu", *flags]
        argv += ["--active", str(active), "--traces-dir", tmp]
        child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, 3):
            raise SystemExit(f"{script} --active {active} failed: {child.stderr.read()[-400:]}")
        traces = list(Path(tmp).rglob("*.json"))
        events = sum(len(json.loads(t.read_text()).get("traceEvents", [])) for t in traces)
        return usage.ru_maxrss * 1024, events


def main(argv=None) -> int:
    parser = Parser(prog="python -m tools.dev.step_memory")
    parser.add_argument("lessons", nargs="*", default=list(LESSONS),
                        help="of: " + ", ".join(LESSONS) + " (default: all)")  # fmt: skip
    parser.add_argument("--low", type=positive_int, default=3)
    parser.add_argument("--high", type=positive_int, default=103)
    args = parser.parse_args(argv)
    args.lessons = [name.removesuffix(".py") for name in args.lessons]  # 02_linear.py too
    if unknown := [name for name in args.lessons if name not in LESSONS]:
        raise UsageError(f"no such lesson here: {unknown[0][:60]!r} (of: {', '.join(LESSONS)})")
    if args.high <= args.low:  # the per-step figures divide by the difference
        raise UsageError(f"--high {args.high} must be above --low {args.low}")
    steps = args.high - args.low
    for script in args.lessons:
        rss_low, ev_low = one_run(script, LESSONS[script], args.low)
        rss_high, ev_high = one_run(script, LESSONS[script], args.high)
        per_step = (rss_high - rss_low) / steps
        events = (ev_high - ev_low) / steps
        print(f"{script}: {per_step / 1e3:.0f} kB and {events:.0f} events per recorded step "
              f"({per_step / max(events, 1):.0f} B per event)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
