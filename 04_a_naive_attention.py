"""Part 3, first rung: causal attention written from primitives, profiled line by line.

You will learn: that each line of a hand-written attention is its own kernel, that the
[batch, heads, seq, seq] scores travel to GPU memory and back between every pair of them, and
that an out-of-place op can hide a whole copy: `masked_fill` clones the scores before it masks.

Guess first. Per recorded step, on a GPU:
  eager     six GPU operations: the q @ k^T GEMM, an elementwise multiply (the scale), a
            `Memcpy DtoD` launched under aten::masked_fill > aten::clone (the out-of-place
            copy of the scores), the elementwise masking kernel, ATen's softmax kernel, and
            the attn @ v GEMM. Hopper may add a `Memset`. CPU lane: aten::matmul > aten::bmm
            (twice), aten::mul, aten::masked_fill > aten::clone, aten::softmax.
  compiled  the same two GEMMs around ONE Triton kernel in which Inductor fused scale, mask
            and softmax; no Memcpy, no clone. That kernel still reads the whole scores and
            writes the whole probabilities: fusion removes the round trips between the three
            ops, not the [seq, seq] buffers themselves (04_c's fused kernels do that).
  FLOPs     both GEMMs compute every score, the masked half above the diagonal included.
On a CPU the same dispatch chain appears, with no kernels under it.

    uv run 04_a_naive_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64
    uv run 04_a_naive_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --compile
"""

import math
import sys

import common.startup  # noqa: F401 - before torch: Ctrl-C while it loads is one line  # isort: skip
import torch
from torch.profiler import profile, record_function, schedule

from common import check, cli, outputs, profiling, shapes
from common.measuring import bench, traffic
from modules.models import attention_reference as reference
from tracereader import Expect

SCRIPT = "04_a_naive_attention"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# measured: 47 (tools/dev/step_memory.py, CPU), rounded up
EVENTS_PER_STEP = 50
ANNOTATION = "attn_fwd"


def causal_mask(seq: int, device: torch.device) -> torch.Tensor:
    """True above the diagonal: the later tokens each position must not attend to."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(diagonal=1)


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1)  # [batch, heads, seq, seq]
    scores = scores * scale
    scores = scores.masked_fill(mask, float("-inf"))  # out of place: a new [B, H, S, S] tensor
    attn = torch.softmax(scores, dim=-1)
    return attn @ v


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 2, "elementwise": 2, "aten": 1, "memcpy": 1, "inductor": 0},
        cpu_present=(
            "aten::matmul",
            "aten::bmm",
            "aten::mul",
            "aten::masked_fill",
            "aten::clone",
            "aten::softmax",
        ),
        cpu_absent=("Torch-Compiled Region*",),
        # bf16/fp16 GEMMs run on Tensor cores (other --dtype: not declared)
        gemm_precision={"bf16": "bf16/fp16 Tensor cores", "fp16": "bf16/fp16 Tensor cores"},
        why="one kernel per line, plus the copy hidden in the out-of-place masked_fill",
    ),
    "compile": Expect(
        gpu={"gemm": 2, "inductor": 1, "memcpy": 0, "elementwise": 0, "aten": 0},
        cpu_present=("Torch-Compiled Region*", "aten::bmm"),
        cpu_absent=("aten::masked_fill", "aten::clone", "aten::softmax", "aten::mul"),
        gemms_as_in="eager",
        gemm_precision={"bf16": "bf16/fp16 Tensor cores", "fp16": "bf16/fp16 Tensor cores"},
        why="the GEMMs untouched; scale, mask and softmax fused into one Triton kernel",
    ),
}


def traffic_model(sizes: shapes.AttentionSizes, elt: int, *, fused: bool) -> list[traffic.Kernel]:
    """Every unfused op writes the [B, H, S, S] scores to HBM and the next one reads them back:
    the first GEMM writes them; the scale reads and writes; masked_fill's clone copies them
    (read + write), the mask reads and writes; softmax reads and writes; the second GEMM reads
    them. Fused, one kernel reads the GEMM's scores once and writes the probabilities once.
    The [S, S] mask is read once (it stays in cache). FLOPs: the GEMMs' full 4*B*H*S^2*D."""
    bh, s, d, scores = sizes.batch_heads, sizes.seq, sizes.head_dim, sizes.scores
    qk = traffic.batched_gemm("q @ k^T GEMM", bh, s, d, s, elt)
    pv = traffic.batched_gemm("attn @ v GEMM", bh, s, s, d, elt)
    if fused:
        middle = [
            traffic.elementwise(
                "fused scale+mask+softmax", scores, elt, reads=1, broadcast_bytes=sizes.mask
            )
        ]
    else:
        middle = [
            traffic.elementwise("scores * scale", scores, elt, reads=1),
            traffic.copy("masked_fill's clone (DtoD)", scores, elt),
            traffic.elementwise(
                "mask (fill -inf)", scores, elt, reads=1, broadcast_bytes=sizes.mask
            ),
            traffic.rowwise("softmax", scores, elt),
        ]
    return [qk, *middle, pv]


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    shapes.add_attention_flags(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    run = cli.resolve(args)
    elt = cli.element_size(run)
    # The forward holds two [B, H, S, S] buffers at once (each op's input and output).
    cli.ensure_fits(
        shapes.attention_bytes_needed(args, run, score_bytes=2 * elt),
        run,
        trace=cli.profiled(args, EVENTS_PER_STEP),
    )
    out = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(shapes.attention_tag(args), args, run),
        gzip=args.gzip,
    )

    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))
    mask = causal_mask(args.seq, run.device)  # built once, outside the forward
    forward = torch.compile(naive_attention) if args.compile else naive_attention

    with torch.no_grad():
        y = profiling.warm_up(lambda: forward(q, k, v, mask), run, compiling=args.compile)
        check.against_reference(y, reference(q, k, v), run.dtype)
        del y

        profiling.reset_peak_memory(run)  # the peak printed below: the profiled steps' own
        # wait steps run untraced, warmup steps are traced and dropped, active steps are kept.
        with profile(
            activities=profiling.activities(run),
            schedule=schedule(
                wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1
            ),
            record_shapes=True,  # the table's input dims tell the two GEMMs apart
            acc_events=True,  # one cycle (repeat=1): keeps torch from warning it drops old cycles
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function(ANNOTATION):
                    forward(q, k, v, mask)
                prof.step()

    table = prof.key_averages().table(sort_by=profiling.sort_key(run), row_limit=args.rows)
    with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(table + "\n")
    profiling.show(table, out, run)

    seen = profiling.look(out, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        model = traffic_model(shapes.attention_sizes(args), elt, fused=args.compile)
        with torch.no_grad():
            bench.report(
                lambda: forward(q, k, v, mask), run=run, model=model, trace=seen.trace, args=args
            )
    return profiling.finish(args, out, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
