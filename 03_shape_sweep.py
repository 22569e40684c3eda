"""Beyond the posts: does torch.compile really re-specialize per shape while Liger does not?

Part 2 closes on a claim it never measures: Inductor's fused GeGLU kernel is fast because it
was generated for one shape, so changing batch, sequence or hidden size costs a recompile,
while Liger's hand-written kernel runs any shape as it is. This sweep runs the GeGLU MLP of
03_simple_mlp.py over a list of shapes and counts, from Dynamo's own counters, what compiles.

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

    uv run 03_shape_sweep.py
    uv run 03_shape_sweep.py --shapes 8x128,32x128,64x256 --variants eager,compile,liger
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from dataclasses import dataclass

import torch
from torch._dynamo.utils import compilation_time_metrics, counters
from torch.profiler import profile

from common import check, cli, outputs, profiling, sweep_report, timing
from common.kernel_names import classify

SCRIPT = "03_shape_sweep"
VARIANTS = ("eager", "compile", "compile-static", "compile-dynamic", "mark-dynamic", "liger")
GEGLU_CLASSES = ("elementwise", "inductor", "triton")  # the non-GEMM kernels between the GEMMs


@dataclass
class Row:
    variant: str
    batch: int
    seq: int
    hidden: int
    compiles: int  # graphs Dynamo compiled during this shape's first call
    compile_s: float  # Dynamo's own compile time for them (_compile.compile_inner)
    limit_hit: bool  # Dynamo refused to recompile: the recompile limit
    ran_compiled: bool | None  # a Torch-Compiled Region ran (None for eager and liger)
    queued_us: float  # per call, calls queued back to back (GPU: CUDA events; CPU: host clock)
    p20_us: float
    p80_us: float
    host_us: float | None  # host time to issue one call (GPU only)
    gpu_us: float | None  # GPU time of all the forward's kernels (profiled, GPU only)
    kernels: int  # kernels per forward (GPU only; 0 on a CPU)
    geglu_us: float | None  # GPU time of the kernels between the GEMMs (None on a CPU)
    geglu_kernels: int
    rel_err: float


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
    parser = cli.Parser(prog=f"{SCRIPT}.py", description=__doc__)
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
        "liger is skipped without a GPU)",
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
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--dtype", choices=list(cli.DTYPES), default="bf16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--traces-dir",
        "--traces_dir",
        default="traces",
        metavar="DIR",
        help="the table (.txt), rows (.csv) and plot (.png) go to "
        "DIR/03_shape_sweep/ (default: traces)",
    )
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


def gpu_work(events) -> list:
    """The profiler's GPU events that are work (kernels, memcpys, memsets): a record_function's
    GPU-side span is an event on the device too, and would count its kernels a second time."""
    return [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not getattr(e, "is_user_annotation", False)
    ]


def profile_calls(fn, x, run) -> tuple[bool, float | None, int, float | None, int]:
    """Profile a few calls: did a compiled region run; per forward, the GPU time of all its
    kernels and how many there were, and the same for the GeGLU kernels between the GEMMs.

    Kernel durations come from CUPTI, so they are GPU time alone, whatever the host did."""
    activities = profiling.activities(run)
    with profile(activities=activities, acc_events=True) as prof:  # acc_events: no warning
        for _ in range(PROFILED_CALLS):
            fn(x)
        profiling.synchronize(run)
    events = prof.events()
    ran_compiled = any(e.name.startswith("Torch-Compiled Region") for e in events)
    if not run.on_gpu:
        return ran_compiled, None, 0, None, 0
    kernels = gpu_work(events)
    geglu = [e for e in kernels if classify(e.name).cls in GEGLU_CLASSES]

    def per_call(items):
        return sum(e.time_range.elapsed_us() for e in items) / PROFILED_CALLS

    return (
        ran_compiled,
        per_call(kernels),
        round(len(kernels) / PROFILED_CALLS),
        per_call(geglu),
        round(len(geglu) / PROFILED_CALLS),
    )


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    if args.variants and "liger" in args.variants and not run.on_gpu:
        raise cli.UsageError("the liger variant needs a CUDA GPU (Liger's kernel is Triton)")
    variants = args.variants or [v for v in VARIANTS if run.on_gpu or v != "liger"]
    if len(variants) < len(VARIANTS) and not args.variants:
        print("note: no CUDA GPU: the liger variant is skipped")
    shapes = [(b, s, args.hidden) for b, s in args.shapes]
    if args.hidden_change:
        shapes.append((*args.shapes[-1], args.hidden_change))
    biggest = max(b * s * max(h, args.hidden) for b, s, h in shapes)
    cli.ensure_fits(biggest * 6 * 4 + 3 * args.dim * max(h for *_, h in shapes) * 4, run)
    tag = f"d{args.dim}_h{args.hidden}_{args.dtype}" + ("" if run.on_gpu else "_cpu")
    folder = outputs.writable_folder(args.traces_dir, SCRIPT)
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
                    print(f"[{len(rows)}/{total}] {sweep_report.progress(row)}", flush=True)
        finally:
            if rows:
                stopped = len(rows) < total
                table = sweep_report.table(
                    rows,
                    limit=limit,
                    device=describe(run),
                    stopped=(len(rows), total) if stopped else None,
                )
                print(table)
                for path in [csv_rows.path, *sweep_report.write(folder, tag, rows, table)]:
                    print(f"wrote {path}")
    return 0


def sweep(variants: list[str], shapes: list[tuple[int, int, int]], args, run):
    """Every variant over every shape, Dynamo reset between variants; yields one Row per pair."""
    mlp_lesson = importlib.import_module("03_simple_mlp")  # the module, as the lesson has it
    kernels_lesson = importlib.import_module("03_kernels_mlp")  # Liger's loader
    for variant in variants:
        torch._dynamo.reset()  # each variant starts with an empty compile cache
        counters.clear()
        compilation_time_metrics.clear()
        modules, forwards = {}, {}
        for batch, seq, hidden in shapes:
            if hidden not in modules:
                modules[hidden] = build(variant, args.dim, hidden, run, mlp_lesson, kernels_lesson)
                forwards[hidden] = make_forward(variant, modules[hidden])
            module, fn = modules[hidden], forwards[hidden]
            x = torch.randn(batch, seq, args.dim, device=run.device, dtype=run.dtype)
            if variant == "mark-dynamic":
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(x, 1)
            with torch.no_grad():
                before = snapshot()
                out = fn(x)
                profiling.synchronize(run)
                graphs, seconds, hits = (a - b for a, b in zip(snapshot(), before, strict=True))
                err = check.relative_error(out, mlp_lesson.reference(x, module))
                if err > check.TOLERANCE[run.dtype]:
                    raise check.MismatchError(
                        f"{variant} at {batch}x{seq}, hidden {hidden}: relative error {err:.2e}"
                    )
                del out
                call = lambda fn=fn, x=x: fn(x)  # noqa: E731
                if run.on_gpu:
                    queued = timing.time_gpu_queued(call)
                    host = timing.time_host(call).median_s * 1e6
                else:
                    queued, host = timing.time_cpu(call), None
                ran_compiled, gpu_us, n_kernels, geglu_us, n_geglu = profile_calls(fn, x, run)
            compiled_variant = variant.startswith(("compile", "mark"))
            yield Row(
                variant=variant,
                batch=batch,
                seq=seq,
                hidden=hidden,
                compiles=graphs,
                compile_s=seconds,
                limit_hit=hits > 0,
                ran_compiled=ran_compiled if compiled_variant else None,
                queued_us=queued.median_s * 1e6,
                p20_us=queued.p20_s * 1e6,
                p80_us=queued.p80_s * 1e6,
                host_us=host,
                gpu_us=gpu_us,
                kernels=n_kernels,
                geglu_us=geglu_us,
                geglu_kernels=n_geglu,
                rel_err=err,
            )


def build(variant: str, dim: int, hidden: int, run, mlp_lesson, kernels_lesson) -> torch.nn.Module:
    if variant == "liger":
        from common import kernel_source

        layers, source = kernel_source.liger_layers(
            kernels_lesson.fetch_liger_layers, kernels_lesson.REPO_ID
        )
        print(f"kernels: {source}")
        config = kernels_lesson.GeGLUConfig(hidden_size=dim, intermediate_size=hidden)
        module = layers.LigerGEGLUMLP(config)
    else:
        module = mlp_lesson.SimpleGeGLUMLP(dim, hidden)
    return module.to(run.device, run.dtype).eval()


def make_forward(variant: str, module: torch.nn.Module):
    if variant in ("eager", "liger"):
        return module
    options = {
        "compile": {},
        "mark-dynamic": {},
        "compile-static": {"dynamic": False},
        "compile-dynamic": {"dynamic": True},
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
