"""Part 2, third rung: the same GeGLU MLP as a hand-tuned LigerGEGLUMLP from the kernels Hub.

You will learn: how to pull a pre-built, version-pinned kernel with the `kernels` library, and
what a hand-written fused kernel looks like in a trace next to Inductor's generated one.

Guess first. Per recorded step, on a GPU:
  three GEMM kernels (gate, up, down; the same cuBLAS kernels as the eager MLP) and one Triton
  kernel, `_geglu_tanh_forward_kernel`, computing gelu(gate) * up in one pass: four kernels,
  the fusion of the compiled MLP without the compiler (no TorchDynamo rows on the CPU lane).
Liger's kernel is Triton, so this script needs a CUDA GPU.

Where the kernel comes from: the Hub (as in the post); with HF_HUB_OFFLINE=1, your Hub cache;
with LOCAL_KERNELS="kernels-community/liger-kernels=/path/to/repo", a local checkout; and if
none of these answers, the same class from the liger-kernel package on PyPI. The run says which.

    uv run 03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
"""

import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling, shapes
from common.kernel_source import liger_geglu_mlp
from common.measuring import bench, traffic
from modules.models import geglu_reference as reference  # Liger's module has the same weights
from tracereader import Expect

SCRIPT = "03_kernels_mlp"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# as 03_simple_mlp's 37 measured, rounded up: the same MLP, Liger's ops
EVENTS_PER_STEP = 40
ANNOTATION = "kernels_mlp_fwd"
# What to do where torch.compile cannot compile Liger's module (profiling.warm_up refuses then)
UNCOMPILED = "LigerGEGLUMLP: its GeGLU is already fused by hand, run without --compile"

# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 3, "triton": 1, "elementwise": 0, "inductor": 0},
        cpu_absent=("TorchDynamo Cache Lookup", "aten::gelu", "aten::mul"),
        why="the compiled MLP's fusion, written by hand: no compiler rows",
    ),
    "compile": Expect(
        gpu={"gemm": 3, "triton": 1, "elementwise": 0},
        cpu_present=("Torch-Compiled Region*",),
        gemms_as_in="eager",
        why="Dynamo wraps Liger's Triton kernel as it is; nothing left to fuse",
    ),
}


def traffic_model(tokens: int, dim: int, hidden: int, elt: int) -> list[traffic.Kernel]:
    """Liger's kernel reads g and u once and writes gelu(g) * u once, between the GEMMs."""
    gate, up, down = traffic.geglu_projections(tokens, dim, hidden, elt)
    fused = traffic.elementwise("Liger gelu(g) * u", tokens * hidden, elt, reads=2)
    return [gate, up, fused, down]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_mlp_flags(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    cli.require_gpu(f"{SCRIPT}.py", args, "Liger's GeGLU is Triton (03_simple_mlp runs on a CPU)")
    run = cli.resolve(args)
    cli.ensure_fits(
        shapes.mlp_bytes_needed(args, run), run, trace=cli.profiled(args, EVENTS_PER_STEP)
    )
    out = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(shapes.mlp_tag(args), args, run),
        gzip=args.gzip,
    )

    # The post's get_kernel("kernels-community/liger-kernels", version=1).layers, with its
    # fallbacks (common.kernel_source.fetch_liger_layers): the module is Liger's LigerGEGLUMLP.
    mlp, source = liger_geglu_mlp(args.dim, args.hidden)
    print(f"kernels: {source}")
    mlp = mlp.to(run.device, run.dtype).eval()
    forward = torch.compile(mlp) if args.compile else mlp
    x = torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)

    with torch.no_grad():
        y = profiling.warm_up(
            lambda: forward(x), run, compiling=args.compile, uncompiled=UNCOMPILED
        )
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

    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        model = traffic_model(args.batch * args.seq, args.dim, args.hidden, x.element_size())
        with torch.no_grad():
            bench.report(lambda: forward(x), run=run, model=model, trace=seen.trace, args=args)
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
