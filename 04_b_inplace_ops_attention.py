"""Part 3, second rung: the same attention with the mask applied in place (`masked_fill_`).

You will learn: how an out-of-place op's hidden copy shows up and disappears in a trace, and
when writing in place is safe.

Why in place is safe here: the forward runs under torch.no_grad(), so autograd records no
graph and keeps no tensor for a backward pass; nothing will ever read the scaled scores again,
and overwriting them loses nothing. With autograd on, safety becomes a question for each op
(did an earlier op save the very tensor being overwritten for its backward?); autograd's
version counters then turn a violation into an error at backward time, not a wrong gradient.
What it saves: one [batch, heads, seq, seq] copy per forward, i.e. a read and a write of the
whole scores through GPU memory, and an allocation of their size. The forward's peak memory
stays at two score-sized buffers (softmax still writes a new tensor beside its input), so the
saving shows in the memory allocated per forward, which the lesson prints beside the peak:
one score-sized tensor less than 04_a, at the same peak.

Guess first. Per recorded step, on a GPU:
  eager     five GPU operations, one fewer than 04_a: the q @ k^T GEMM, the scale multiply,
            the masking kernel (now writing into the scores themselves), ATen's softmax
            kernel, and the attn @ v GEMM. No Memcpy. Hopper may add a `Memset`. CPU lane:
            aten::masked_fill_ with nothing under it that copies; no aten::clone.
  compiled  the same kernels as 04_a compiled: before fusing, the compiler rewrites in-place
            ops as out-of-place ones (functionalization), so both sources become one graph;
            the compiler had already made this saving for 04_a.
On a CPU the same dispatch chain appears, with no kernels under it.

    uv run 04_b_inplace_ops_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64
    uv run 04_b_inplace_ops_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --compile
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

SCRIPT = "04_b_inplace_ops_attention"
# Profiler events a recorded step adds (cli.ensure_fits bounds --active with it):
# as 04_a's 47 measured: the same attention, ops in place
EVENTS_PER_STEP = 50
ANNOTATION = "attn_fwd"


def causal_mask(seq: int, device: torch.device) -> torch.Tensor:
    """True above the diagonal: the later tokens each position must not attend to."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(diagonal=1)


def inplace_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1)  # [batch, heads, seq, seq]
    scores = scores * scale
    scores.masked_fill_(mask, float("-inf"))  # in place: the scores are overwritten, not copied
    attn = torch.softmax(scores, dim=-1)
    return attn @ v


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 2, "elementwise": 2, "aten": 1, "memcpy": 0, "inductor": 0},
        cpu_present=(
            "aten::matmul",
            "aten::bmm",
            "aten::mul",
            "aten::masked_fill_",
            "aten::softmax",
        ),
        cpu_absent=("aten::masked_fill", "aten::clone", "Torch-Compiled Region*"),
        # bf16/fp16 GEMMs run on Tensor cores (other --dtype: not declared)
        gemm_precision={"bf16": "bf16/fp16 Tensor cores", "fp16": "bf16/fp16 Tensor cores"},
        why="04_a minus the copy: the mask writes into the scores it reads",
    ),
    "compile": Expect(
        gpu={"gemm": 2, "inductor": 1, "memcpy": 0, "elementwise": 0, "aten": 0},
        cpu_present=("Torch-Compiled Region*", "aten::bmm"),
        cpu_absent=("aten::masked_fill_", "aten::clone", "aten::softmax", "aten::mul"),
        gemms_as_in="eager",
        gemm_precision={"bf16": "bf16/fp16 Tensor cores", "fp16": "bf16/fp16 Tensor cores"},
        why="the same fused kernel as 04_a compiled: the compiler had already dropped the copy",
    ),
}


def traffic_model(sizes: shapes.AttentionSizes, elt: int, *, fused: bool) -> list[traffic.Kernel]:
    """04_a's model minus the clone: the GEMM writes the scores; scale, mask and softmax each
    read and write them; the second GEMM reads them. Fused, one kernel reads the GEMM's scores
    once and writes the probabilities once. The [S, S] mask is read once (it stays in cache).
    FLOPs: the GEMMs' full 4*B*H*S^2*D, the masked half included."""
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
            traffic.elementwise(
                "mask in place (fill -inf)", scores, elt, reads=1, broadcast_bytes=sizes.mask
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
    forward = torch.compile(inplace_attention) if args.compile else inplace_attention

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
