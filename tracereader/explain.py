"""Explain a profiler trace: per recorded step, the GPU work and who launched it (each kernel
with its footprint: grid, block, registers, shared memory, the profiler's occupancy estimate
and the occupancy worked out from the footprint), the CPU dispatch chain, and what a careful
reader would point at (the Part 1 cheatsheet, grown with Part 3's findings).

    uv run explain traces/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json
    uv run explain TRACE --json      # the same, machine-readable (complete)
    uv run explain TRACE --all-steps # every step in full, not just the first

A file that is not a usable trace (unreadable, not JSON, no ProfilerStep) is one line on stderr
and exit code 2; single malformed events are skipped and reported as a health problem.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from tracereader import findings, footprint
from tracereader.commandline import Parser, non_negative_int
from tracereader.load import Step, Trace, TraceError, load, silent_ops

NAME_WIDTH = 70
MAX_OPS = 200  # text mode: lines per list in a step; a step of 100k ops must stay readable


def _name(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def _more(left: int) -> str:
    return f"... {left} more (--max-ops)"


def _occupancy(trace: Trace | None, item) -> footprint.Occupancy | None:
    if trace is None or item.kind != "kernel":
        return None
    return footprint.occupancy(item.args, trace.device_properties(item.args.get("device", 0)))


def step_text(
    step: Step, *, on_gpu: bool, max_ops: int | None = MAX_OPS, trace: Trace | None = None
) -> list[str]:
    """A step's reading; with `trace` (for its device properties) each kernel's footprint
    line also gives the occupancy worked out from it."""
    lines = [findings.step_summary(step)]
    if step.gpu:
        lines.append("  GPU work, in launch order (a kernel's footprint on the line below it):")
        lines.append(f"    {'us':>8}  {'class':<11} {'launched by':<18} name (reading)")
        for item in step.gpu[:max_ops]:
            reading = f" ({item.klass.detail})" if item.klass.detail else ""
            lines.append(
                f"    {item.dur:8.1f}  {item.klass.cls:<11} {item.launched_by:<18} "
                f"{_name(item.name)}{reading}"
            )
            if item.kind == "kernel":
                shape = footprint.describe(item.args, _occupancy(trace, item))
                if shape:
                    lines.append(f"{'':14}{shape}")
        if max_ops is not None and len(step.gpu) > max_ops:
            lines.append(f"    {_more(len(step.gpu) - max_ops)}")
    lines.append("  CPU dispatch chain:")
    for op in step.cpu_ops[:max_ops]:
        launched = [
            i.klass.cls + (" (split-K reduce)" if i.klass.joins_previous else "")
            for i in op.launched
        ]
        mark = f"  -> {', '.join(launched)}" if launched else ""
        lines.append(f"    {'  ' * op.depth}{op.name}{mark}")
    if max_ops is not None and len(step.cpu_ops) > max_ops:
        lines.append(f"    {_more(len(step.cpu_ops) - max_ops)}")
    silent = silent_ops(step) if on_gpu else []  # on a CPU trace nothing launches GPU work
    if silent:
        lines.append(f"  launched no GPU work: {', '.join(silent)}")
    return lines


def text(trace: Trace, *, all_steps: bool = False, max_ops: int | None = MAX_OPS) -> str:
    """The reading for a person. `max_ops` caps each list per step (None: no cap)."""
    device = trace.device or "CPU only"
    lines = [f"trace: {trace.path} ({device}, {len(trace.steps)} recorded steps)"]
    for i, step in enumerate(trace.steps):
        if i == 0 or all_steps:
            lines += step_text(step, on_gpu=trace.device is not None, max_ops=max_ops, trace=trace)
        else:
            times = ", ".join(f"{item.dur:.1f}" for item in step.gpu[:max_ops])
            if max_ops is not None and len(step.gpu) > max_ops:
                times += f", {_more(len(step.gpu) - max_ops)}"
            lines.append(
                f"{findings.step_summary(step)}"
                + (f"; kernel times (us, same order): {times}" if times else "")
            )
    lines.append("findings:")
    lines += [
        f"  {'PROBLEM: ' if f.problem else ''}[{f.topic}] {f.message}" for f in findings.read(trace)
    ]
    return "\n".join(lines)


def _footprint(trace: Trace, item) -> dict | None:
    """A kernel's recorded footprint fields, all of them, and the occupancy worked out from
    them (None where the device properties or a field is missing)."""
    if item.kind != "kernel":
        return None
    occ = _occupancy(trace, item)
    return {**footprint.fields(item.args), "from_footprint": occ.as_dict() if occ else None}


def _step_dict(trace: Trace, s: Step) -> dict:
    return {
        "name": s.name,
        "cpu_us": s.dur,
        "gpu_us": s.gpu_time,
        "gpu": [
            {
                "name": i.name,
                "kind": i.kind,
                "class": i.klass.cls,
                "reading": i.klass.detail,
                "facts": i.klass.facts,
                "us": i.dur,
                "launched_by": i.launched_by,
                "runtime_call": i.runtime,
                "counted_with_previous": i.klass.joins_previous,
                "footprint": _footprint(trace, i),
            }
            for i in s.gpu
        ],
        "cpu_ops": [
            {"name": o.name, "depth": o.depth, "us": o.dur, "launches": len(o.launched)}
            for o in s.cpu_ops
        ],
        "launched_no_gpu_work": silent_ops(s) if trace.device else None,
    }


def as_dict(trace: Trace) -> dict:
    return {
        "path": str(trace.path),
        "device": trace.device,
        "steps": [_step_dict(trace, s) for s in trace.steps],
        "findings": [f.as_dict() for f in findings.read(trace)],
    }


def dump_json(data, out: TextIO) -> None:
    """Strict JSON (NaN and Infinity are not JSON: refuse rather than write them)."""
    json.dump(data, out, indent=2, allow_nan=False)
    out.write("\n")


def write_json(trace: Trace, out: TextIO) -> None:
    """as_dict(trace) as `dump_json` writes it, one step at a time: the dicts of a trace of
    a million events would take more memory than the trace itself."""
    head = json.dumps(
        {"path": str(trace.path), "device": trace.device, "steps": []}, indent=2, allow_nan=False
    )
    out.write(head[: head.rindex("[") + 1])
    for i, step in enumerate(trace.steps):
        body = json.dumps(_step_dict(trace, step), indent=2, allow_nan=False)
        out.write(("," if i else "") + "\n    " + body.replace("\n", "\n    "))
    out.write("\n  ]," if trace.steps else "],")
    found = json.dumps(
        [f.as_dict() for f in findings.read(trace)], indent=2, allow_nan=False
    ).replace("\n", "\n  ")
    out.write(f'\n  "findings": {found}\n}}\n')


def load_or_exit(path: str) -> Trace:
    """For the commands: a file they cannot use is one line on stderr and exit code 2."""
    try:
        trace = load(path)
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    if not trace.steps:
        print(
            f"error: {path} has no recorded ProfilerStep, nothing to read (the schedule's wait "
            "+ warmup + active was longer than the loop, or prof.step() was never called)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return trace


def _max_ops(text: str) -> int | None:
    return non_negative_int(text) or None  # 0: no cap


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="explain", description=__doc__)
    parser.add_argument("trace", help="a trace written by one of the scripts (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--all-steps",
        action="store_true",
        help="print every step in full (default: the first in full, then one line per step)",
    )
    parser.add_argument(
        "--max-ops",
        "--max_ops",
        type=_max_ops,
        default=MAX_OPS,
        metavar="N",
        help=f"text mode: print at most N CPU ops and N GPU items per step, then how many "
        f"more; 0 for all (default: {MAX_OPS}; --json is always complete)",
    )
    args = parser.parse_args(argv)
    from tracereader import (
        ranks,  # a folder (or stem) of <stem>_rank<r>.json: the ranks side by side
    )

    if ranks.is_run(args.trace):
        return ranks.explain_main(args)
    trace = load_or_exit(args.trace)
    try:
        if args.json:
            write_json(trace, sys.stdout)
        else:
            print(text(trace, all_steps=args.all_steps, max_ops=args.max_ops))
    except BrokenPipeError:
        return stdout_closed()
    return 0


def stdout_closed() -> int:
    """`explain BIG | head` closed the pipe early: no traceback for that, and none at exit
    when Python flushes stdout (pointed at /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def cli() -> None:
    """The console command (`uv run explain`, `uv run compare`): main's code is the exit code."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
