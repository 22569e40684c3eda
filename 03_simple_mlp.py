"""Part 2, second rung: profile a GeGLU MLP written in plain PyTorch, eager and compiled.

You will learn: how many kernels a small block really launches, which CPU ops reach the GPU
and which only rewrite metadata, and what torch.compile fuses (and what it leaves alone).

The module, GeGLUMLP from modules/models.py (03_fused_mlp, tools/shape_sweep and 05_tp_mlp run the
same):
    g, u = gate_proj(x), up_proj(x)               # nn.Linear(dim, hidden, bias=False) each
    y = down_proj(F.gelu(g, approximate="tanh") * u)   # nn.Linear(hidden, dim, bias=False)

Guess first. Per recorded step, on a GPU:
  eager     three aten::linear dispatches (gate, up, down), each ending in aten::mm and one
            GEMM kernel, plus two elementwise kernels: aten::gelu and aten::mul. Five kernels.
            The [batch*seq, hidden] GeLU output is written to HBM and read straight back.
  compiled  the same three GEMM kernels, names identical to eager, called as bare aten::mm;
            GeLU and mul (and a reshape) fused into one Triton kernel, triton_poi_fused_..._0.
            Four kernels, plus the compile rows on the CPU lane.
On a CPU the same dispatch chain appears (compiled: a Torch-Compiled Region), no kernels.

    uv run 03_simple_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
    uv run 03_simple_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --compile
"""

import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling, shapes
from common.measuring import bench, traffic
from modules.models import GeGLUMLP
from modules.models import geglu_reference as reference
from tracereader import Expect

SCRIPT = "03_simple_mlp"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# measured: 37 (tools/dev/step_memory.py, CPU), rounded up
EVENTS_PER_STEP = 40
ANNOTATION = "mlp_fwd"


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 3, "elementwise": 2, "inductor": 0},
        cpu_present=("aten::linear", "aten::mm", "aten::gelu", "aten::mul"),
        cpu_absent=("Torch-Compiled Region*",),
        why="three projections, then GeLU and mul as separate elementwise kernels",
    ),
    "compile": Expect(
        gpu={"gemm": 3, "inductor": 1, "elementwise": 0},
        cpu_present=("Torch-Compiled Region*", "aten::mm"),
        cpu_absent=("aten::linear", "aten::gelu", "aten::mul"),
        gemms_as_in="eager",
        why="the GEMMs untouched, GeLU and mul fused into one Triton kernel",
    ),
}


def traffic_model(tokens: int, dim: int, hidden: int, elt: int, *, fused: bool):
    """Eager writes h = gelu(g) to HBM and the mul reads it back; a fused kernel reads g and u
    once and writes m once, so the [tokens, hidden] intermediate never makes the round trip."""
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
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
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

    mlp = GeGLUMLP(args.dim, args.hidden).to(run.device, run.dtype).eval()
    forward = torch.compile(mlp) if args.compile else mlp
    x = torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)

    with torch.no_grad():
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

    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        tokens, elt = args.batch * args.seq, x.element_size()
        model = traffic_model(tokens, args.dim, args.hidden, elt, fused=args.compile)
        with torch.no_grad():
            bench.report(lambda: forward(x), run=run, model=model, trace=seen.trace, args=args)
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
