"""Where a lesson's wall time goes, end to end: interpreter and imports, CUDA start-up,
warm-up (and compile), the profiled loop, export, the table, reading the trace back, exit.

    uv run python -m tools.startup_breakdown 02_linear.py
    uv run python -m tools.startup_breakdown 03_simple_mlp.py --compile --runs 3 --out DIR

Each run is a fresh process (as a user's `uv run` is). The child wraps the lesson's phases
with a host clock by patching the functions the lessons call (nothing in the lessons changes)
and reports them; the parent measures the whole process, so what is left after main returns
is the interpreter's exit (atexit handlers, worker pools, CUDA teardown). The first run warms
the on-disk caches (Inductor, Triton) and is reported apart; the table is the median of the
rest. The lesson's traces go under --out (default: traces/startup_breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tracereader import Parser, UsageError, positive_int, run

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, runpy, sys, time
start = time.perf_counter()
SCRIPT, ARGS = sys.argv[1], sys.argv[2:]
marks = {}

def add(label, seconds):
    marks[label] = marks.get(label, 0.0) + seconds

def timed(owner, name, label):
    real = getattr(owner, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            add(label, time.perf_counter() - t)
    setattr(owner, name, wrapper)

t = time.perf_counter()
import torch
add("import torch", time.perf_counter() - t)
t = time.perf_counter()
import torch.profiler
from common import check, cli, profiling
add("import the rest", time.perf_counter() - t)
timed(cli, "resolve", "device: CUDA/CPU start-up")
timed(torch, "compile", "torch.compile(): loads Dynamo and Inductor")
timed(profiling, "warm_up", "warm-up (incl. compile)")
timed(check, "against_reference", "reference check")
timed(torch.profiler.profile, "__enter__", "profiler start")
timed(torch.profiler.profile, "__exit__", "profiler stop (incl. last step)")
timed(torch.profiler.profile, "step", "profiled steps: prof.step()")
timed(torch.profiler.profile, "export_chrome_trace", "export trace")
timed(torch.profiler.profile, "key_averages", "table: key_averages")
timed(profiling, "look", "read back: trace + expectations + findings")
sys.argv = [SCRIPT, *ARGS]
t = time.perf_counter()
try:
    runpy.run_path(SCRIPT, run_name="__main__")
except SystemExit:
    pass
add("main (everything under the lesson)", time.perf_counter() - t)
marks["_until_main_returned"] = time.perf_counter() - start
sys.stderr.write("BREAKDOWN " + json.dumps(marks) + "\n")
sys.stderr.flush()
"""


def one_run(script: str, args: list[str], repo: Path) -> dict:
    begin = time.perf_counter()
    proc = subprocess.run(  # the names as arguments: no text of theirs becomes code
        [sys.executable, "-c", CHILD, script, *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - begin
    line = next((x for x in proc.stderr.splitlines() if x.startswith("BREAKDOWN ")), None)
    if line is None:
        said = [x for x in proc.stderr.splitlines() if x.strip()][-1:] or ["(nothing on stderr)"]
        raise UsageError(f"the lesson failed (exit {proc.returncode}): {said[0][:300]}")
    marks = json.loads(line.removeprefix("BREAKDOWN "))
    inside = marks.pop("_until_main_returned")
    phases = [v for k, v in marks.items() if k not in ("main (everything under the lesson)",)]
    marks["other (module, inputs, prints)"] = inside - sum(phases)
    marks["interpreter start + exit (wall - inside)"] = wall - inside
    marks["total wall"] = wall
    return marks


def out_folder(text: str) -> Path:
    """An argparse type for --out: a folder there or to be made, whose name the lesson's own
    --traces-dir takes (no control characters), refused before any run."""
    if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is empty or holds a control character")
    path = Path(text).absolute()  # the child runs in --repo: a relative name would move
    there = next(p for p in (path, *path.parents) if os.path.lexists(p))
    if not there.is_dir():
        raise argparse.ArgumentTypeError(f"{there} is there and is not a folder")
    return path


def parse(argv):
    parser = Parser(
        prog="python -m tools.startup_breakdown",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("script", help="a lesson, e.g. 02_linear.py")
    parser.add_argument(
        "--runs",
        type=positive_int,
        default=3,
        help="measured runs after the warming one (default: 3)",
    )
    parser.add_argument(
        "--json", metavar="FILE", type=Path, help="also write every run's breakdown here"
    )
    parser.add_argument(
        "--out",
        "--traces-dir",
        "--traces_dir",
        dest="out",
        type=out_folder,
        default="traces/startup_breakdown",
        metavar="DIR",
        help="where the lesson's runs write their traces, as its --traces-dir "
        "(default: traces/startup_breakdown)",
    )
    parser.add_argument(
        "--repo",
        type=Path,
        default=ROOT,
        help="time the lesson of another checkout of this project, e.g. an older commit's "
        "worktree, for a before/after on the same machine (default: this one)",
    )
    known, rest = parser.parse_known_args(argv)
    known.repo = known.repo.resolve()
    if not (known.repo / known.script).is_file():
        raise UsageError(f"no lesson {known.script!r} in {known.repo}")
    if known.json and (known.json.is_dir() or not known.json.absolute().parent.is_dir()):
        raise UsageError(f"--json {known.json}: not a file in a folder that is there")
    return known, [*rest, "--traces-dir", str(known.out)]


def main(argv=None) -> int:
    known, rest = parse(argv)
    first = one_run(known.script, rest, known.repo)
    runs = [one_run(known.script, rest, known.repo) for _ in range(known.runs)]
    labels = list(dict.fromkeys(k for r in runs for k in r))
    print(
        f"{known.script} {' '.join(rest)}: median of {known.runs} runs "
        "(the first, cache-warming run apart)"
    )
    print(f"  {'phase':<45} {'median s':>8} {'first run s':>11}")
    for label in labels:
        values = [r.get(label, 0.0) for r in runs]
        print(f"  {label:<45} {statistics.median(values):8.2f} {first.get(label, 0.0):11.2f}")
    if known.json:
        known.json.write_text(json.dumps({"first": first, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
