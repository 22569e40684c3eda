"""Benchmark the trace reader on large traces: wall time and peak memory of `explain`.

    uv run python -m tools.dev.reader_validation.trace_bench ARGS, ARGS one of:
        --mb 200                        make a 200 MB trace, explain it
        --mb 20 --gzip                  the same, gzipped
        --trace BIG.json                explain an existing trace
        --read-back T.json              time load, check, findings
        --mb 200 --one-step             one huge step instead
        --mb 20 --repo /tmp/old         another checkout's reader
        --trace T.json.gz --hta         explain against HTA 0.5.0
        --trace T.json --load           explain against load() alone

A lesson's own long trace, read back as the lesson does:

    uv run 02_linear.py --device cpu --active 5000 --traces-dir /tmp/a5000
    uv run python -m tools.dev.reader_validation.trace_bench \
        --read-back /tmp/a5000/02_linear/b1024_in32_out64_bf16_eager_w1-1-5000_cpu.json

The synthetic trace is realistic: one recorded step of a real H200 trace (by default the
posts' eager GeGLU MLP in tests/fixtures) is replicated until the file reaches --mb megabytes,
each copy inside its own ProfilerStep#N with timestamps shifted past the previous copy and
fresh correlation and External ids, in the layout torch's exporter writes (one key group per
line). The top-level metadata (deviceProperties, versions) and the per-thread metadata events
are kept, so the reader sees what it would see in a long real run.

`explain` then runs in a child process (`uv run explain TRACE`, output discarded)
and the tool prints its wall time and peak memory (on Linux the peak of that child's process
tree's summed PSS, sampled: the reader's workers counted, shared pages once; elsewhere its
ru_maxrss), with the peak as a multiple of the file's size. --read-back instead times, in a
child, the three stages a lesson runs on its own trace after profiling (profiling.look):
load, check against the lesson's declared EXPECT, read_findings.

--hta also times Holistic Trace Analysis on the same trace, in its own environment (a child
`uv run --no-project --with holistictraceanalysis==0.5.0 python -m
tools.dev.reader_validation._hta_side`; the peak RSS of that child covers the interpreter uv
starts): HTA's load (TraceAnalysis: parse, align, filter) plus the analyses
tools/dev/reader_validation/hta_compare.py compares (temporal breakdown, comm/compute overlap,
idle time breakdown), timed inside HTA's process, so its interpreter and pandas
imports are not counted against it; our explain is timed as the whole child, start-up
included. It prints both, their ratio, and the reader's load
alone (tracereader's load() in a child) against explain: what the summary adds to loading.

Timings are for this machine and this checkout; nothing is asserted. Generated traces go to a
temporary folder and are removed unless --keep or --out is given.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tracereader import Parser, run

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_SOURCE = ROOT / "tests/fixtures/h200/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def _read(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return {"traceEvents": data} if isinstance(data, list) else data


def step_template(data: dict) -> tuple[list[dict], float, int, int]:
    """The events of the last recorded step: its CPU side, its runtime calls, the GPU work they
    launched and the flow arrows between them. Returns (events, period in us, id span,
    External id span)."""
    events = data["traceEvents"]
    steps = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")
        ),
        key=lambda e: e["ts"],
    )
    if not steps:
        raise SystemExit("error: the source trace has no ProfilerStep to replicate")
    step = steps[-1]
    start, end = step["ts"], step["ts"] + step["dur"]
    host = [
        e
        for e in events
        if e.get("cat") not in GPU_CATS
        and e.get("ph") in ("X", "s")
        and isinstance(e.get("ts"), (int, float))
        and start <= e["ts"] <= end
        and e.get("pid") == step.get("pid")
    ]
    ids = {e.get("args", {}).get("correlation") for e in host} | {e.get("id") for e in host}
    ids.discard(None)
    device = [
        e
        for e in events
        if (e.get("cat") in GPU_CATS and e.get("args", {}).get("correlation") in ids)
        or (e.get("ph") == "f" and e.get("id") in ids)
    ]
    gpu_end = max([e["ts"] + e.get("dur", 0) for e in device], default=end)
    device += [
        e for e in events if e.get("cat") == "gpu_user_annotation" and start <= e["ts"] <= gpu_end
    ]
    template = sorted(host + device, key=lambda e: e["ts"])
    period = max(gpu_end, end) - start + 5.0
    external = [e.get("args", {}).get("External id", 0) for e in template]
    id_span = max(ids) - min(ids) + 1 if ids else 1
    ext_span = max(external) - min(external) + 1 if external else 1
    return template, period, id_span, ext_span


def _format(event: dict) -> str:
    """One event in torch's export layout (a key group per line): what the reader really parses."""
    head = ", ".join(
        f"{json.dumps(k)}: {json.dumps(v)}"
        for k, v in event.items()
        if k not in ("ts", "dur", "args")
    )
    lines = [f"  {{\n    {head},"]
    times = [f'"ts": {event["ts"]:.3f}'] + (
        [f'"dur": {event["dur"]:.3f}'] if "dur" in event else []
    )
    if "args" in event:
        args = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in event["args"].items())
        lines.append(f'    {", ".join(times)},\n    "args": {{\n      {args}\n    }}\n  }}')
    else:
        lines.append(f"    {', '.join(times)}\n  }}")
    return "\n".join(lines)


def generate(out: Path, mb: float, source: Path = DEFAULT_SOURCE, *, one_step: bool = False) -> int:
    """Write a trace of about `mb` megabytes (before gzip) built from `source`'s last step.
    `one_step`: all copies inside a single ProfilerStep (the huge-step case) instead of one
    ProfilerStep each. Returns the number of copies written."""
    data = _read(source)
    template, period, id_span, ext_span = step_template(data)
    first_step = next(e for e in template if str(e.get("name")).startswith("ProfilerStep#"))
    t0 = first_step["ts"]
    meta_events = [e for e in data["traceEvents"] if e.get("ph") == "M"]
    header = {k: v for k, v in data.items() if k != "traceEvents"}
    target = int(mb * 1e6)
    opener = gzip.open if out.name.endswith(".gz") else open
    written, steps = 0, 0
    with opener(out, "wt", encoding="utf-8") as f:

        def put(text: str) -> None:
            nonlocal written
            f.write(text)
            written += len(text)

        put("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in header.items()))
        put('  "traceEvents": [\n')
        put(",\n".join(_format(e) for e in meta_events))
        while written < target or steps == 0:
            shift = steps * period
            chunk = []
            for e in template:
                e = dict(e, ts=round(e["ts"] - t0 + 1_000_000.0 + shift, 3))
                if "args" in e:
                    args = dict(e["args"])
                    if "correlation" in args:
                        args["correlation"] += steps * id_span
                    if "External id" in args:
                        args["External id"] += steps * ext_span
                    e["args"] = args
                if "id" in e:
                    e["id"] += steps * id_span
                if str(e.get("name")).startswith("ProfilerStep#"):
                    if one_step:
                        continue
                    e["name"] = f"ProfilerStep#{steps}"
                chunk.append(_format(e))
            put(",\n" + ",\n".join(chunk))
            steps += 1
        if one_step:  # the file's order does not matter to a reader: the step can come last
            span = dict(first_step, name="ProfilerStep#0", ts=1_000_000.0, dur=steps * period)
            put(",\n" + _format(span))
        put("\n  ]\n}\n")
    return steps


# The children run as Python runs by default, caching compiled modules: an environment with
# PYTHONDONTWRITEBYTECODE set (this project's sandboxes) recompiles the reader at every start,
# about 50 ms, which is most of explain on a small trace.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _child(argv: list[str], cwd: Path) -> tuple[float, float, int, bytes]:
    """Run argv; return (wall s, peak memory MB, exit code, stderr tail) of that child: on Linux
    the peak of its process tree's summed PSS (the reader's workers included; pages shared
    after fork split between their processes), sampled every 5 ms; elsewhere its peak RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CHILD_ENV
    )
    tree = _TreeMemory(proc.pid)
    tree.start()
    err = proc.stderr.read()
    tree.stop.set()
    tree.join()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait
    # ru_maxrss counts the pages a fork shared with this process (pytest with torch: 500 MB)
    peak = tree.peak if tree.processes else usage.ru_maxrss / 1024
    return wall, peak, proc.returncode, err[-2000:]


class _TreeMemory(threading.Thread):
    """The peak summed PSS (MB) of a process and its descendants, from /proc (Linux; elsewhere
    nothing is sampled and `processes` stays 0)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.processes = pid, 0.0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            pids = self._tree()
            self.processes = max(self.processes, len(pids))
            self.peak = max(self.peak, sum(map(_pss_mb, pids)))

    def _tree(self) -> list[int]:
        """The process and its descendants, from each thread's `children` list: a few small
        reads, where a scan of /proc every 5 ms would take the measured child's CPU."""
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in threads:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        todo += map(int, f.read().split())
                except (OSError, ValueError):
                    pass
        return found


def _pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


READ_BACK = """
import json, runpy, sys, time



lesson = runpy.run_path({script!r}, run_name="lesson")  # its globals: EXPECT
t = [time.perf_counter()]
trace = load({trace!r}); t.append(time.perf_counter())
verdict = check(trace, lesson["EXPECT"][{mode!r}]); t.append(time.perf_counter())
found = read_findings(trace); t.append(time.perf_counter())
print(json.dumps({{"load": t[1] - t[0], "check": t[2] - t[1], "findings": t[3] - t[2],
    "steps": len(trace.steps), "ok": verdict.ok}}), file=sys.stderr)
"""


def read_back(trace: Path, script: str, mode: str, repo: Path) -> None:
    code = READ_BACK.format(script=str(repo / f"{script}.py"), trace=str(trace), mode=mode)
    wall, rss, rc, err = _child([sys.executable, "-c", code], repo)
    if rc != 0:
        raise SystemExit(f"error: the read-back failed (exit {rc}): {err.decode()[-500:]}")
    times = json.loads(err.decode().strip().splitlines()[-1])
    size = trace.stat().st_size / 1e6
    print(
        f"read-back of {trace} ({size:.1f} MB, {times['steps']} steps): "
        f"load {times['load']:.2f} s, check {times['check']:.2f} s, "
        f"findings {times['findings']:.2f} s, "
        f"total {times['load'] + times['check'] + times['findings']:.2f} s "
        f"(as expected: {times['ok']}); child peak RSS {rss:.0f} MB (with torch imported)"
    )


def explain(trace: Path, repo: Path, extra: list[str], repeat: int = 1) -> float | None:
    """Time `explain` in a child (the median of `repeat` runs); its wall time, None when it
    failed."""
    size = trace.stat().st_size / 1e6
    argv = [sys.executable, "-m", "tracereader.commands.explain", str(trace), *extra]
    runs = [_child(argv, repo) for _ in range(repeat)]
    walls = sorted(r[0] for r in runs)
    wall, rss = walls[len(walls) // 2], max(r[1] for r in runs)
    rc, err = next(((r[2], r[3]) for r in runs if r[2] != 0), (0, b""))
    of = f", median of {repeat} (min {walls[0]:.2f} s)" if repeat > 1 else ""
    print(
        f"explain {trace.name} ({size:.1f} MB on disk){' ' + ' '.join(extra) if extra else ''}: "
        f"{wall:.2f} s{of}, peak memory {rss:.0f} MB ({rss / size:.2f}x the file), exit {rc}"
    )
    if rc != 0:
        print(f"  stderr: {err.decode(errors='replace').strip()[-500:]}")
        return None
    return wall


HTA_SPEC = "holistictraceanalysis==0.5.0"
LOAD_ONLY = "import sys; from tracereader.trace.load import load; load(sys.argv[1])"


def load_alone(trace: Path, repo: Path, explain_s: float | None, repeat: int = 1) -> None:
    """The reader's load() alone in a child (the median of `repeat` runs): what explain's
    summary adds to loading."""
    runs = [_child([sys.executable, "-c", LOAD_ONLY, str(trace)], repo) for _ in range(repeat)]
    load_s = sorted(r[0] for r in runs)[len(runs) // 2]
    rss = max(r[1] for r in runs)
    rc, err = next(((r[2], r[3]) for r in runs if r[2] != 0), (0, b""))
    if rc == 0:
        added = f"; explain adds {100 * (explain_s / load_s - 1):.0f}%" if explain_s else ""
        print(f"reader load() alone: {load_s:.2f} s, peak RSS {rss:.0f} MB{added}")
    else:
        print(f"reader load() alone failed (exit {rc}): {err.decode(errors='replace')[-300:]}")


def _hta_once(trace: Path, repo: Path, spec: str) -> tuple[dict | None, float, float, str]:
    """One HTA child: (its result, or None where it failed; wall s; peak RSS MB; why not).
    `spec`: what uv installs, or `python:CMD`, a command whose Python has HTA (a machine
    without a network: `python:env PYTHONPATH=/tmp/hta python3`)."""
    with tempfile.TemporaryDirectory(prefix="trace_bench_hta_") as tmp:
        out = Path(tmp) / "hta.json"
        if spec.startswith("python:"):
            argv = shlex.split(spec.removeprefix("python:"))
        else:
            argv = ["uv", "run", "--no-project", "--with", spec, "python"]
        argv += [str(ROOT / "tools/dev/reader_validation/_hta_side.py"), "--out", str(out)]
        wall, rss, rc, err = _child([*argv, str(trace)], repo)
        if rc != 0 or not out.exists():
            return None, wall, rss, f"exit {rc}: {err.decode(errors='replace').strip()[-500:]}"
        data = json.loads(out.read_text())
        return {**data["inputs"][0], "version": data.get("hta_version")}, wall, rss, ""


def against_hta(
    trace: Path, repo: Path, explain_s: float | None, spec: str, repeat: int = 1
) -> None:
    """HTA's load + analyses on `trace` (the median of `repeat` runs, as explain's) against
    explain's wall time."""
    size = trace.stat().st_size / 1e6
    runs = []
    for _ in range(repeat):
        result, wall, rss, why = _hta_once(trace, repo, spec)
        if result is None:
            print(f"HTA failed ({why})")
            return
        runs.append((result["load_s"] + result.get("analyses_s", 0.0), result, wall, rss))
    runs.sort(key=lambda r: r[0])
    hta_s, result, wall, _ = runs[len(runs) // 2]
    of = f", median of {repeat} (min {runs[0][0]:.2f} s)" if repeat > 1 else ""
    rss = max(r[3] for r in runs)
    print(
        f"HTA {result.get('version') or spec.split('==')[-1]} on {trace.name} ({size:.1f} MB): "
        "load "
        f"{result['load_s']:.2f} s + analyses {result.get('analyses_s', 0.0):.2f} s = "
        f"{hta_s:.2f} s in-process{of} ({wall:.2f} s with its start-up), peak memory "
        f"{rss:.0f} MB ({rss / size:.2f}x the file)"
    )
    for error in result["errors"]:
        print(f"  HTA error: {error}")
    if explain_s:
        print(f"explain is {hta_s / explain_s:.1f}x faster than HTA's load + analyses")


def megabytes(text: str) -> float:
    """--mb: a size the temporary folder can hold (a gzipped trace is smaller, the check is
    not: the generator writes the text first). Refused in one line: not a number, nan, inf,
    nothing, or more than the free disk."""
    try:
        mb = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of megabytes, got {text!r}") from None
    if not math.isfinite(mb) or mb <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    free = shutil.disk_usage(tempfile.gettempdir()).free / 1e6
    if mb > free:
        raise argparse.ArgumentTypeError(
            f"{mb:g} MB is more than the {free:,.0f} MB free in {tempfile.gettempdir()}"
        )
    return mb


def make_parser() -> Parser:
    parser = Parser(prog="python -m tools.dev.reader_validation.trace_bench", description=__doc__)
    parser.add_argument(
        "--mb", type=megabytes, default=None, help="generate a trace of this size (before gzip)"
    )
    parser.add_argument("--gzip", action="store_true", help="write the generated trace gzipped")
    parser.add_argument(
        "--one-step",
        action="store_true",
        help="put every copy inside one ProfilerStep: a single huge step",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=DEFAULT_SOURCE,
        help="the real trace whose last step is replicated (default: the eager MLP fixture)",
    )
    parser.add_argument("--out", type=Path, help="write the generated trace here (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the generated trace")
    parser.add_argument("--trace", type=Path, help="explain this existing trace instead")
    parser.add_argument("--json", action="store_true", help="time `explain --json`")
    parser.add_argument(
        "--hta",
        nargs="?",
        const=HTA_SPEC,
        metavar="SPEC",
        help=f"also time HTA's load + analyses on the same trace (default spec {HTA_SPEC}; "
        "python:CMD runs it with CMD, a Python that has HTA, where uv cannot install it)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="time explain, load() alone and HTA N times each, report the medians (shared cores)",
    )
    parser.add_argument(
        "--load",
        action="store_true",
        help="also time the reader's load() alone (--hta does too): what the summary adds",
    )
    parser.add_argument(
        "--read-back",
        type=Path,
        metavar="TRACE",
        help="time load, check and read_findings on a lesson's own trace",
    )
    parser.add_argument("--script", default="02_linear", help="--read-back: whose EXPECT")
    parser.add_argument("--mode", default="eager", help="--read-back: eager or compile")
    parser.add_argument(
        "--repo",
        type=Path,
        default=ROOT,
        help="the checkout whose reader runs (default: this one), e.g. an older commit's",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: give 1 or more")
    extra = ["--json"] if args.json else []
    if args.read_back:
        read_back(args.read_back.resolve(), args.script, args.mode, args.repo.resolve())
    if args.trace:
        wall = explain(args.trace.resolve(), args.repo.resolve(), extra, args.repeat)
        if args.load or args.hta:
            load_alone(args.trace.resolve(), args.repo.resolve(), wall, args.repeat)
        if args.hta:
            against_hta(args.trace.resolve(), args.repo.resolve(), wall, args.hta, args.repeat)
    if args.mb is not None:
        with tempfile.TemporaryDirectory(prefix="trace_bench_") as tmp:
            suffix = ".json.gz" if args.gzip else ".json"
            out = args.out or Path(tmp) / f"synthetic_{args.mb:g}mb{suffix}"
            start = time.perf_counter()
            steps = generate(out, args.mb, args.source, one_step=args.one_step)
            what = (
                f"{steps} copies of one step in a single step"
                if args.one_step
                else f"{steps} steps"
            )
            print(
                f"generated {out} ({out.stat().st_size / 1e6:.1f} MB, {what}) "
                f"in {time.perf_counter() - start:.1f} s"
            )
            wall = explain(out.resolve(), args.repo.resolve(), extra, args.repeat)
            if args.load or args.hta:
                load_alone(out.resolve(), args.repo.resolve(), wall, args.repeat)
            if args.hta:
                against_hta(out.resolve(), args.repo.resolve(), wall, args.hta, args.repeat)
            if args.keep and not args.out:
                kept = Path.cwd() / out.name
                shutil.move(out, kept)
                print(f"kept: {kept}")
    if args.mb is None and not args.trace and not args.read_back:
        parser.error("give --mb, --trace or --read-back")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
