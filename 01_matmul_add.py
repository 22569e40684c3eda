"""Part 1: profile `torch.add(torch.matmul(x, w), b)` and learn to read the trace.

You will learn: the CPU dispatch chain (ProfilerStep > matmul_add > aten::matmul > aten::mm,
then aten::add), what launch overhead looks like next to GPU time, and what torch.compile
turns two ops into.

Guess first. Per recorded step, on a GPU:
  eager     two kernels: a GEMM launched by aten::mm, an elementwise add launched by aten::add.
  compiled  Inductor rewrites matmul + add into one aten::addmm, which still runs as two GPU
            operations: a device-to-device memcpy (the bias copied into the output) and a GEMM
            whose epilogue adds it in.
  size 64   self CPU time (ms) dwarfs GPU time (us): overhead-bound. Size 4096: both in ms.
  cold      without --warmup, the first recorded step is wider: start-up work lands in it.
On a CPU the same dispatch chain appears, with no kernels under it.

    uv run 01_matmul_add.py --size 64
    uv run 01_matmul_add.py --size 64 --warmup --compile
"""

import sys

import torch

from common import bench, check, cli, outputs, profiling, traffic
from common.expectations import Expect

SCRIPT = "01_matmul_add"
ANNOTATION = "matmul_add"


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.matmul(x, w), b)


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 1, "elementwise": 1, "memcpy": 0},
        cpu_present=("aten::matmul", "aten::mm", "aten::add"),
        why="two ops, two kernels",
    ),
    "compile": Expect(
        gpu={"gemm": 1, "memcpy": 1, "elementwise": 0},
        cpu_present=("Torch-Compiled Region*", "aten::addmm"),
        cpu_absent=("aten::add",),
        why="one addmm, still two GPU operations: b copied into the output, then the GEMM",
    ),
}


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    parser.add_argument(
        "--size",
        type=cli.positive_int,
        default=64,
        help="x, w and b are [size, size]; 64 is overhead-bound, 4096 compute-bound (default: 64)",
    )
    parser.add_argument(
        "--warmup",
        action="store_true",
        help=f"call the function {profiling.WARMUP_CALLS} times before profiling; "
        "without it the run is cold (default: cold)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    n = args.size
    elt = torch.empty((), dtype=run.dtype).element_size()
    cli.ensure_fits(4 * n * n * (elt + 4), run)  # x, w, b, out and their fp32 reference copies
    out_paths = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(str(n), args, run, extra="warm" if args.warmup else "cold"),
        gzip=args.gzip,
    )

    x = torch.randn(n, n, device=run.device, dtype=run.dtype)
    w = torch.randn(n, n, device=run.device, dtype=run.dtype) / n**0.5
    # A full [size, size] b, as in Part 1: under --compile, addmm then copies it into the
    # output (a DtoD memcpy) and the GEMM adds onto it. A 1-D b would take cuBLASLt's bias
    # epilogue instead, and the memcpy the post discusses would not appear.
    b = torch.randn(n, n, device=run.device, dtype=run.dtype)
    fn = torch.compile(matmul_add) if args.compile else matmul_add
    results = []

    def step():
        results.append(fn(x, w, b))

    if args.warmup:
        profiling.warm_up(lambda: fn(x, w, b), run, compiling=args.compile)
    elif args.compile:
        print("compile: happens inside the first (untraced) step of this cold run")
    profiling.profile_and_save(step, annotation=ANNOTATION, run=run, args=args, outputs=out_paths)
    seen = profiling.look(out_paths, EXPECT["compile" if args.compile else "eager"])
    # Checked after profiling so that a cold run stays cold.
    check.against_reference(results[-1], matmul_add(x.float(), w.float(), b.float()), run.dtype)
    if args.bench:
        model = traffic.matmul_add(n, elt, compiled=args.compile)
        bench.report(lambda: fn(x, w, b), run=run, model=model, trace=seen.trace, args=args)

    return profiling.finish(args, out_paths, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
