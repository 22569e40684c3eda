"""Beyond the posts: does torch.compile really re-specialize per shape while Liger does not? And
at small batches, is it fusion that loses, or the launches around it?

Part 2 closes on a claim it never measures: Inductor's fused GeGLU kernel is fast because it
was generated for one shape, so changing batch, sequence or hidden size costs a recompile,
while Liger's hand-written kernel runs any shape as it is. This sweep runs the GeGLU MLP of
03_simple_mlp.py over a list of shapes and counts, from Dynamo's own counters, what compiles.
Two more variants pull apart the two things a fused forward removes: kernel launches (the same
kernels replayed from a CUDA graph) and HBM traffic (gate, up and the GeGLU in one GEMM).
Every variant is built from the same seed: the same weights, the same inputs at each shape.

Guess first:
  eager            no compiles; GeLU and mul stay two kernels at every shape.
  compile          (default) the first shape compiles; the next new shape recompiles once with
                   dynamic sizes ("automatic dynamic shapes"), then later batch x seq changes
                   reuse it. A new hidden size is a new module: one more compile.
  compile-static   (dynamic=False) every new shape recompiles, until Dynamo's recompile limit;
                   past it Dynamo runs the frame eagerly. The sweep flags such rows.
  compile-dynamic  (dynamic=True) one compile with symbolic sizes covers batch x seq changes.
  mark-dynamic     torch._dynamo.mark_dynamic on the batch and seq dims: the same, opted in per
                   input rather than for the whole function.
  liger            no compiles at all (GPU only).
  fused            03_fused_mlp.py's module (modules/geglu/fused.py, GPU only): gate, up and the
  GeGLU in
                   one Triton GEMM, down by cuBLAS; two kernels, no compile, no Dynamo. Large
                   shapes: the lowest GPU time, its one kernel taking about what cuBLAS takes for
                   gate and up alone (the "gate/up+GeGLU us" column): no GeGLU kernel, and g and u
                   never reach HBM. Small shapes: host-bound like the rest, with eager's kind of
                   dispatch (Triton's Python launcher, then aten::linear: two launches), not a
                   compiled wrapper's: it should not lose to eager where compile and Liger do. If it
                   does, compare its GPU time with eager's: if that is still lower, what loses is
                   the host's launch path, not fusion (docs/lessons/03_fused_mlp.md).
  cuda-graph       torch.compile(mode="reduce-overhead") (GPU only): compile's kernels and
                   compiles, replayed from a CUDA graph: one graph launch (plus a copy of x into
                   the graph's static input) instead of one launch per kernel. Small shapes: the
                   host time falls far below compile's (Dynamo's guards remain), the queued time
                   toward the GPU time: faster than eager. Large shapes: compile's GPU time plus
                   the input copy; launches cost nothing there.
  fused-graph      the fused module under torch.compile(mode="reduce-overhead") (GPU only):
                   its two kernels replayed from a CUDA graph. Both removals at once.
  fused-gluon      fused, with modules/geglu/gluon.py's warp-specialized kernel (`--kernel gluon`;
  SM90
                   only, listed there): the same two kernels, the gate/up one with a producer
                   warp and consumer warpgroups taking turns; eager, no compile.
  quack            the same fusion by QuACK (quack-kernels, `uv sync --extra hopper`; SM90
                   only, listed where it imports): gemm_gated's one CuTe-DSL GEMM for gate, up
                   and the GeGLU (tuned=False: autotuning each shape would cost tens of
                   seconds; tools/tune_fused_mlp.py times both), down by cuBLAS. Its first
                   call at each shape JIT-compiles (seconds): compile_s stays Dynamo's, 0.
  So cuda-graph against compile is what removing launches buys (same kernels, same traffic),
  fused against compile what removing HBM traffic buys (fewer bytes, one kernel fewer), and
  fused-graph against fused what launches still cost once the traffic is gone.

    uv run python -m tools.shape_sweep
    uv run python -m tools.shape_sweep --shapes 8x128,32x128,64x256 --variants eager,compile,liger
    uv run python -m tools.shape_sweep --shapes 8x128,64x128 --variants eager,cuda-graph,fused
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass

import torch
from torch._dynamo.utils import compilation_time_metrics, counters
from torch.profiler import profile

from common import check, cli, outputs, profiling
from common.kernel_source import liger_geglu_mlp
from common.measuring import sweep_report, timing
from modules import quack_gemm
from modules.models import GeGLUMLP, geglu_reference
from tracereader import classify

SCRIPT = "shape_sweep"
VARIANTS = (
    "eager",
    "compile",
    "compile-static",
    "compile-dynamic",
    "mark-dynamic",
    "liger",
    "fused",
    "cuda-graph",
    "fused-graph",
    "fused-gluon",
    "quack",
)
GPU_ONLY = {  # variant -> why it needs a CUDA GPU
    "liger": "Liger's kernel is Triton",
    "fused": "03_fused_mlp.py's kernel is Triton",
    "cuda-graph": "CUDA graphs record and replay GPU launches",
    "fused-graph": "03_fused_mlp.py's kernel is Triton, replayed from a CUDA graph",
    "fused-gluon": "modules/geglu/gluon.py's kernel is Gluon code for SM90",
    "quack": "QuACK's gated GEMM is CuTe DSL code for SM90",
}
COMPILED = (
    "compile",
    "compile-static",
    "compile-dynamic",
    "mark-dynamic",
    "cuda-graph",
    "fused-graph",
)
GRAPHED = ("cuda-graph", "fused-graph")  # replayed from CUDA graphs (Inductor's cudagraph trees)
# CUDA graph trees run a function's first call at a new shape eagerly (a warm-up), record the
# graph on the next one and replay it from then on: calls made before a shape's checked call.
GRAPH_RECORDING_CALLS = 2
GEGLU_CLASSES = ("elementwise", "inductor", "triton")  # the non-GEMM kernels between the GEMMs
# 03_fused_mlp.py's kernels (fused_gate_up_geglu_kernel, fused_gate_up_geglu_tma_kernel): the
# gate/up GEMM with the GeGLU in its epilogue. Class "triton" by name, a GEMM by what it does.
FUSED_KERNEL = "fused_gate_up_geglu"
# QuACK's only kernel here is its gated GEMM (down stays cuBLAS): the same part as ours.
QUACK_KERNEL = "kernel_cutlass_kernel_quack"
# The host's calls that queue GPU work: kernel launches (runtime and driver API), memcpys and
# memsets, and CUDA graph launches (one for all of a graph's kernels).
LAUNCH_CALL = re.compile(r"^cu(da)?(Launch|GraphLaunch|Memcpy\w*Async|Memset\w*Async)")
GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")


@dataclass
class Row:
    variant: str
    batch: int
    seq: int
    hidden: int
    compiles: int  # graphs Dynamo compiled during this shape's first call
    compile_s: float  # Dynamo's own compile time for them (_compile.compile_inner)
    limit_hit: bool  # Dynamo refused to recompile: the recompile limit
    ran_compiled: bool | None  # a Torch-Compiled Region ran (None for eager, liger, fused)
    queued_us: float  # per call, calls queued back to back (GPU: CUDA events; CPU: host clock)
    p20_us: float
    p80_us: float
    host_us: float | None  # host time to issue one call (GPU only)
    gpu_us: float | None  # GPU time of all the forward's kernels (profiled, GPU only)
    kernels: int  # kernels per forward (GPU only; 0 on a CPU)
    launches: int | None  # the host's launch calls per forward, a graph launch counts one
    replayed: bool | None  # cuda-graph: a CUDA graph launch was seen (None for the others)
    geglu_us: float | None  # GPU time of the GeGLU kernels between the GEMMs (None on a CPU,
    # and for fused, whose GeGLU is the gate/up GEMM's epilogue: no kernel of its own)
    geglu_kernels: int
    gate_up_geglu_us: float | None  # GPU time from the gate GEMM to the down GEMM, excluded:
    # gate, up and the GeGLU, comparable across every variant (None on a CPU)
    rel_err: float
    noisy: bool = False  # its repeats spread past NOISY: the machine was busy (row_timing)


# Each row's queued time is the median of REPEATS timings, each itself a median: one burst of
# load on a shared CPU set two rows of 100 us to 45 ms, and with them the table and the plot.
# Repeats whose 80th percentile is over NOISY times their 20th mark the row as noisy: NOISY in the
# table (mark_noisy), its point ringed in the plot (sweep_report.figure).
REPEATS = 5
NOISY = 1.5


def row_timing(timer, repeats: int = REPEATS) -> tuple[timing.Timing, bool]:
    """`timer()` `repeats` times: the median of their medians (20th and 80th percentiles
    across the repeats beside it), and whether the repeats spread past NOISY."""
    runs = [timer() for _ in range(repeats)]
    found = timing.summarize([t.median_s for t in runs], f"median of {repeats} repeats")
    return found, found.p80_s > NOISY * found.p20_s


def mark_noisy(table: str, rows: list[Row]) -> str:
    """The sweep's table with each noisy row marked, and one line saying what that means."""
    lines = table.splitlines()
    noisy = [i for i, r in enumerate(rows) if r.noisy]
    if not noisy:
        return table
    for i in noisy:
        lines[3 + i] += "  NOISY"  # below the title, the header and its rule
    lines.append(
        f"NOISY: {len(noisy)} row(s) whose {REPEATS} repeats spread past {NOISY}x (80th over "
        "20th percentile): the machine was busy while they ran and their timings are noisy; "
        "each row is the median of its repeats, but rerun on a quiet machine before trusting it"
    )
    return "\n".join(lines)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        batch, sep, seq = item.partition("x")
        if not sep:
            raise argparse.ArgumentTypeError(f"shape {item!r} is not BATCHxSEQ, e.g. 8x128")
        shapes.append((cli.positive_int(batch), cli.positive_int(seq)))
    if not shapes:
        raise argparse.ArgumentTypeError("the shape list is empty")
    return shapes


def parse_variants(text: str) -> list[str]:
    chosen = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown or no variants {unknown}; choose from {', '.join(VARIANTS)}"
        )
    return chosen


def parse(argv):
    parser = cli.Parser(prog=f"python -m tools.{SCRIPT}", description=__doc__)
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=parse_shapes("8x128,16x128,32x128,64x128,64x256,128x128"),
        help="BATCHxSEQ list; the post's shape is 64x128 (default: "
        "8x128,16x128,32x128,64x128,64x256,128x128)",
    )
    parser.add_argument("--dim", type=cli.positive_int, default=768, help="(default: 768)")
    parser.add_argument("--hidden", type=cli.positive_int, default=3072, help="(default: 3072)")
    parser.add_argument(
        "--hidden-change",
        "--hidden_change",
        type=cli.non_negative_int,
        default=4096,
        help="rerun the last shape with this hidden size, a new module; 0 to skip (default: 4096)",
    )
    parser.add_argument(
        "--variants",
        type=parse_variants,
        default=None,
        help=f"comma-separated, from {', '.join(VARIANTS)} (default: all; "
        f"{', '.join(GPU_ONLY)} are skipped without a GPU)",
    )
    parser.add_argument(
        "--recompile-limit",
        "--recompile_limit",
        type=cli.positive_int,
        default=None,
        help="set torch._dynamo.config.recompile_limit "
        "(default: torch's own, "
        f"{torch._dynamo.config.recompile_limit})",
    )
    # the lessons' own flags, refused alike: the table (.txt), rows (.csv) and plot (.png) go
    # to DIR/shape_sweep/
    cli.add_device_flags(parser)
    cli.add_traces_dir_flag(parser)
    cli.add_seed_flag(parser)
    return parser.parse_args(argv)


def snapshot() -> tuple[int, float, int]:
    limit_hits = sum(
        n
        for k, n in counters["unimplemented"].items()
        if k.startswith("Dynamo recompile limit exceeded")
    )
    return (
        counters["stats"]["unique_graphs"],
        sum(compilation_time_metrics.get("_compile.compile_inner", [])),
        limit_hits,
    )


PROFILED_CALLS = 5  # calls per profile: kernel times are averaged over them


@dataclass(frozen=True)
class Forward:
    """What one forward ran on the GPU, averaged over the profiled calls."""

    gpu_us: float  # all its GPU work
    kernels: int
    launches: int  # the host's calls that queued it (LAUNCH_CALL)
    graph_launches: int
    geglu_us: float | None  # the GeGLU's own kernels; None for the fused kernel (no such kernel)
    geglu_kernels: int
    gate_up_geglu_us: float | None  # gate GEMM to down GEMM; None where calls are not told apart


def role(name: str) -> str:
    """A GPU item's part in the forward: "gemm" (one GEMM), "joins" (a split-K reduce, the
    second kernel of the GEMM before it), "fused" (gate/up GEMM + GeGLU), "geglu" (a kernel of
    GEGLU_CLASSES), "other" (memcpys, memsets, ATen copies such as a CUDA graph's input copy)."""
    if FUSED_KERNEL in name or QUACK_KERNEL in name:
        return "fused"
    kind = classify(name)
    if kind.cls == "gemm":
        return "joins" if kind.joins_previous else "gemm"
    return "geglu" if kind.cls in GEGLU_CLASSES else "other"


def read_forward(events, calls: int) -> Forward:
    """The profiler's events of `calls` forwards, one after another, read per forward.

    Every variant's forward ends with the down GEMM, and starts its matrix work with the gate
    GEMM (with up, or the fused kernel that does both): so the GEMMs (the fused kernel counted
    as one) come in groups of the same size per call, the last of each group is down, and
    what runs from a group's first GEMM up to its down GEMM is gate, up and the GeGLU. The
    GeGLU kernels are the GEGLU_CLASSES kernels in that span (never a copy before it, such
    as a CUDA graph's input copy). Where the GEMMs do not split evenly into calls, the
    GeGLU time falls back to every GEGLU_CLASSES kernel and the gate/up+GeGLU time is None."""
    work = sorted(timing.gpu_work(events), key=lambda e: e.time_range.start)
    roles = [role(e.name) for e in work]
    host = [e.name for e in events if e.device_type != torch.autograd.DeviceType.CUDA]

    def per_call(items) -> float:
        return sum(e.time_range.elapsed_us() for e in items) / calls

    gemms = [i for i, r in enumerate(roles) if r in ("gemm", "fused")]
    size, left = divmod(len(gemms), calls)
    if left or size < 2:
        front = None
        geglu = [e for e, r in zip(work, roles, strict=True) if r == "geglu"]
    else:
        front, geglu = [], []
        for call in range(calls):
            first, down = gemms[call * size], gemms[call * size + size - 1]
            span = list(zip(work[first:down], roles[first:down], strict=True))
            front += [e for e, r in span if r != "other"]
            geglu += [e for e, r in span if r == "geglu"]
    fused = "fused" in roles
    return Forward(
        gpu_us=per_call(work),
        kernels=round(len(work) / calls),
        launches=round(sum(bool(LAUNCH_CALL.match(n)) for n in host) / calls),
        graph_launches=round(sum(bool(GRAPH_LAUNCH.match(n)) for n in host) / calls),
        geglu_us=None if fused else per_call(geglu),
        geglu_kernels=round(len(geglu) / calls),
        gate_up_geglu_us=None if front is None else per_call(front),
    )


def profile_calls(fn, x, run) -> tuple[bool, Forward | None]:
    """Profile a few calls: did a compiled region run; on a GPU, what each forward ran.

    Kernel durations come from CUPTI, so they are GPU time alone, whatever the host did; a
    CUDA graph's kernels are recorded as any others when it is replayed."""
    activities = profiling.activities(run)
    with profile(activities=activities, acc_events=True) as prof:  # acc_events: no warning
        for _ in range(PROFILED_CALLS):
            fn(x)
        profiling.synchronize(run)
    events = prof.events()
    ran_compiled = any(e.name.startswith("Torch-Compiled Region") for e in events)
    return ran_compiled, read_forward(events, PROFILED_CALLS) if run.on_gpu else None


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    compiling = cli.compile_in_process()  # before any torch.compile; the sweep times compiles
    print(f"compiles run {compiling}")
    timing.warn_if_cpu_busy(run.on_gpu)  # a loaded CPU sets every row, not one: said up front
    major = torch.cuda.get_device_capability(run.device)[0] if run.on_gpu else None
    variants = choose_variants(args.variants, run.on_gpu, major, run.dtype_name)
    shapes = [(b, s, args.hidden) for b, s in args.shapes]
    if args.hidden_change:
        shapes.append((*args.shapes[-1], args.hidden_change))
    biggest = max(b * s * max(h, args.hidden) for b, s, h in shapes)
    # gate and up once more, packed
    packed = {"fused", "fused-graph", "fused-gluon", "quack"} & set(variants)
    weights = (5 if packed else 3) * args.dim * max(h for *_, h in shapes) * 4
    cli.ensure_fits(biggest * 6 * 4 + weights, run)  # fused: the packed gate/up weight too
    tag = f"d{args.dim}_h{args.hidden}_{args.dtype}" + ("" if run.on_gpu else "_cpu")
    # One sweep at a time into a folder (a second is refused: rows of two sweeps would
    # interleave in one CSV); a sweep stopped before its first row leaves no folder behind.
    with outputs.folder_for_rows(args.traces_dir, SCRIPT) as folder:
        limit = args.recompile_limit or torch._dynamo.config.recompile_limit
        rows: list[Row] = []
        total = len(variants) * len(shapes)
        # Rows reach the CSV as they complete, so a stopped or failed sweep keeps what it measured;
        # the table and the plot are written at the end, of whatever rows there are.
        with sweep_report.RowWriter(folder / f"{tag}.csv", Row) as csv_rows:
            try:
                # Inductor's on-disk graph cache would turn a later variant's compile into a cache
                # read: off, so that each compile time is a real compile.
                with (
                    torch._dynamo.config.patch(recompile_limit=limit),
                    torch._inductor.config.patch(fx_graph_cache=False),
                ):
                    for row in sweep(variants, shapes, args, run):
                        rows.append(row)
                        csv_rows.write(row)
                        noisy = " NOISY: its repeats disagree" if row.noisy else ""
                        line = f"[{len(rows)}/{total}] {sweep_report.progress(row)}{noisy}"
                        print(line, flush=True)
            finally:
                if rows:
                    stopped = len(rows) < total
                    table = sweep_report.table(
                        rows,
                        limit=limit,
                        device=describe(run),
                        stopped=(len(rows), total) if stopped else None,
                    )
                    table = mark_noisy(table, rows)
                    print(table)
                    for path in [csv_rows.path, *sweep_report.write(folder, tag, rows, table)]:
                        print(f"wrote {path}")
    return 0


def choose_variants(
    chosen: list[str] | None, on_gpu: bool, major: int | None = None, dtype: str = "bf16"
) -> list[str]:
    """The variants to run: those asked for, refused in one line where one needs a GPU that is
    not there; by default all, the GPU-only ones skipped with a note on a CPU, quack skipped
    with a note where it cannot run on this GPU (major: its compute capability)."""
    if on_gpu:
        gluon_why = None if major == 9 else f"SM90 only; this GPU is SM{major}x"
        if chosen:  # QuACK (and the CuTe DSL behind it) imported only where asked for
            if "quack" in chosen and (why := quack_gemm.unavailable(major, dtype)):
                raise cli.UsageError(f"the quack variant cannot run here: {why}")
            if "fused-gluon" in chosen and gluon_why:
                raise cli.UsageError(f"the fused-gluon variant cannot run here: {gluon_why}")
            return chosen
        why = quack_gemm.unavailable(major, dtype)
        for variant, reason in (("quack", why), ("fused-gluon", gluon_why)):
            if reason:
                print(f"note: the {variant} variant is skipped: {reason}")
        skipped = {v for v, r in (("quack", why), ("fused-gluon", gluon_why)) if r}
        return [v for v in VARIANTS if v not in skipped]
    if chosen:
        refused = [v for v in chosen if v in GPU_ONLY]
        if refused:
            plural = len(refused) > 1
            raise cli.UsageError(
                f"the {_listed(refused)} variant{'s need' if plural else ' needs'} a CUDA GPU "
                f"({'; '.join(GPU_ONLY[v] for v in refused)})"
            )
        return chosen
    print(f"note: no CUDA GPU: the {_listed(GPU_ONLY)} variants are skipped (GPU only)")
    return [v for v in VARIANTS if v not in GPU_ONLY]


def _listed(names) -> str:
    *rest, last = names
    return f"{', '.join(rest)} and {last}" if rest else last


def sweep(variants: list[str], shapes: list[tuple[int, int, int]], args, run):
    """Every variant over every shape, Dynamo reset between variants; yields one Row per pair."""
    for variant in variants:
        torch._dynamo.reset()  # each variant starts with empty compile caches and CUDA graphs
        counters.clear()
        compilation_time_metrics.clear()
        modules, references, forwards = {}, {}, {}
        for batch, seq, hidden in shapes:
            if hidden not in modules:
                modules[hidden], references[hidden] = build(
                    variant, args.dim, hidden, run, args.seed
                )
                forwards[hidden] = make_forward(variant, modules[hidden])
            fn = forwards[hidden]
            # A generator of its own, seeded alike in every variant: the same x in each.
            inputs = torch.Generator(run.device).manual_seed(args.seed)
            x = torch.randn(
                batch, seq, args.dim, generator=inputs, device=run.device, dtype=run.dtype
            )
            if variant == "mark-dynamic":
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(x, 1)
            with torch.no_grad():
                before = snapshot()
                out = fn(x)
                if variant in GRAPHED:
                    # That call warmed up; the next records the graph, later ones replay it:
                    # check a replay. Its output lives in the graph's memory pool, which the
                    # next replay overwrites: keep a copy.
                    del out
                    for _ in range(GRAPH_RECORDING_CALLS):
                        fn(x)
                    out = fn(x).clone()
                profiling.synchronize(run)
                graphs, seconds, hits = (a - b for a, b in zip(snapshot(), before, strict=True))
                err = check.relative_error(out, geglu_reference(x, references[hidden]))
                if err > check.TOLERANCE[run.dtype]:
                    raise check.MismatchError(
                        f"{variant} at {batch}x{seq}, hidden {hidden}: relative error {err:.2e}"
                    )
                del out
                call = lambda fn=fn, x=x: fn(x)  # noqa: E731
                if run.on_gpu:
                    queued, noisy = row_timing(lambda call=call: timing.time_gpu_queued(call))
                    host = row_timing(lambda call=call: timing.time_host(call))[0].median_s * 1e6
                else:
                    queued, noisy = row_timing(lambda call=call: cpu_timing(call))
                    host = None
                ran_compiled, seen = profile_calls(fn, x, run)
            yield Row(
                variant=variant,
                batch=batch,
                seq=seq,
                hidden=hidden,
                compiles=graphs,
                compile_s=seconds,
                limit_hit=hits > 0,
                ran_compiled=ran_compiled if variant in COMPILED else None,
                queued_us=queued.median_s * 1e6,
                p20_us=queued.p20_s * 1e6,
                p80_us=queued.p80_s * 1e6,
                host_us=host,
                gpu_us=seen.gpu_us if seen else None,
                kernels=seen.kernels if seen else 0,
                launches=seen.launches if seen else None,
                replayed=bool(seen.graph_launches) if seen and variant in GRAPHED else None,
                geglu_us=seen.geglu_us if seen else None,
                geglu_kernels=seen.geglu_kernels if seen else 0,
                gate_up_geglu_us=seen.gate_up_geglu_us if seen else None,
                rel_err=err,
                noisy=noisy,
            )


def cpu_timing(call) -> timing.Timing:
    """One repeat on the CPU: a fifth of time_cpu's budget, so a row takes what it took."""
    return timing.time_cpu(call, warmup_s=0.01, budget_s=0.1, min_runs=5)


def build(
    variant: str, dim: int, hidden: int, run, seed: int
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The variant's module and the module its output is checked against (float32 reference).

    Seeded here, so that every variant gets the same weights for the same seed: Liger's module
    creates gate, up and down in 03_simple_mlp.py's order, and the fused module packs the very
    weights of a GeGLUMLP built from the seed (and is checked against that module)."""
    torch.manual_seed(seed)
    if variant == "liger":
        module, source = liger_geglu_mlp(dim, hidden)
        print(f"kernels: {source}")
        module = module.to(run.device, run.dtype).eval()
        return module, module
    mlp = GeGLUMLP(dim, hidden).to(run.device, run.dtype).eval()
    if variant in ("fused", "fused-graph", "fused-gluon"):
        from common import fused_kernel
        from modules.geglu import fused  # only when asked for: importing it registers its custom op

        # The lesson's own choice: Hopper's TMA kernel on compute capability 9.x (bf16, fp16),
        # else the plain one; its fixed configuration for that path and dtype. fused-gluon:
        # the gluon kernel, refused in one line where it cannot run.
        asked = "gluon" if variant == "fused-gluon" else "auto"
        kernel = fused_kernel.choose_kernel(
            asked, run, dim, hidden, compiling=variant == "fused-graph"
        )
        config = fused_kernel.config_name(kernel, run, auto=asked == "auto")
        module = fused.FusedGeGLUMLP(mlp, config).eval()
        print(f"fused kernel (hidden {hidden}): {module.describe()}")
        return module, mlp
    if variant == "quack":
        return quack_gemm.QuackGeGLUMLP(mlp, tuned=False).eval(), mlp
    return mlp, mlp


def make_forward(variant: str, module: torch.nn.Module):
    if variant in ("eager", "liger", "fused", "fused-gluon", "quack"):
        return module
    options = {
        "compile": {},
        "mark-dynamic": {},
        "compile-static": {"dynamic": False},
        "compile-dynamic": {"dynamic": True},
        # Inductor's CUDA graphs (cudagraph trees): it copies each input into a static buffer
        # before the replay, since a graph reads fixed addresses; compile's shape policy.
        "cuda-graph": {"mode": "reduce-overhead"},
        "fused-graph": {"mode": "reduce-overhead"},  # Inductor launches our kernel itself
    }[variant]
    return torch.compile(module, **options)


def describe(run) -> str:
    where = torch.cuda.get_device_name(run.device) if run.on_gpu else "CPU"
    return (
        f"{where}, torch {torch.__version__}, {time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"{run.dtype_name}"
    )


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
