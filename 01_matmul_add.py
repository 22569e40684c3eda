"""Part 1: profile `torch.add(torch.matmul(x, w), b)` and learn to read the trace.

You will learn: the CPU dispatch chain (ProfilerStep > matmul_add > aten::matmul > aten::mm,
then aten::add), what launch overhead looks like next to GPU time, and what torch.compile
turns two ops into.

Guess first. Per recorded step, on a GPU:
  eager     two kernels: a GEMM launched by aten::mm, an elementwise add launched by aten::add.
  compiled  Inductor rewrites matmul + add into one aten::addmm, which still runs as two GPU
            operations: a device-to-device memcpy (the bias copied into the output) and a GEMM
            whose epilogue adds it in.
  size 64   tens of us of CPU time per step against ~3 us of GPU work: overhead-bound (an
            H100 showed 57-191 us against 3.2 us). Size 4096: the GPU's ~200 us outgrow the CPU's.
  cold      without --warmup, the first recorded step is wider: start-up work lands in it.
            That needs the first call inside the recording, so a cold run records from its very
            first step (wait=0, warmup=0; see COLD_SCHEDULE below).
On a CPU the same dispatch chain appears, with no kernels under it.

    uv run 01_matmul_add.py --size 64
    uv run 01_matmul_add.py --size 64 --warmup --compile
"""

import sys
import warnings

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling
from common.measuring import bench, traffic
from tracereader import Expect

SCRIPT = "01_matmul_add"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# measured: 8 (tools/dev/step_memory.py, CPU)
EVENTS_PER_STEP = 8
ANNOTATION = "matmul_add"
# With the post's schedule (wait=1, warmup=1, active=3) the cold call runs in the untraced wait
# step, so the first recorded step is already warm: on an H100 the cold and warm traces' first
# steps were equally wide (docs/lessons/01_matmul_add.md), so a cold run records from the
# first call on; a warm run, whose start-up happened in warm_up, keeps the post's schedule.
COLD_SCHEDULE = (0, 0, 3)
WARM_SCHEDULE = outputs.DEFAULT_SCHEDULE


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.matmul(x, w), b)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same function in float32."""
    return matmul_add(x.float(), w.float(), b.float())


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


def traffic_model(n: int, elt: int, *, compiled: bool) -> list[traffic.Kernel]:
    """Eager: a GEMM, then an add that reads its output and b. Compiled: addmm copies b into
    the output (read + write), then the GEMM reads that back as C and adds onto it."""
    if compiled:
        return [
            traffic.copy("b -> out (DtoD)", n * n, elt),
            traffic.gemm("addmm GEMM (beta*C)", n, n, n, elt, accumulate=True),
        ]
    return [
        traffic.gemm("matmul GEMM", n, n, n, elt),
        traffic.elementwise("add", n * n, elt, reads=2),
    ]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    parser.add_argument(
        "--size",
        type=cli.positive_int,
        default=64,
        help="x, w and b are [size, size]; 64 is overhead-bound, 4096 compute-bound (default: 64)",
    )
    # --warmup, and the schedule it implies: WARM_SCHEDULE with it, COLD_SCHEDULE without
    return cli.parse_warm_or_cold(
        parser, argv, calls=profiling.WARMUP_CALLS, warm=WARM_SCHEDULE, cold=COLD_SCHEDULE
    )


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    n = args.size
    elt = cli.element_size(run)
    # x, w, b and two outputs alive at once; the float32 reference: copies of x, w, b, result.
    cli.ensure_fits(5 * n * n * elt + 4 * n * n * 4, run, trace=cli.profiled(args, EVENTS_PER_STEP))
    warm, default = ("warm", WARM_SCHEDULE) if args.warmup else ("cold", COLD_SCHEDULE)
    tag = outputs.run_tag(str(n), args, run, extra=warm, default_schedule=default)
    out = outputs.prepare(args.traces_dir, SCRIPT, tag, gzip=args.gzip)

    x = torch.randn(n, n, device=run.device, dtype=run.dtype)
    w = torch.randn(n, n, device=run.device, dtype=run.dtype) / n**0.5
    # A full [size, size] b, as in Part 1: under --compile, addmm then copies it into the
    # output (a DtoD memcpy) and the GEMM adds onto it. A 1-D b would take cuBLASLt's bias
    # epilogue instead, and the memcpy the post discusses would not appear.
    b = torch.randn(n, n, device=run.device, dtype=run.dtype)
    fn = torch.compile(matmul_add) if args.compile else matmul_add

    if args.warmup:
        profiling.warm_up(lambda: fn(x, w, b), run, compiling=args.compile)
    elif args.compile:
        print("compile: happens inside the first recorded step of this cold run")

    profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
    # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
    # Each step's result replaces the last one, so from the third step on the caching
    # allocator reuses a freed block: keeping every result would make each recorded step
    # call cudaMalloc, and the "warm" steps would not be steady state.
    with warnings.catch_warnings():
        # A cold run records from its first call on purpose (COLD_SCHEDULE: warmup=0), and
        # torch warns that no warm-up "can skew profiler results": here that skew is what the
        # lesson shows, so this one warning is dropped, for this schedule only.
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        steps = schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1)
    with profile(
        activities=profiling.activities(run),
        schedule=steps,
        record_shapes=True,  # the table's input dims tell which GEMM is which
        acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
    ) as prof:
        for _ in range(args.wait + args.warmup_steps + args.active):
            with record_function(ANNOTATION):
                y = fn(x, w, b)
            prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    # A cold run's first step is the cold call itself (and, compiled, the compile): the EXPECT
    # describes the steady state, so it is held to the steps after it.
    cold = 0 if args.warmup else 1
    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"], cold_steps=cold)
    # Checked after profiling so that a cold run stays cold.
    check.against_reference(y, reference(x, w, b), run.dtype)
    if args.bench:
        model = traffic_model(n, elt, compiled=args.compile)
        bench.report(lambda: fn(x, w, b), run=run, model=model, trace=seen.trace, args=args)
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
