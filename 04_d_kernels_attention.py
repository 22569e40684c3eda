"""Part 3, beyond the post's text: FlashAttention from the kernels Hub, called directly.

You will learn: how to fetch a version-pinned, pre-built attention kernel with the `kernels`
library and call it with no SDPA dispatch around it, and that it wants its inputs laid out as
[batch, seq, heads, head_dim]: seq and heads swapped against SDPA's [batch, heads, seq,
head_dim]. Same numbers, another memory order; passing SDPA's layout would silently attend
over the wrong axis.

Guess first. Per recorded step, on a GPU:
  one fused attention kernel (FlashAttention-2's flash_fwd_kernel, the same algorithm that
  04_c's flash backend runs from PyTorch's vendored copy), perhaps a Memset beside it; no
  GEMM, no softmax kernel. The CPU lane shows the kernel's own custom op instead of
  aten::scaled_dot_product_attention and its transposes. Put it next to
  `04_c_sdpa_attention.py --backend flash`: the difference is the code around the kernel.
FlashAttention-4, where it answers, is one CuTe-DSL kernel too (kernel_cutlass_kernel_flash_attn...
on Hopper), JIT-compiled on the first call (seconds, in the warm-up).
--variant fa3, on Hopper (compute capability 9.x) only: kernels-community/flash-attn3, the
FlashAttention-3 build for Hopper's asynchronous Tensor-core instructions, called the same way.
FlashAttention is CUDA code for bf16 and fp16, so this script needs a CUDA GPU; on a CPU it
says so in one line (04_c --backend flash runs the CPU counterpart).

Where the kernel comes from, first that answers: LOCAL_KERNELS="kernels-community/flash-attn2=
/path/to/repo" (a local copy of the kernel repository); the Hub, as in the post; your Hub cache
(with HF_HUB_OFFLINE=1, or when the Hub does not answer); then FlashAttention-4 where it is
installed (`uv sync --extra hopper`: flash-attn-4, CuTe DSL kernels that JIT-compile on the
GPU; `flash_attn.cute.flash_attn_func`, same layout, returns (out, lse); SM90, and forward on
SM80). The run says which answered. The flash-attn package on PyPI is source only (its build
compiles CUDA with nvcc for your exact torch), so when none answers, the run says how to get a
kernel and stops, writing nothing.

--compile is refused: the kernel is already one hand-written fusion; Dynamo would only wrap it.

    uv run 04_d_kernels_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64
    uv run 04_d_kernels_attention.py --variant fa3          # Hopper only
"""

import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, kernel_source, outputs, profiling, shapes

try:
    from kernels import get_kernel  # the post's loader: Hugging Face's kernels library
except ImportError:  # not installed: one line when a kernel is asked for, not a traceback
    get_kernel = kernel_source.get_kernel_missing
from common.measuring import bench, traffic
from modules.models import attention_reference
from tracereader import Expect

SCRIPT = "04_d_kernels_attention"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# as 04_a's 47 measured, an upper bound: one attention call a step
EVENTS_PER_STEP = 50
ANNOTATION = "flash_kernel_fwd"
VARIANTS = {
    # kernels-community/flash-attn2 keeps each major version on a branch (v1, v2, v3). v1 and
    # v2 ship builds for named torch releases only (up to 2.12 and 2.13), so they find no
    # build for this project's torch (2.15); v3's builds use torch's stable ABI and load on
    # any torch from 2.9 on. v3 dropped dropout, which a forward pass for inference never uses.
    "fa2": ("kernels-community/flash-attn2", 3),
    # FlashAttention-3: version 1, as its kernel card gives it.
    "fa3": ("kernels-community/flash-attn3", 1),
}
NO_PYPI = (
    "PyPI has no ready-built FlashAttention-2 or -3 to fall back on (flash-attn is published as "
    "source that compiles with nvcc)"
)
LABELS = {
    "fa2": "FlashAttention-2 fwd",
    "fa3": "FlashAttention-3 fwd",
    "fa4": "FlashAttention-4 fwd",
}


def fetch_flash_attn_func(variant: str):
    # The post's line: a pre-built kernel package, version-pinned, downloaded once and cached.
    repo_id, version = VARIANTS[variant]
    return get_kernel(repo_id, version=version).flash_attn_func


def load_flash_attn_func(variant: str):
    """(flash_attn_func, where it came from); one line and exit 2 when no source answers."""
    repo_id = VARIANTS[variant][0]
    return kernel_source.load(
        lambda: fetch_flash_attn_func(variant),
        repo_id,
        fallback=kernel_source.flash_attn_4(repo_id, NO_PYPI),
    )


def flash_attention(flash_attn_func, q, k, v) -> torch.Tensor:
    """q, k, v and the output are [batch, seq, heads, head_dim]."""
    out = flash_attn_func(q, k, v, causal=True)
    return out[0] if isinstance(out, tuple) else out  # some builds also return the softmax LSE


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention in float32, in the kernel's [batch, seq, heads, head_dim] layout."""
    return attention_reference(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"attention": 1, "gemm": 0},
        cpu_absent=("aten::scaled_dot_product_attention", "aten::bmm", "aten::softmax"),
        why="one hand-written fused kernel, and no SDPA dispatch around it",
    ),
}


def traffic_model(sizes: shapes.AttentionSizes, elt: int, which: str) -> list[traffic.Kernel]:
    """q, k, v read once, the output written once; the causal kernel skips the key blocks
    above the diagonal, so half of the naive GEMMs' 4*B*H*S^2*D FLOPs."""
    label = LABELS[which]
    return [
        traffic.fused_attention(
            label, sizes.batch_heads, sizes.seq, sizes.head_dim, elt, causal=True
        )
    ]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_attention_flags(parser)
    parser.add_argument(
        "--variant",
        choices=list(VARIANTS),
        default="fa2",
        help="fa2: kernels-community/flash-attn2 (version 3); fa3: kernels-community/"
        "flash-attn3 (version 1), Hopper GPUs only (default: fa2)",
    )
    cli.refuse_compile(
        parser,
        "the kernel already fuses all of attention by hand, so Dynamo would only wrap it; "
        "run 04_a or 04_b with --compile to see what the compiler does to attention",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    kernel_source.require_flash_gpu(f"{SCRIPT}.py", args)  # no CPU build: one line
    run = cli.resolve(args)
    kernel_source.refuse_flash(args.variant, run)  # fp32, and FA3 off Hopper: one line each
    cli.ensure_fits(
        shapes.attention_bytes_needed(args, run, score_bytes=0),
        run,
        trace=cli.profiled(args, EVENTS_PER_STEP),
    )
    flash_attn_func, source = load_flash_attn_func(args.variant)
    # fa4 where FlashAttention-4 answered (its function lives in flash_attn.cute), else the Hub's
    which = "fa4" if flash_attn_func.__module__.startswith("flash_attn.cute") else args.variant
    # named after the kernel that answered: an FA4 trace is not FA2's
    tag = f"{outputs.run_tag(shapes.attention_tag(args), args, run)}_{which}"
    out = outputs.prepare(args.traces_dir, SCRIPT, tag, gzip=args.gzip)
    pinned = "" if which == "fa4" else f" (version {VARIANTS[args.variant][1]})"
    print(f"flash_attn_func: {source}{pinned}")
    # [batch, seq, heads, head_dim]: seq and heads swapped against SDPA's layout.
    shape = (args.batch, args.seq, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))

    with torch.no_grad():
        y = profiling.warm_up(lambda: flash_attention(flash_attn_func, q, k, v), run)
        check.against_reference(y, reference(q, k, v), run.dtype)
        del y

        profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
        # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
        with profile(
            activities=profiling.activities(run),
            schedule=schedule(
                wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1
            ),
            record_shapes=True,  # the table's input dims show the [batch, seq, heads, dim] layout
            acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function(ANNOTATION):
                    flash_attention(flash_attn_func, q, k, v)
                prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    seen = profiling.look(out, EXPECT["eager"])
    if args.bench:
        model = traffic_model(shapes.attention_sizes(args), q.element_size(), which)
        with torch.no_grad():
            bench.report(
                lambda: flash_attention(flash_attn_func, q, k, v),
                run=run,
                model=model,
                trace=seen.trace,
                args=args,
            )
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
