"""Beyond the posts: the GeGLU MLP of 03_simple_mlp.py (models.GeGLUMLP) split tensor-parallel
over N ranks with torch.distributed itself (a DeviceMesh and parallelize_module), profiled on
every rank.

You will learn: what tensor parallelism costs per forward (one all-reduce of the output, and
nothing else), where it shows in a trace (an NCCL kernel on the GPU lane, c10d ops on the CPU
lane), how to read N traces side by side (compute against communication, the part of the
all-reduce nothing hides, the skew between ranks), and when splitting pays off.

The split (Megatron's): gate and up are cut by columns, so each rank computes hidden/N of the
GeGLU activations from the whole input, with no communication; down is cut by rows, so each
rank's product is a partial sum of the output, and one all-reduce adds them up.

Guess first. Per rank and recorded step, N > 1, on a GPU:
  eager     three GEMMs of 1/N the width (aten::mm each), GeLU and mul as two elementwise
            kernels, a Memcpy DtoD (the functional all-reduce clones its input before reducing
            it in place), and one NCCL kernel, ncclDevKernel_AllReduce_Sum_bf16_...: class
            "collective". On the CPU lane: _c10d_functional::all_reduce >
            c10d::allreduce_ > record_param_comms, nccl:all_reduce; then
            _c10d_functional::wait_tensor, which makes the compute stream wait for NCCL's.
  compiled  the same three GEMMs, one Triton kernel for GeLU and mul, and the NCCL kernel;
            no memcpy: Inductor reduces the down GEMM's output in place
            (_c10d_functional::all_reduce_). Plus the compile rows.
  N = 1     no all-reduce at all: DTensor has nothing to reduce.
On a CPU (gloo): the same CPU lane without NCCL's rows; gloo reduces on a thread of its own
(gloo:all_reduce, beside the step), and wait_tensor is where the calling thread waits for it.
Then guess whether N = 2 beats N = 1: each rank's GEMMs shrink by N, but the all-reduce adds
the transfer of the whole [tokens, dim] output. At the post's shape? At a shape 8x larger?
tools/tp_scaling.py measures both, eager and compiled.

    uv run 05_tp_mlp.py     # alone: starts torchrun itself (2 CPU ranks, or a GPU each, 2 at most)
    uv run torchrun --nproc-per-node 2 05_tp_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
    uv run torchrun --nproc-per-node 2 05_tp_mlp.py --compile     # the same shape (the default)
    uv run explain traces/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager       (GPU ranks)
    uv run explain traces/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager_cpu   (CPU ranks, gloo)
"""

import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.profiler import profile, record_function, schedule

import tracereader
from common import check, cli, outputs, profiling, shapes, torchrun
from common.measuring import bench_ranks, traffic
from modules.models import GeGLUMLP
from modules.models import geglu_reference as reference
from tracereader import Expect

SCRIPT = "05_tp_mlp"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# 03_simple_mlp's 37 measured, plus the all-reduce and DTensor's redistribution
EVENTS_PER_STEP = 60
ANNOTATION = "tp_mlp_fwd"


# The parallel plan: columns of gate and up, rows of down. Each rank keeps hidden/N of every
# weight; the input is replicated (every rank gets all of x), the output all-reduced.
PLAN = {
    "gate_proj": ColwiseParallel(),
    "up_proj": ColwiseParallel(),
    "down_proj": RowwiseParallel(),
}


def tp_forward(forward, x: torch.Tensor) -> torch.Tensor:
    """One forward, waited for. RowwiseParallel hands back an AsyncCollectiveTensor: the
    all-reduce is issued, and waited for only when the output is first used (in a model, by
    the residual add after the MLP). Waiting here keeps each step's whole all-reduce inside
    the step. Compiled, the wait is part of the graph and the output a plain tensor."""
    y = forward(x)
    return y.wait() if isinstance(y, AsyncCollectiveTensor) else y


# Guess first: what each recorded step must hold on each rank, for N > 1, in kernel classes.
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 3, "elementwise": 2, "memcpy": 1, "collective": 1, "inductor": 0},
        cpu_present=(
            "aten::linear",
            "aten::mm",
            "aten::gelu",
            "aten::mul",
            "_c10d_functional::all_reduce",  # clones its input, then reduces the clone
            "c10d::allreduce_",  # the process group's in-place all-reduce
            "_c10d_functional::wait_tensor",
        ),
        cpu_absent=("Torch-Compiled Region*",),
        why="three GEMMs of 1/N the width, GeLU and mul, one all-reduce of the output",
    ),
    "compile": Expect(
        gpu={"gemm": 3, "inductor": 1, "elementwise": 0, "memcpy": 0, "collective": 1},
        cpu_present=(
            "Torch-Compiled Region*",
            "aten::mm",
            "_c10d_functional::all_reduce_",  # in place on the down GEMM's output: no clone
            "c10d::allreduce_",
            "_c10d_functional::wait_tensor",
        ),
        cpu_absent=("aten::linear", "aten::gelu", "aten::mul", "_c10d_functional::all_reduce"),
        gemms_as_in="eager",
        why="the GEMMs untouched, GeLU and mul fused, the all-reduce done in place",
    ),
}
# What each backend adds on the calling thread: NCCL records the collective's parameters
# (record_param_comms) and annotates it (nccl:all_reduce); gloo's annotation sits on its own
# thread, outside the step's lane.
BACKEND_ROWS = {"nccl": ("record_param_comms", "nccl:all_reduce"), "gloo": ()}


def expectation(mode: str, backend: str, world: int) -> Expect:
    """EXPECT[mode] for this run: NCCL's rows added; with one rank, no all-reduce at all."""
    expect = EXPECT[mode]
    if world == 1:
        comms = tuple(n for n in expect.cpu_present if "c10d" in n)
        return Expect(
            gpu={**expect.gpu, "collective": 0, "memcpy": 0},
            cpu_present=tuple(n for n in expect.cpu_present if n not in comms),
            cpu_absent=expect.cpu_absent + comms,
            gemms_as_in=expect.gemms_as_in,
            why="one rank: the whole MLP and nothing to reduce",
        )
    return Expect(
        gpu=expect.gpu,
        cpu_present=expect.cpu_present + BACKEND_ROWS[backend],
        cpu_absent=expect.cpu_absent,
        gemms_as_in=expect.gemms_as_in,
        why=expect.why,
    )


def traffic_model(tokens: int, dim: int, hidden: int, elt: int, *, fused: bool):
    """One rank's share: 03_simple_mlp's model at the rank's width (pass hidden/N). The
    all-reduce moves tokens x dim elements over the link, not through HBM: timed apart."""
    gate, up, down = traffic.geglu_projections(tokens, dim, hidden, elt)
    if fused:
        middle = [traffic.elementwise("fused gelu(g) * u", tokens * hidden, elt, reads=2)]
    else:
        middle = [
            traffic.elementwise("gelu(g)", tokens * hidden, elt, reads=1),
            traffic.elementwise("h * u", tokens * hidden, elt, reads=2),
        ]
    return [gate, up, *middle, down]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_mlp_flags(parser)
    torchrun.add_flags(parser)
    return parser.parse_args(argv)


# long: the lesson's steps in the order the post teaches them (build, check, profile, read);
# split, the profiler loop would hide in a helper
def main(argv=None) -> int:
    args = parse(argv)
    launch = torchrun.launched(f"{SCRIPT}.py", argv, device=args.device)  # from torchrun
    if args.hidden % launch.world:
        raise cli.UsageError(
            f"--hidden {args.hidden} does not split over {launch.world} ranks: choose a "
            f"multiple of {launch.world} (each rank keeps hidden/N columns of gate and up)"
        )
    run = torchrun.resolve(args, launch)  # this rank's GPU (LOCAL_RANK), or the CPU
    tag = outputs.run_tag(shapes.mlp_tag(args), args, run, extra=f"tp{launch.world}")
    out = torchrun.prepare(args.traces_dir, SCRIPT, tag, launch, gzip=args.gzip)
    group = torchrun.init_process_group(run, launch, timeout_s=args.timeout)
    # The whole MLP and the float32 reference live on every rank before the split.
    extra = 3 * args.dim * args.hidden // launch.world * cli.element_size(run)
    extra += bench_ranks.LINK_BYTES if args.bench and run.on_gpu else 0
    cli.ensure_fits(
        shapes.mlp_bytes_needed(args, run) + extra, run, trace=cli.profiled(args, EVENTS_PER_STEP)
    )

    # Every rank builds the whole MLP and x from the same seed, so every rank holds the same
    # weights and input; the reference is the single-process MLP's output, before the split.
    mesh = init_device_mesh(run.device.type, (launch.world,))
    mlp = GeGLUMLP(args.dim, args.hidden).to(run.device, run.dtype).eval()
    x = torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)
    with torch.no_grad():
        expected = reference(x, mlp)
    parallelize_module(mlp, mesh, PLAN)  # each rank keeps its shard of every weight
    forward = torch.compile(mlp) if args.compile else mlp

    with torch.no_grad():
        y = profiling.warm_up(lambda: tp_forward(forward, x), run, compiling=args.compile)
        check.against_reference(y, expected, run.dtype)
        del y, expected

        profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
        # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
        with profile(
            activities=profiling.activities(run),
            schedule=schedule(
                wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1
            ),
            record_shapes=True,  # input dims tell the GEMMs apart and size the all-reduce
            acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function(ANNOTATION):
                    tp_forward(forward, x)
                prof.step()

    # Every rank writes its own trace, rank 0 also the table; published only if all succeed.
    with torchrun.publishing(out) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        if table_tmp is not None:
            table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
            table_tmp.write_text(table + "\n")

    measured = None
    if args.bench:  # every rank takes part; rank 0 reports
        with torch.no_grad():
            step = lambda: tp_forward(forward, x)  # noqa: E731
            # the all-reduce's tensor is the output, shaped like x
            measured = bench_ranks.measure(step, run=run, group=group, reduced=x, args=args)
    if launch.rank != 0:
        return 0

    profiling.show(table, out, run)
    mode = "compile" if args.compile else "eager"
    seen = profiling.look(out, expectation(mode, group.backend, launch.world))
    stem = out.trace.parent / tag
    files = torchrun.rank_files(out, tag, launch)
    reading = tracereader.read_run(
        stem, files, loaded={launch.rank: seen.trace}, link=bench_ranks.link_of(measured)
    )
    print(tracereader.run_text(reading))
    print(f"all ranks, side by side: {cli.command_hint('explain', stem)}")
    if measured is not None:
        elt, tokens = x.element_size(), args.batch * args.seq
        model = traffic_model(
            tokens, args.dim, args.hidden // launch.world, elt, fused=args.compile
        )
        bench_ranks.report(measured, run=run, model=model)
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(torchrun.run_main(main, self_launch=True))  # alone: starts torchrun
