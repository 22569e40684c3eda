"""Explain any profiler trace: a one-screen summary of where the time went (per step: wall,
GPU busy and idle, time by kernel class, top kernels and CPU ops, phases, launches,
host-stalling syncs, collectives), then the findings ranked by the time at stake; for a
step of the lessons' size, every kernel with its footprint and the CPU dispatch chain.

    uv run explain traces/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json
    uv run explain TRACE --kernels --step 2   # the third recorded step's GPU work in full
    uv run explain TRACE --json                # everything, machine-readable (schema 2)
    uv run explain RANK_FOLDER                 # every rank of one job, side by side
    uv run explain TRACE --memory              # allocated memory over the steps: PNG, peak
    uv run explain PROTON_TRACE --proton       # the fused MLP's kernel per warp (Proton)

A trace without ProfilerStep is read as one window. A file that is not a usable trace
(unreadable, not JSON, no event the reader uses) is one line on stderr and exit code 2;
single malformed events are skipped and reported as a health problem.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from tracereader.commandline import Parser, non_negative_int
from tracereader.commands.shared import load_or_exit, run_cli, stdout_closed
from tracereader.reading import Reading
from tracereader.render import trace as render
from tracereader.render.trace import MAX_OPS
from tracereader.trace.load import BAD_MEMORY


def _max_ops(text: str) -> int | None:
    return non_negative_int(text) or None  # 0: no cap


# long: the parser's flags, one declaration each, then the dispatch to the readings
def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="explain", description=__doc__)
    parser.add_argument("trace", help="a trace written by one of the scripts (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--kernels", action="store_true", help="list a step's GPU work in full (--step)"
    )
    parser.add_argument(
        "--ops", action="store_true", help="list a step's CPU dispatch chain in full (--step)"
    )
    parser.add_argument(
        "--modules",
        action="store_true",
        help="the nn.Module tree in full (traces recorded with with_stack=True)",
    )
    parser.add_argument(
        "--step",
        type=non_negative_int,
        metavar="N",
        help="the recorded step to list (0 = the first, the default)",
    )
    parser.add_argument(
        "--all-steps", action="store_true", help="list every step in full, not just one"
    )
    parser.add_argument(
        "--all-findings",
        action="store_true",
        help="every finding, also those under 1%% of the step",
    )
    parser.add_argument(
        "--max-ops",
        "--max_ops",
        type=_max_ops,
        default=MAX_OPS,
        metavar="N",
        help=f"listing: at most N CPU ops and N GPU items per step, then how many "
        f"more; 0 for all (default: {MAX_OPS}; --json is always complete)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="a trace recorded with profile_memory=True: allocated memory over the steps "
        "drawn as a PNG, the peak, when, and the ops whose allocations were alive then "
        "(instead of the summary; with --json, added to it as `memory`)",
    )
    parser.add_argument(
        "--memory-png",
        metavar="PATH",
        help="where --memory writes its PNG (a folder: <trace stem>.memory.png in it; "
        "default: the working folder, never beside the trace; a link, device, FIFO or the "
        "trace itself is refused)",
    )
    parser.add_argument(
        "--proton",
        action="store_true",
        help="a Proton trace of the fused MLP's kernel (03_fused_mlp.py --proton): per warp, "
        "its waits and epilogue as shares of its block's span, and what sets the pace",
    )
    args = parser.parse_args(argv)
    if args.proton:
        from tracereader.commands import proton

        return proton.explain_main(args)
    if args.memory_png is not None and not args.memory:
        parser.error("--memory-png goes with --memory")
    # A command that reads one trace and exits: what it builds lives to the end, so the cyclic
    # collector would only rescan the trace's objects again and again.
    gc.disable()
    if args.memory:
        from tracereader.commands import memory  # matplotlib and the rest only for --memory

        return memory.explain_main(args)
    if os.path.isdir(args.trace) or not os.path.exists(args.trace):
        # Maybe a folder (or stem) of rank traces, side by side; a file never is one, so a
        # single trace does not import what ranks need.
        from tracereader.commands import runs
        from tracereader.trace.runs import is_run

        if is_run(args.trace):
            return runs.explain_main(args)
    trace = load_or_exit(args.trace, memory=True)  # memory that grows is named first
    trace.skipped.pop(BAD_MEMORY, None)  # unusable [memory] events: --memory reports them
    if args.step is not None and args.step >= len(trace.steps):
        print(
            f"error: --step {args.step}: {args.trace} has {len(trace.steps)} recorded "
            f"step(s), 0 to {len(trace.steps) - 1}",
            file=sys.stderr,
        )
        return 2
    reading = Reading(trace)
    try:
        if args.json:
            render.write_json(reading, sys.stdout)
        else:
            print(
                render.text(
                    reading,
                    all_steps=args.all_steps,
                    max_ops=args.max_ops,
                    kernels=args.kernels,
                    ops=args.ops,
                    step=args.step,
                    all_findings=args.all_findings,
                    module_tree=args.modules,
                )
            )
    except BrokenPipeError:
        return stdout_closed()
    return 0


def cli() -> None:
    """The console command (`uv run explain`, `uv run compare`): main's code is the exit code."""
    sys.exit(run_cli(main))


if __name__ == "__main__":
    cli()
