"""Part 2, first rung: profile one `nn.Linear(in_dim, out_dim, bias=True)` forward.

You will learn: that nn.Linear already fuses its bias add into the GEMM (an epilogue), that
`aten::t` is a view that launches nothing, and why torch.compile has nothing to fuse here.

Guess first. Per recorded step, on a GPU:
  eager     aten::linear > aten::t (> aten::transpose > aten::as_strided), then aten::addmm;
            exactly one GPU kernel, a GEMM whose name carries the bias epilogue; no aten::add.
  compiled  the same single GEMM kernel, byte for byte; the CPU side loses the view chain and
            gains compile rows (TorchDynamo Cache Lookup, Torch-Compiled Region, ...).
On a CPU the same dispatch chain appears, with no kernels under it.

    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64 --compile
"""

import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling, shapes
from common.measuring import bench, traffic
from tracereader import Expect

SCRIPT = "02_linear"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# measured: 12 (tools/dev/step_memory.py, CPU)
EVENTS_PER_STEP = 12
ANNOTATION = "linear_fwd"


def reference(x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """What the module must compute, in float32: y = x @ w.T + b."""
    return F.linear(x.float(), linear.weight.float(), linear.bias.float())


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 1, "elementwise": 0},
        cpu_present=("aten::linear", "aten::t", "aten::addmm"),
        cpu_absent=("aten::add",),
        why="the bias add rides in the GEMM's epilogue; aten::t only rewrites strides",
    ),
    "compile": Expect(
        gpu={"gemm": 1, "elementwise": 0},
        cpu_present=("Torch-Compiled Region*", "aten::addmm"),
        cpu_absent=("aten::linear", "aten::t", "aten::add"),
        gemms_as_in="eager",
        why="nothing to fuse: the same GEMM, minus the CPU's view bookkeeping",
    ),
}


def traffic_model(batch: int, in_dim: int, out_dim: int, elt: int) -> list[traffic.Kernel]:
    """One GEMM that reads x, w and the bias and writes y once: all there is to move."""
    return [traffic.gemm("addmm GEMM (bias epilogue)", batch, in_dim, out_dim, elt, bias=True)]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_linear_flags(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    elt = cli.element_size(run)
    b, i, o = args.batch, args.in_dim, args.out_dim
    # x, w, bias, two outputs alive at once (warm-up keeps the last), and the float32
    # reference with its float32 copies of x and w.
    cli.ensure_fits(
        (b * i + i * o + o + 2 * b * o) * elt + (b * i + i * o + b * o) * 4,
        run,
        trace=cli.profiled(args, EVENTS_PER_STEP),
    )
    out = outputs.prepare(
        args.traces_dir, SCRIPT, outputs.run_tag(shapes.linear_tag(args), args, run), gzip=args.gzip
    )

    # The module: y = x @ w.T + b.
    linear = nn.Linear(i, o, bias=True).to(run.device, run.dtype).eval()
    forward = torch.compile(linear) if args.compile else linear
    x = torch.randn(b, i, device=run.device, dtype=run.dtype)

    with torch.no_grad():
        y = profiling.warm_up(lambda: forward(x), run, compiling=args.compile)
        check.against_reference(y, reference(x, linear), run.dtype)
        del y

        profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
        # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
        with profile(
            activities=profiling.activities(run),
            schedule=schedule(
                wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1
            ),
            record_shapes=True,  # the table's input dims tell which GEMM is which
            acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function(ANNOTATION):
                    forward(x)
                prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        with torch.no_grad():
            bench.report(
                lambda: forward(x),
                run=run,
                model=traffic_model(b, i, o, elt),
                trace=seen.trace,
                args=args,
            )
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
