"""Compare two traces (eager vs compiled, eager vs Liger): which GPU kernels are byte-for-byte
the same, which CPU ops disappeared or appeared, per-kernel and per-step GPU times, and the HBM
bytes that each side's extra kernels had to move.

    uv run compare traces/03_simple_mlp/{TAG}_eager.json \
                                    traces/03_simple_mlp/{TAG}_compile.json
    uv run compare A B --json

Byte estimate for an extra kernel, from the tensors its launching CPU op recorded
(record_shapes), each a minimum, by the op's family:
  pointwise (add, mul, gelu, softmax, a norm, copies ...)  every input read once, plus one
      output the size of the largest input written once: what fusion saves;
  reduction (sum, mean, amax, norm ...)  every input read once (the output is smaller);
  embedding  the indices, and the rows it reads and writes (not the whole table);
  GEMM (aten::mm, addmm, bmm)  both operands (and a bias) read once, the product written
      once; a split-K reduce counts with its GEMM;
  compiled code's launch of a Triton kernel (its launch op is named after it and lists its
      outputs among its arguments): every tensor argument touched once.
A memcpy moves its own size twice (read and write), a memset once (write), from the event's
`bytes`. Any other op (and a kernel launched outside any op that records shapes) has no
estimate ("unknown"): the total then says which kernels it leaves out. An estimate above what
the device could move in the kernel's time (its datasheet bandwidth, devices.py, x the time)
would be no minimum: it is withdrawn and said so; on a device the table lacks that check
cannot be made, and each estimate says "cap unknown".

At model scale: step wall time and GPU busy (union) A vs B, time by class, kernels gone, new
and changed by grouped name (per-step totals), CPU ops whose count or time changed (as HTA's
TraceDiff), nn.Modules (by path) whose GPU time (CPU time on CPU traces) changed, where both
traces carry module events (with_stack=True), and a verdict in one line: faster or slower
only where the change outruns the steps' noise (each side's band: the interquartile range of
its step times from 4 steps, so one slow step does not widen it; below that, the fastest step
to the median), the fastest steps moved with the medians, and, on CPU traces, no op ran far
apart on the same inputs (a busy machine); else "not measurably different". Each extra kernel
is listed with its own time beside its own byte estimate.

A trace without ProfilerStep is read as one window, as explain reads it. A file that is not a
usable trace (unreadable, not JSON, no event the reader uses) is one line on stderr and exit
code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tracereader.analyses.diff import compare
from tracereader.commandline import Parser
from tracereader.commands.shared import load_or_exit, run_cli, stdout_closed
from tracereader.render.compare import text
from tracereader.render.trace import dump_json


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="compare", description=__doc__)
    parser.add_argument("trace_a", help="the baseline trace (e.g. eager)")
    parser.add_argument("trace_b", help="the variant (e.g. compiled, or Liger)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    # a folder (or stem) of <stem>_rank<r>.json: runs side by side
    from tracereader.commands import runs
    from tracereader.trace.runs import is_run

    if is_run(args.trace_a) or is_run(args.trace_b):
        return runs.compare_main(args)
    result = compare(load_or_exit(args.trace_a), load_or_exit(args.trace_b))
    try:
        if args.json:
            dump_json(result, sys.stdout)
        else:
            print(text(result))
    except BrokenPipeError:
        return stdout_closed()
    return 0


def cli() -> None:
    """The console command (`uv run explain`, `uv run compare`): main's code is the exit code."""
    sys.exit(run_cli(main))


if __name__ == "__main__":
    cli()
