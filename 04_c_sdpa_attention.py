"""Part 3, third rung: `F.scaled_dot_product_attention(q, k, v, is_causal=True)` and the four
backends PyTorch can run behind that one call.

You will learn: to pin an SDPA backend with `torch.nn.attention.sdpa_kernel`, to tell the
backends apart in a trace (kernel count, CPU dispatch chain, kernel names), and to read a
kernel's footprint (registers, shared memory, estimated achieved occupancy) from its event.

Guess first. Per recorded step, on a GPU, bf16:
  math       PyTorch's op-by-op reference path, about twenty kernels and slower than 04_b:
             q, k, v are upcast to float32, so both GEMMs run on CUDA cores (sgemm or ffma in
             their names, no Tensor cores); the causal mask is built again on every call
             (aten::ones, aten::tril, aten::where); aten::_safe_softmax adds kernels that
             zero rows with every key masked, where a plain softmax would return NaN.
  efficient  one fused kernel, CUTLASS's fmha (xformers' memory-efficient attention).
  flash      one fused kernel, the FlashAttention-2 code vendored in PyTorch; its estimated
             occupancy is low on purpose (many registers and much shared memory per block).
  cudnn      one fused kernel that cuDNN generates for this problem; the CPU lane has no
             aten::transpose (efficient and flash view q, k, v and the output transposed).
             It is launched with cuLaunchKernelEx, which leaves the profiler's occupancy
             estimate at 0: a hole in the measurement, not an idle GPU.
  auto       SDPA's own pick among those; the CPU lane says which one ran.
  The fused kernels may come with a Memset. They skip the key blocks above the diagonal, so
  they do half the FLOPs of the naive GEMMs; math computes every score.
On a CPU: math runs, and so does flash, as aten::_scaled_dot_product_flash_attention_for_cpu:
the same tiled algorithm with an online softmax, on CPU cores, so there are no Tensor cores
or occupancy to look at. efficient and cudnn have no CPU kernel: refused in one line.

FlashAttention-4 (flash-attn-4, `uv sync --extra hopper`; CuTe DSL kernels JIT-compiled on the
GPU, seconds on the first call of each shape, in the warm-up), two ways:
  fa4        flash_attn.cute.flash_attn_func called directly on q, k, v viewed as [batch, seq,
             heads, head_dim]: one kernel, kernel_cutlass_kernel_flash_attn... on Hopper, and
             no aten::scaled_dot_product_attention on the CPU lane. SM80 (forward), SM90.
  fa4-sdpa   the same kernel behind SDPA's flash backend: torch.nn.attention.
             activate_flash_attention_impl("FA4") (a prototype of torch 2.11 on; it needs
             flash-attn-4 4.0.0b18 on torch 2.11, any on 2.15) replaces aten::_scaled_dot_
             product_flash_attention's CUDA kernel by a Python function, so every call pays
             SDPA's dispatch, that Python wrapper (transposed views, the output allocated, a fill
             kernel for bookkeeping) and FA4's own Python interface before the launch. SM90.
  Guess: the same GPU time, and the routed call's CPU time well above the direct call's; the
  run prints where each forward's host time goes: the self time of every op inside attn_fwd
  (an op's duration less what is nested in it), Python outside any op, the runtime calls.

--backend all profiles math, efficient, flash and cudnn in turn, then fa4 and fa4-sdpa where
flash-attn-4 imports and the GPU can run them (a trace and a table each, named after the
backend) and ends with one table: kernels, GPU time and CPU time per forward, the main
kernel's estimated occupancy, and, for a backend that cannot run here, why. On a CPU, fa4 and
fa4-sdpa are refused in one line.

    uv run 04_c_sdpa_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --backend flash
    uv run 04_c_sdpa_attention.py --backend all
    uv run --extra hopper 04_c_sdpa_attention.py --backend fa4-sdpa --seq 4096 --head_dim 128
"""

import contextlib
import importlib.metadata
import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, record_function, schedule

import tracereader
from common import check, cli, outputs, profiling, sdpa, shapes
from common.measuring import bench, traffic
from modules.models import attention_reference as reference
from tracereader import Expect

SCRIPT = "04_c_sdpa_attention"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# measured: 21 a backend (tools/dev/step_memory.py, CPU); --backend all profiles up to 4
EVENTS_PER_STEP = 100
ANNOTATION = "attn_fwd"
BACKENDS = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
# FlashAttention-4 called directly, and routed through SDPA's flash backend.
FA4_BACKENDS = ("fa4", "fa4-sdpa")
# Compute capabilities (major) each runs on: FA4's kernels (SM80 forward, SM90, SM100), and
# torch's route, whose wrapper refuses anything but 9.x and 10.x.
FA4_MAJORS = {"fa4": (8, 9, 10), "fa4-sdpa": (9, 10)}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def fa4_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """FA4 on SDPA's [batch, heads, seq, head_dim] tensors, viewed as its [batch, seq, heads,
    head_dim] (no copy: the last dim stays contiguous); it returns (out, lse)."""
    from flash_attn.cute import flash_attn_func

    out, _lse = flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)
    return out.transpose(1, 2)


def forward_of(backend: str):
    return fa4_attention if backend == "fa4" else attention


@contextlib.contextmanager
def routed_to_fa4():
    """SDPA's flash backend served by FlashAttention-4 for the block, then torch's own again."""
    from torch.nn import attention as nn_attention

    nn_attention.activate_flash_attention_impl("FA4")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            yield
    finally:
        nn_attention.restore_flash_attention_impl()


def pinned(backend: str):
    """Restrict SDPA to one backend for the block; auto leaves the choice to SDPA."""
    if backend == "fa4-sdpa":
        return routed_to_fa4()
    if backend in ("auto", "fa4"):
        return contextlib.nullcontext()
    return sdpa_kernel(BACKENDS[backend])


def fa4_unavailable(backend: str, run: cli.Run) -> str | None:
    """Why `backend` (fa4 or fa4-sdpa) cannot run here, or None."""
    if not run.on_gpu:
        return "FlashAttention-4 is CUDA code (CuTe DSL kernels) with no CPU build"
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as err:  # ImportError, or the CuTe DSL's CUDA library missing
        return (
            f"flash_attn.cute does not import ({cli.one_line(err, 160)}); install "
            "flash-attn-4: uv sync --extra hopper"
        )
    if run.dtype not in (torch.bfloat16, torch.float16):  # FA4 asserts it on its inputs
        return f"FlashAttention-4 takes bf16 or fp16 inputs, not {run.dtype_name}"
    major, minor = torch.cuda.get_device_capability(run.device)
    if major not in FA4_MAJORS[backend]:
        majors = " or ".join(f"{m}.x" for m in FA4_MAJORS[backend])
        return f"{backend} needs compute capability {majors}; this GPU is {major}.{minor}"
    if backend == "fa4-sdpa":
        from torch.nn import attention as nn_attention

        if not hasattr(nn_attention, "activate_flash_attention_impl"):
            return (
                f"torch {torch.__version__} has no torch.nn.attention."
                "activate_flash_attention_impl (SDPA's FA4 route, a prototype)"
            )
        fa4 = importlib.metadata.version("flash-attn-4")
        if torch.__version__ < (2, 15) and fa4 != "4.0.0b18":  # its forward's return changed
            return (
                f"torch {torch.__version__.split('+')[0]}'s FA4 route unpacks two values from "
                f"FA4's forward, which flash-attn-4 {fa4} no longer returns: use 4.0.0b18"
            )
    return None


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "math": Expect(
        gpu={"gemm": 2, "attention": 0},
        cpu_present=(
            "aten::_scaled_dot_product_attention_math",
            "aten::tril",
            "aten::_safe_softmax",
        ),
        # math computes in float32 whatever --dtype (bf16/fp16 inputs upcast): sgemm, ffma
        gemm_precision="fp32 CUDA cores",
        why="op by op in float32: two GEMMs, the mask rebuilt, a NaN-safe softmax",
    ),
    "efficient": Expect(
        gpu={"attention": 1, "gemm": 0, "elementwise": 0},
        cpu_present=("aten::_scaled_dot_product_efficient_attention",),
        cpu_absent=("aten::_safe_softmax",),
        why="one fused kernel: q, k, v in, the output out",
    ),
    "flash": Expect(
        gpu={"attention": 1, "gemm": 0, "elementwise": 0},
        # aten::_scaled_dot_product_flash_attention on a GPU, ..._for_cpu on a CPU
        cpu_present=("aten::_scaled_dot_product_flash_attention*",),
        cpu_absent=("aten::_safe_softmax",),
        why="one fused kernel, tiled so the scores never leave the chip",
    ),
    "cudnn": Expect(
        gpu={"attention": 1, "gemm": 0, "elementwise": 0},
        cpu_present=("aten::_scaled_dot_product_cudnn_attention",),
        cpu_absent=("aten::transpose", "aten::_safe_softmax"),
        why="one kernel generated for this problem, no transposed views",
    ),
    "auto": Expect(
        gpu={"attention": 1, "gemm": 0},
        cpu_present=("aten::scaled_dot_product_attention",),
        why="SDPA picks a fused backend when one can run",
    ),
    "fa4": Expect(
        gpu={"attention": 1, "gemm": 0},
        cpu_absent=("aten::scaled_dot_product_attention", "aten::_safe_softmax"),
        why="one CuTe-DSL kernel launched from FA4's Python interface, no SDPA dispatch",
    ),
    "fa4-sdpa": Expect(
        gpu={"attention": 1, "gemm": 0},
        cpu_present=("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash*"),
        cpu_absent=("aten::_safe_softmax",),
        why="SDPA's flash op, whose CUDA kernel is now torch's Python wrapper around FA4",
    ),
}


def traffic_model(sizes: shapes.AttentionSizes, elt: int, backend: str) -> list[traffic.Kernel]:
    """Fused backends (and auto, which picks one): q, k, v read once, the output written once,
    half the GEMM FLOPs (the masked blocks are skipped). math, in float32: the upcasts, q and k
    each scaled by sqrt(scale), the [S, S] mask built, the first GEMM writing the scores, the
    mask added in place, softmax, _safe_softmax's guard against fully masked rows (isneginf,
    all, where), the weights cast back, the second GEMM, the output cast back; the GEMMs'
    full 4*B*H*S^2*D FLOPs."""
    bh, s, d, n, p = sizes.batch_heads, sizes.seq, sizes.head_dim, sizes.qkv, sizes.scores
    if backend != "math":  # FA4 too: the same reads and writes, the same skipped blocks
        return [traffic.fused_attention(f"{backend} attention", bh, s, d, elt, causal=True)]
    upcast = elt < 4  # bf16/fp16 inputs are computed in float32
    casts_in = [traffic.convert(f"{t} -> float32", n, elt, 4) for t in "qkv"] if upcast else []
    # math returns the weights too, cast back like the output (SDPA then drops them)
    cast_attn = [traffic.convert("attn -> input dtype", p, 4, elt)] if upcast else []
    cast_out = [traffic.convert("out -> input dtype", n, 4, elt)] if upcast else []
    return [
        *casts_in,
        traffic.elementwise("q * sqrt(scale)", n, 4, reads=1),
        traffic.elementwise("mask: ones, tril, where", sizes.mask, 4, reads=0),
        traffic.elementwise("k^T * sqrt(scale)", n, 4, reads=1),
        traffic.batched_gemm("q @ k^T GEMM (float32)", bh, s, d, s, 4),
        traffic.elementwise("scores += mask", p, 4, reads=1, broadcast_bytes=4 * sizes.mask),
        traffic.rowwise("softmax", p, 4),
        traffic.convert("isneginf(scores)", p, 4, 1),
        traffic.Kernel("all(): fully masked rows", "aten", 0, p + bh * s),
        traffic.elementwise("where(masked row, 0, p)", p, 4, reads=1, broadcast_bytes=bh * s),
        *cast_attn,
        traffic.batched_gemm("attn @ v GEMM (float32)", bh, s, s, d, 4),
        *cast_out,
    ]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_attention_flags(parser)
    parser.add_argument(
        "--backend",
        choices=["auto", *BACKENDS, *FA4_BACKENDS, "all"],
        default="auto",
        help="the SDPA backend to pin with sdpa_kernel: auto (SDPA chooses, no pin), math, "
        "efficient, flash, cudnn; fa4 (FlashAttention-4 called directly) or fa4-sdpa (SDPA's "
        "flash backend routed to it), both need flash-attn-4 and a GPU; or all (each in turn, "
        "then one comparison table) (default: auto)",
    )
    cli.refuse_compile(
        parser,
        "SDPA already is the kernel(s) each backend runs, and compiling would let Inductor "
        "re-pick or decompose the backend this lesson pins; run 04_a or 04_b with --compile "
        "to see what the compiler does to attention",
    )
    return parser.parse_args(argv)


def tag(args, run: cli.Run, backend: str) -> str:
    return f"{outputs.run_tag(shapes.attention_tag(args), args, run)}_{backend}"


def profile_backend(backend: str, args, run: cli.Run, q, k, v, ref: dict) -> sdpa.Result:
    if backend in FA4_BACKENDS and (why := fa4_unavailable(backend, run)):
        raise sdpa.CannotRun(why)
    out = outputs.prepare(args.traces_dir, SCRIPT, tag(args, run, backend), gzip=args.gzip)
    attention = forward_of(backend)
    with torch.no_grad(), pinned(backend):
        sdpa.try_once(backend, run, lambda: attention(q, k, v))  # CannotRun: nothing written
        y = profiling.warm_up(lambda: attention(q, k, v), run)
        if "out" not in ref:  # computed once, for every backend alike
            ref["out"] = reference(q, k, v)
        check.against_reference(y, ref["out"], run.dtype)
        del y

        profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
        # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
        with profile(
            activities=profiling.activities(run),
            schedule=schedule(
                wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1
            ),
            record_shapes=True,  # the table's input dims show q, k, v's layout per op
            acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function(ANNOTATION):
                    attention(q, k, v)
                prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    seen = profiling.look(out, EXPECT[backend])
    if args.bench:
        model = traffic_model(shapes.attention_sizes(args), cli.element_size(run), backend)
        with torch.no_grad(), pinned(backend):
            bench.report(
                lambda: attention(q, k, v), run=run, model=model, trace=seen.trace, args=args
            )
    row = tracereader.sdpa_row(backend, seen.trace, ANNOTATION)
    if backend in FA4_BACKENDS:  # direct against routed: the same kernel, other host work
        print(tracereader.host_time(seen.trace, ANNOTATION))
    if backend == "auto":
        print(f"auto: {row.status}")
    return sdpa.Result(row, out, seen.as_expected)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    # math's peak: two float32 score buffers and a boolean one (softmax's input and output,
    # the fully-masked-row test; 1396 MiB in all on an H100 at the default shape), plus
    # float32 copies of q, k, v, the scaled q and k and the output. Fused backends: no scores.
    needs_math = args.backend in ("math", "all")
    cli.ensure_fits(
        shapes.attention_bytes_needed(
            args, run, score_bytes=9 if needs_math else 0, fp32_copies=6 if needs_math else 0
        ),
        run,
        trace=cli.profiled(args, EVENTS_PER_STEP),
    )

    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))
    ref: dict = {}

    if args.backend != "all":
        try:
            result = profile_backend(args.backend, args, run, q, k, v, ref)
        except sdpa.CannotRun as why:
            raise cli.UsageError(f"--backend {args.backend} cannot run here: {why}") from None
        return profiling.finish(args, result.out, result.as_expected)

    results = []
    why_not = {b: fa4_unavailable(b, run) for b in FA4_BACKENDS}
    ready = [b for b, why in why_not.items() if why is None]
    for backend, why in why_not.items():
        if why and run.on_gpu:  # on a CPU, FA4 is no candidate at all
            print(f"note: --backend all leaves out {backend}: {why}")
    for backend in [*BACKENDS, *ready]:
        print(f"\n=== backend: {backend} ===")
        profile_one = lambda b=backend: profile_backend(b, args, run, q, k, v, ref)  # noqa: E731
        results.append(sdpa.attempt(backend, profile_one))
    return sdpa.finish_all(results, args, run, shapes.attention_tag(args))


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
