"""Part 2, fourth rung: gate and up in one hand-written Triton kernel, the GeGLU in its epilogue.

You will learn: that a GEMM's epilogue can do more than add a bias. One kernel multiplies x by
gate and up at once and, before it writes anything, turns each pair (g, u) into
gelu_tanh(g) * u: g and u live in registers and never reach HBM. You will see how to pack two
weights so that one tile holds matching gate and up columns, how to register a Triton kernel as
a custom op that torch.compile sees through (no graph break), and what a TMA, persistent kernel
changes on Hopper.

The kernel and its module live in modules/geglu/fused.py; read it beside this file.
GeGLUMLP's weights (modules/models.py), with gate and up packed once so that a tile holds
matching columns of both:
    m = fused_gate_up_geglu(x, gate_up)   # one Triton GEMM, gelu_tanh(g) * u in its epilogue
    y = down_proj(m)                      # cuBLAS, as in 03_simple_mlp.py

Guess first. Per recorded step, on a GPU:
  eager     Python launches one Triton kernel (fused_gate_up_geglu_tma_kernel on Hopper,
            fused_gate_up_geglu_kernel elsewhere; a cuLaunchKernelEx right under
            fused_mlp_fwd), then aten::linear > aten::mm launches one cuBLAS GEMM for
            down_proj. Two kernels (03_simple_mlp.py: five eager, four compiled). No
            aten::gelu, no aten::mul, no elementwise kernel. The only intermediate in HBM is
            m = gelu(g) * u, written once and read once by the down GEMM.
  compiled  the same two kernels inside a Torch-Compiled Region, no graph break: Dynamo
            records the custom op profiling_pytorch::fused_gate_up_geglu, Inductor launches
            our kernel as it is and cuBLAS for down. There is nothing left to fuse.
  timing    the fused kernel should take about as long as cuBLAS takes for gate and up alone,
            because the epilogue's arithmetic is small beside the matrix work. The forward then
            saves the elementwise kernel and the round trip of g and u through HBM.
  --bench   on SM90 where quack-kernels imports, also QuACK's gemm_gated (the same fusion as
            one CuTe-DSL GEMM) with cuBLAS down, tuned=False and tuned=True, a line each: the
            strongest public Hopper kernel for this fusion, timed as this forward is.
The kernel needs a CUDA GPU. On a CPU, TRITON_INTERPRET=1 runs it through Triton's interpreter,
which simulates every program in NumPy, so use tiny shapes only. Without that variable the
script says in one line that it needs a GPU.

    uv run 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
    uv run 03_fused_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --compile
    uv run 03_fused_mlp.py --kernel plain          # the pointer-load path that Ampere runs
    uv run --extra hopper 03_fused_mlp.py --bench  # beside QuACK's gated GEMM (SM90)
    uv run 03_fused_mlp.py --kernel gluon --proton # inside the warp-specialized kernel (SM90)
    uv run 03_fused_mlp.py --kernel hopper --proton # inside the plain Triton kernel, beside it

--proton (SM90; the gluon kernel, or --kernel hopper): Proton, Triton's intra-kernel profiler,
timestamps scopes inside modules/geglu/gluon.py's kernel, per warp: the producer waiting for a free
slot, the consumers waiting for data and running their epilogue. Its Chrome trace lands beside
torch.profiler's (..._proton.chrome_trace). The reading (explain --proton), per warp, as a share
of its block's span: a consumer warp waiting for data means compute waits on loads (memory- or
latency-bound); the producer waiting for slots means loads wait on compute (the tensor cores set
the pace); both at once, a full ring whose data still lands late. Sums over the trace would mix
8 consumer warps with 1 producer warp a block; uv run explain --proton TRACE reads a saved
one. With --kernel hopper the plain kernel's warps each time their main loop and their epilogue:
all of a block's warps store at once, and that share of the span the tensor cores idle.
    TRITON_INTERPRET=1 uv run 03_fused_mlp.py --batch 2 --seq 3 --dim 16 --hidden 32
"""

import sys
import time
from dataclasses import replace

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, fused_kernel, outputs, profiling, shapes
from common.measuring import bench, timing, traffic
from modules import quack_gemm, triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import shared as geglu_shared
from modules.models import GeGLUMLP
from modules.models import geglu_reference as reference
from tracereader import Expect

SCRIPT = "03_fused_mlp"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# as 03_simple_mlp's 37 measured, rounded up: the same MLP, fewer ops
EVENTS_PER_STEP = 40
ANNOTATION = "fused_mlp_fwd"


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 1, "triton": 1, "elementwise": 0, "inductor": 0},
        cpu_present=("aten::mm",),
        # eager skips the dispatcher: the op is there for torch.compile (gate_up_geglu)
        cpu_absent=(fused_geglu.OP, "aten::gelu", "aten::mul", "Torch-Compiled Region*"),
        why="gate, up and the GeGLU in one Triton kernel, down in one cuBLAS GEMM",
    ),
    "compile": Expect(
        gpu={"gemm": 1, "triton": 1, "elementwise": 0, "inductor": 0},
        cpu_present=("Torch-Compiled Region*", "aten::mm"),
        cpu_absent=("aten::gelu", "aten::mul"),
        gemms_as_in="eager",
        why="Inductor calls the same two kernels: nothing is left to fuse",
    ),
}


def traffic_model(tokens: int, dim: int, hidden: int, elt: int) -> list[traffic.Kernel]:
    """The fused kernel is the GEMM [tokens, dim] x [dim, 2 * hidden] whose epilogue turns each
    (g, u) pair into one value: it reads x once and both weights once and writes only m
    [tokens, hidden]. g and u never reach HBM (eager writes g, u and h and reads them back).
    The down GEMM is unchanged."""
    gate_up = traffic.gemm("gate+up GEMM", tokens, dim, 2 * hidden, elt)
    fused = replace(  # gate+up's FLOPs, precision and shape (its ceiling's probe)
        gate_up,
        label="fused gate/up GEMM + GeGLU",
        cls="elementwise",  # the class --bench matches to the trace's Triton kernels
        bytes=gate_up.bytes - tokens * hidden * elt,  # writes [tokens, hidden], not 2 * hidden
    )
    down = traffic.gemm("down_proj GEMM", tokens, hidden, dim, elt)
    return [fused, down]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_mlp_flags(parser)
    parser.add_argument(
        "--kernel",
        choices=["auto", "plain", "hopper", "gluon"],
        default="auto",
        help="plain: pointer loads, one program per tile (Ampere, the interpreter); hopper: TMA "
        "and a persistent grid (compute capability 9.x, bf16/fp16); gluon: "
        "modules/geglu/gluon.py's "
        "warp-specialized kernel (SM90, eager only); auto: hopper where it applies, gluon "
        "instead on the GPUs where it measured faster (default: auto)",
    )
    parser.add_argument(
        "--proton",
        action="store_true",
        help="also record the kernel's timelines with Proton (SM90; a Chrome trace beside the "
        "profiler's): gluon's producer and consumers (the default), or with --kernel hopper "
        "the plain Triton kernel's main loop and epilogue per warp",
    )
    return parser.parse_args(argv)


def refuse_proton(args) -> None:
    """One line, before any work, where Proton cannot look inside the gluon kernel."""
    if not args.proton:
        return
    if args.kernel == "plain":
        raise cli.UsageError(
            "--proton instruments the gluon and hopper kernels (SM90); got --kernel plain"
        )
    if args.device == "cpu" or not torch.cuda.is_available():
        raise cli.UsageError("--proton needs an SM90 GPU (H100, H200): Proton times the GPU's code")
    major, minor = torch.cuda.get_device_capability()
    if major != 9:
        raise cli.UsageError(f"--proton needs an SM90 GPU (H100, H200); this is {major}.{minor}")
    try:
        import triton.profiler  # noqa: F401
    except ImportError as err:
        raise cli.UsageError(f"--proton: Triton's Proton does not import ({err})") from None
    if args.kernel == "auto":
        args.kernel = "gluon"


def record_proton(fused, x, out) -> None:
    """Run the kernel once under Proton's instrumentation and read its scopes back per warp
    (explain --proton): gluon's waits, or the hopper kernel's main loop and epilogue, as shares
    of the block's span, and the verdict. The hopper kernel runs its unflattened loop here: in
    the flattened one the compiler's peeling duplicates the scopes' records."""
    import dataclasses
    import os

    import triton.profiler as proton
    from triton.profiler import language as pl

    from modules.geglu import gluon as gluon_geglu
    from tracereader.analyses import proton as warps
    from tracereader.render.proton import summary
    from tracereader.trace.proton import load

    stem = out.trace.name.split(".")[0]
    name = out.trace.with_name(f".{stem}_proton.partial")  # Proton adds .chrome_trace
    written = name.with_name(name.name + ".chrome_trace")
    final = out.trace.with_name(f"{stem}_proton.chrome_trace")
    flat = x.reshape(-1, x.shape[-1])
    config = fused_geglu.CONFIGS[fused.config]
    programs = triton_support.sm_count(x.device)
    # Proton's buffer in global memory: the kernel's ring fills the shared memory.
    mode = proton.mode.Default(buffer_type="global")
    proton.start(str(name), data="trace", backend="instrumentation", mode=mode)
    try:
        if config.path == geglu_shared.GLUON:
            gluon_geglu.launch(flat, fused.gate_up, fused.hidden, config, programs, proton=True)
        else:  # Proton times Gluon's code unless told that triton.language's may be timed too
            pl.enable_semantic("triton")
            plain = dataclasses.replace(config, flatten=False)
            fused_geglu.launch(flat, fused.gate_up, fused.hidden, plain, proton=True)
        torch.cuda.synchronize()
    finally:
        proton.finalize()
    os.replace(written, final)
    print(f"proton: {final}")
    for line in summary(warps.read(load(final))):
        print(f"  {line}")


def main(argv=None) -> int:
    args = parse(argv)
    refuse_proton(args)
    fused_kernel.refuse_unrunnable(args.device, args.compile, args.kernel)
    run = cli.resolve(args)
    kernel = fused_kernel.choose_kernel(args.kernel, run, args.dim, args.hidden, args.compile)
    packed_bytes = 2 * args.dim * args.hidden * cli.element_size(run)
    cli.ensure_fits(
        shapes.mlp_bytes_needed(args, run) + packed_bytes,
        run,
        trace=cli.profiled(args, EVENTS_PER_STEP),
    )
    out = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(shapes.mlp_tag(args), args, run, extra=kernel),
        gzip=args.gzip,
    )

    mlp = GeGLUMLP(args.dim, args.hidden).to(run.device, run.dtype).eval()
    config = fused_kernel.config_name(kernel, run, auto=args.kernel == "auto")
    fused = fused_geglu.FusedGeGLUMLP(mlp, config).eval()
    print(f"kernel: {fused.describe()}")
    forward = torch.compile(fused) if args.compile else fused
    x = torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)

    with torch.no_grad():
        if not args.compile:  # Triton compiles the kernel on its first call, then caches it
            start = time.perf_counter()
            forward(x)
            profiling.synchronize(run)
            print(f"triton: first call took {time.perf_counter() - start:.2f} s", end=" ")
            print(f"({fused_geglu.FIRST_CALL})")
        y = profiling.warm_up(lambda: forward(x), run, compiling=args.compile)
        check.against_reference(y, reference(x, mlp), run.dtype)
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

    if args.proton:
        with torch.no_grad():
            record_proton(fused, x, out)
    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        model = traffic_model(args.batch * args.seq, args.dim, args.hidden, x.element_size())
        with torch.no_grad():
            bench.report(lambda: forward(x), run=run, model=model, trace=seen.trace, args=args)
            if run.on_gpu:
                against_quack(lambda: forward(x), mlp, x, run)
    return profiling.finish(args, out, seen.as_expected)


def against_quack(forward, mlp, x, run) -> None:
    """The same fusion by QuACK (gemm_gated, cuBLAS down), timed as ours (do_bench medians,
    ours and each of its variants in turn, in the same power state); its first call, a JIT
    compile (with tuned=True also its autotuning), timed apart."""
    major = torch.cuda.get_device_capability(run.device)[0]
    variants = quack_gemm.variants(major, run.dtype_name)
    if not variants:
        print(f"  QuACK: not compared ({quack_gemm.unavailable(major, run.dtype_name)})")
        return
    ref = reference(x, mlp)
    for what, tuned in variants.items():
        quack = quack_gemm.QuackGeGLUMLP(mlp, tuned=tuned)
        start = time.perf_counter()
        try:  # a JIT compile or an input it rejects: said, and the lesson goes on
            y = quack(x)
            profiling.synchronize(run)
        except Exception as err:
            print(f"  {what}: failed ({cli.one_line(err, 160)}); not timed")
            continue
        first_s = time.perf_counter() - start
        err = check.relative_error(y, ref)
        if err > check.TOLERANCE[run.dtype]:
            print(f"  {what}: WRONG OUTPUT, relative error {err:.2e}; not timed")
            continue
        pair = timing.time_gpu_interleaved({"ours": forward, "theirs": lambda q=quack: q(x)})
        ours, theirs = pair["ours"].median_s, pair["theirs"].median_s
        print(
            f"  {what} + cuBLAS down: {theirs * 1e6:.1f} us against this forward's "
            f"{ours * 1e6:.1f} us (x{ours / theirs:.2f}, {pair['ours'].how}; "
            f"first call {first_s:.1f} s, apart)"
        )


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
