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

--backend all profiles math, efficient, flash and cudnn in turn (a trace and a table each,
named after the backend) and ends with one table: kernels, GPU time and CPU time per forward,
the main kernel's estimated occupancy, and, for a backend that cannot run here, why.

    uv run 04_c_sdpa_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --backend flash
    uv run 04_c_sdpa_attention.py --backend all
"""

import contextlib
import re
import statistics
import sys
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling, shapes
from common.measuring import bench, traffic
from models import attention_reference as reference
from tracereader.expectations import Expect

SCRIPT = "04_c_sdpa_attention"
ANNOTATION = "attn_fwd"
BACKENDS = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
# What SDPA's CPU op says about the backend that ran (auto's choice), by op-name prefix.
DISPATCHED = {
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def pinned(backend: str):
    """Restrict SDPA to one backend for the block; auto leaves the choice to SDPA."""
    return contextlib.nullcontext() if backend == "auto" else sdpa_kernel(BACKENDS[backend])


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
}


def traffic_model(sizes: shapes.AttentionSizes, elt: int, backend: str) -> list[traffic.Kernel]:
    """Fused backends (and auto, which picks one): q, k, v read once, the output written once,
    half the GEMM FLOPs (the masked blocks are skipped). math, in float32: the upcasts, q and k
    each scaled by sqrt(scale), the [S, S] mask built, the first GEMM writing the scores, the
    mask added in place, softmax, _safe_softmax's guard against fully masked rows (isneginf,
    all, where), the weights cast back, the second GEMM, the output cast back; the GEMMs'
    full 4*B*H*S^2*D FLOPs."""
    bh, s, d, n, p = sizes.batch_heads, sizes.seq, sizes.head_dim, sizes.qkv, sizes.scores
    if backend != "math":
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


class CannotRun(Exception):
    """The pinned backend has no kernel for this device, dtype or shape."""


def try_once(backend: str, run: cli.Run, q, k, v) -> torch.Tensor:
    """One call under the pin (the caller holds it): the output, or CannotRun with SDPA's
    reason. SDPA gives its reasons as warnings and then raises a generic RuntimeError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            y = attention(q, k, v)
        except RuntimeError as err:
            text = str(err)
            if "No available kernel" not in text and "No viable backend" not in text:
                raise
            raise CannotRun(why_not(backend, run, caught, err)) from None
    for w in caught:  # a backend that ran may still have something to say
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return y


# How SDPA's "<kernel> not used because:" warnings name each backend.
HEADINGS = {"efficient": "memory efficient", "flash": "flash attention", "cudnn": "cudnn"}


def why_not(backend: str, run: cli.Run, caught, err: RuntimeError) -> str:
    """SDPA's reason in one line. On a GPU, a refused call warns "<kernel> not used because:"
    for each fused kernel in turn, each heading followed by its reasons; the pinned backend's
    reasons are the ones that matter (the others only say they were switched off)."""
    if not run.on_gpu:
        return f"{backend} has no CPU kernel (on a CPU, SDPA runs math and flash)"
    lines = [_warning_text(w.message) for w in caught]
    reasons, inside = [], False
    for line in lines:
        if line.lower().endswith("not used because:"):
            inside = line.lower().startswith(HEADINGS[backend])
        elif inside and line:
            reasons.append(line)
    if not reasons:  # an SDPA that words its warnings otherwise: its first specific one
        reasons = [x for x in lines if x and not x.lower().endswith("because:")][:1]
    return _short("; ".join(reasons) if reasons else cli.one_line(err))


def _warning_text(message) -> str:
    """A warning's first line without the "(Triggered internally at file:line.)" that
    C++ warnings carry."""
    text = str(message).strip()
    first = text.splitlines()[0] if text else ""
    return re.sub(r"\s*\(Triggered internally at [^)]*\)\s*$", "", first).strip()


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


@dataclass
class Row:
    """One backend's line of the comparison table."""

    backend: str
    status: str
    kernels: str = "-"
    gpu_us: str = "-"
    cpu_us: str = "-"
    occupancy: str = "-"
    main_kernel: str = "-"
    occupancy_unmeasured: bool = False


def summarize(backend: str, trace) -> Row:
    """Per forward, medians over the recorded steps: the annotated region's CPU time; on a
    GPU also the step's kernels (memcpys and memsets counted apart), their summed GPU time,
    and the longest kernel's estimated achieved occupancy (from the kernel event's args,
    where the reader provides them)."""
    cpu = [op.dur for s in trace.steps for op in s.cpu_ops if op.name == ANNOTATION]
    ops = {n for s in trace.steps for n in s.op_names()}
    ran = [v for prefix, v in DISPATCHED.items() if any(n.startswith(prefix) for n in ops)]
    status = f"ran (SDPA chose {ran[0]})" if backend == "auto" and ran else "ran"
    row = Row(backend, status, cpu_us=f"{statistics.median(cpu):.1f}" if cpu else "-")
    if trace.device is None or not trace.steps:
        return row

    def per_step(kind: str) -> str:
        return "/".join(
            str(n) for n in sorted({sum(i.kind == kind for i in s.gpu) for s in trace.steps})
        )

    row.kernels = per_step("kernel") + "".join(
        f" +{per_step(kind)} {kind}" for kind in ("memcpy", "memset") if per_step(kind) != "0"
    )
    row.gpu_us = f"{statistics.median(s.gpu_time for s in trace.steps):.1f}"
    last = [i for i in trace.steps[-1].gpu if i.kind == "kernel"]
    if last:
        main = max(last, key=lambda i: i.dur)
        name = main.name.removeprefix("void ")
        row.main_kernel = name if len(name) <= 34 else name[:31] + "..."
        occupancy = (getattr(main, "args", None) or {}).get("est. achieved occupancy %")
        if isinstance(occupancy, int | float):
            row.occupancy = f"{occupancy:g}%"
            row.occupancy_unmeasured = occupancy == 0 and main.runtime == "cuLaunchKernelEx"
    return row


def comparison(rows: list[Row], title: str, *, on_gpu: bool) -> str:
    """The summary table, one row per backend; a CPU run keeps only the CPU time."""
    columns = [
        ("backend", lambda r: r.backend),
        ("kernels", lambda r: r.kernels),
        ("GPU us", lambda r: r.gpu_us),
        ("CPU us", lambda r: r.cpu_us),
        ("occupancy", lambda r: r.occupancy + ("*" if r.occupancy_unmeasured else "")),
        ("main kernel", lambda r: r.main_kernel),
        ("status", lambda r: r.status),
    ]
    if not on_gpu:
        columns = [c for c in columns if c[0] in ("backend", "CPU us", "status")]
    cells = [[head for head, _ in columns]] + [[cell(r) for _, cell in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [title]
    for line in cells:
        lines.append(
            "  " + "  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        )
    if any(r.occupancy_unmeasured for r in rows):
        lines.append(
            "  * launched with cuLaunchKernelEx: the profiler reports no achieved occupancy for "
            "such launches; estimate it from the kernel's registers, shared memory and block size"
        )
    if not on_gpu:
        lines.append("  (a CPU run: kernels, GPU time and occupancy need a CUDA GPU)")
    return "\n".join(lines)


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_attention_flags(parser)
    parser.add_argument(
        "--backend",
        choices=["auto", *BACKENDS, "all"],
        default="auto",
        help="the SDPA backend to pin with sdpa_kernel: auto (SDPA chooses, no pin), math, "
        "efficient, flash, cudnn, or all (each of the four in turn, then one comparison "
        "table) (default: auto)",
    )
    cli.explain_compile(
        parser,
        "not offered here (refused): SDPA already is the kernel each backend runs, and "
        "compiling would let Inductor re-pick or decompose the backend this lesson pins; "
        "04_a and 04_b show what torch.compile does to attention",
    )
    return parser.parse_args(argv)


def tag(args, run: cli.Run, backend: str) -> str:
    return f"{outputs.run_tag(shapes.attention_tag(args), args, run)}_{backend}"


@dataclass
class Result:
    row: Row
    out: outputs.Outputs | None = None
    as_expected: bool = True
    wrong: bool = False


def profile_backend(backend: str, args, run: cli.Run, q, k, v, ref: dict) -> Result:
    out = outputs.prepare(args.traces_dir, SCRIPT, tag(args, run, backend), gzip=args.gzip)
    with torch.no_grad(), pinned(backend):
        try_once(backend, run, q, k, v)  # raises CannotRun before anything is written
        y = profiling.warm_up(lambda: attention(q, k, v), run)
        if "out" not in ref:  # computed once, for every backend alike
            ref["out"] = reference(q, k, v)
        check.against_reference(y, ref["out"], run.dtype)
        del y

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
    row = summarize(backend, seen.trace)
    if backend == "auto":
        print(f"auto: {row.status}")
    return Result(row, out, seen.as_expected)


def main(argv=None) -> int:
    args = parse(argv)
    if args.compile:
        raise cli.UsageError(
            "04_c_sdpa_attention.py does not take --compile: each backend already is its "
            "kernel(s); run 04_a or 04_b with --compile to see what the compiler does"
        )
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
    )

    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))
    ref: dict = {}

    if args.backend != "all":
        try:
            result = profile_backend(args.backend, args, run, q, k, v, ref)
        except CannotRun as why:
            raise cli.UsageError(f"--backend {args.backend} cannot run here: {why}") from None
        return profiling.finish(args, result.out, result.as_expected)

    results = []
    for backend in BACKENDS:
        print(f"\n=== backend: {backend} ===")
        try:
            results.append(profile_backend(backend, args, run, q, k, v, ref))
        except CannotRun as why:
            print(f"{backend}: cannot run here: {why}")
            results.append(Result(Row(backend, f"cannot run: {why}")))
        except check.MismatchError as err:
            results.append(Result(Row(backend, f"WRONG OUTPUT: {err}"), wrong=True))
    where = torch.cuda.get_device_name(run.device) if run.on_gpu else "CPU"
    print()
    print(
        comparison(
            [r.row for r in results],
            f"backends compared ({shapes.attention_tag(args)}, {run.dtype_name}, {where}; "
            f"per forward, median of the {args.active} recorded steps):",
            on_gpu=run.on_gpu,
        )
    )
    written = [r for r in results if r.out is not None]
    if not written:
        raise cli.UsageError("no SDPA backend could run here")
    code = profiling.finish(args, written[-1].out, all(r.as_expected for r in results))
    return 1 if any(r.wrong for r in results) else code


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
