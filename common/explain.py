"""Explain a profiler trace: per recorded step, the GPU work and who launched it, the CPU
dispatch chain, and what a careful reader would point at (the Part 1 cheatsheet).

    uv run python -m common.explain traces/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json
    uv run python -m common.explain TRACE --json      # the same, machine-readable
    uv run python -m common.explain TRACE --all-steps # every step in full, not just the first
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from common import findings
from common.cli import Parser
from common.trace_reader import Step, Trace, TraceError, load, silent_ops

NAME_WIDTH = 70


def _name(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def step_text(step: Step, *, on_gpu: bool) -> list[str]:
    lines = [findings.step_summary(step)]
    if step.gpu:
        lines.append("  GPU work, in launch order:")
        lines.append(f"    {'us':>8}  {'class':<11} {'launched by':<18} name (reading)")
        for item in step.gpu:
            reading = f" ({item.klass.detail})" if item.klass.detail else ""
            lines.append(
                f"    {item.dur:8.1f}  {item.klass.cls:<11} {item.launched_by:<18} "
                f"{_name(item.name)}{reading}"
            )
    lines.append("  CPU dispatch chain:")
    for op in step.cpu_ops:
        launched = [i.klass.cls for i in op.launched]
        mark = f"  -> {', '.join(launched)}" if launched else ""
        lines.append(f"    {'  ' * op.depth}{op.name}{mark}")
    silent = silent_ops(step) if on_gpu else []  # on a CPU trace nothing launches GPU work
    if silent:
        lines.append(f"  launched no GPU work: {', '.join(silent)}")
    return lines


def text(trace: Trace, *, all_steps: bool = False) -> str:
    device = trace.device or "CPU only"
    lines = [f"trace: {trace.path} ({device}, {len(trace.steps)} recorded steps)"]
    for i, step in enumerate(trace.steps):
        if i == 0 or all_steps:
            lines += step_text(step, on_gpu=trace.device is not None)
        else:
            times = ", ".join(f"{item.dur:.1f}" for item in step.gpu)
            lines.append(
                f"{findings.step_summary(step)}"
                + (f"; kernel times (us, same order): {times}" if times else "")
            )
    lines.append("findings:")
    lines += [
        f"  {'PROBLEM: ' if f.problem else ''}[{f.topic}] {f.message}" for f in findings.read(trace)
    ]
    return "\n".join(lines)


def as_dict(trace: Trace) -> dict:
    return {
        "path": str(trace.path),
        "device": trace.device,
        "steps": [
            {
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
                    }
                    for i in s.gpu
                ],
                "cpu_ops": [
                    {"name": o.name, "depth": o.depth, "us": o.dur, "launches": len(o.launched)}
                    for o in s.cpu_ops
                ],
                "launched_no_gpu_work": silent_ops(s) if trace.device else None,
            }
            for s in trace.steps
        ],
        "findings": [f.as_dict() for f in findings.read(trace)],
    }


def load_or_exit(path: str) -> Trace:
    """For the commands: a bad file is one line on stderr and exit code 2."""
    try:
        return load(path)
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m common.explain", description=__doc__)
    parser.add_argument("trace", help="a trace written by one of the scripts (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--all-steps",
        action="store_true",
        help="print every step in full (default: the first in full, then one line per step)",
    )
    args = parser.parse_args(argv)
    trace = load_or_exit(args.trace)
    if args.json:
        print(json.dumps(as_dict(trace), indent=2))
    else:
        print(text(trace, all_steps=args.all_steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
