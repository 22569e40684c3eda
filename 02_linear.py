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

import torch
import torch.nn.functional as F
from torch import nn

from common import bench, check, cli, outputs, profiling, traffic
from common.expectations import Expect

SCRIPT = "02_linear"
ANNOTATION = "linear_fwd"

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


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    parser.add_argument(
        "--batch", type=cli.positive_int, default=1024, help="rows of x (default: 1024, the post's)"
    )
    parser.add_argument(
        "--in_dim",
        "--in-dim",
        type=cli.positive_int,
        default=32,
        help="input features (default: 32)",
    )
    parser.add_argument(
        "--out_dim",
        "--out-dim",
        type=cli.positive_int,
        default=64,
        help="output features (default: 64)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    elt = torch.empty((), dtype=run.dtype).element_size()
    numel = args.batch * args.in_dim + args.in_dim * args.out_dim + args.batch * args.out_dim
    cli.ensure_fits(numel * (elt + 4), run)  # x, weight, out, and their fp32 reference copies
    out_paths = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(f"b{args.batch}_in{args.in_dim}_out{args.out_dim}", args, run),
        gzip=args.gzip,
    )

    # The module: y = x @ w.T + b.
    linear = nn.Linear(args.in_dim, args.out_dim, bias=True).to(run.device, run.dtype).eval()
    forward = torch.compile(linear) if args.compile else linear
    x = torch.randn(args.batch, args.in_dim, device=run.device, dtype=run.dtype)

    with torch.no_grad():
        out = profiling.warm_up(lambda: forward(x), run, compiling=args.compile)
        reference = F.linear(x.float(), linear.weight.float(), linear.bias.float())
        check.against_reference(out, reference, run.dtype)
        profiling.profile_and_save(
            lambda: forward(x), annotation=ANNOTATION, run=run, args=args, outputs=out_paths
        )
    seen = profiling.look(out_paths, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        model = traffic.linear(args.batch, args.in_dim, args.out_dim, elt)
        with torch.no_grad():
            bench.report(lambda: forward(x), run=run, model=model, trace=seen.trace, args=args)
    return profiling.finish(args, out_paths, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
