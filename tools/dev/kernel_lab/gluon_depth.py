"""Is gluon's 128 x 128 pingpong at the post's shape held back by how far its loads run ahead?
(issue 29: consumers wait on data at 20% of their span while the producer's ring is full.)

The ring's lead over the tensor pipe is its bytes in flight over the bytes a clock of wgmma
eats: 6 stages of 128 x 64 K steps (32 KB each, 512 clocks of work) give ~3,000 clocks. This
times the kernel with fewer stages (less lead), and with 32-wide K steps (16 KB, 256 clocks:
the same bytes in flight, cut finer, twice the barriers) and 128-wide ones (64 KB, 1024
clocks, half the barriers), beside cuBLAS's GEMM, in round-robin
passes (gluon_bench's), each checked against the float32 reference first. If fewer stages cost
time in proportion, the lead is the limit; if not, it is not.

    python3 -m tools.dev.kernel_lab.gluon_depth [--m 8192 --dim 768 --hidden 3072]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch
import torch.nn.functional as F

from common import cli
from modules.geglu import fused as fused_geglu
from tools.dev.kernel_lab import gluon_bench


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    gluon_bench.shape_args(parser)
    args = parser.parse_args(argv)
    if why := gluon_bench.refusal(args):
        print(f"error: {why}", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    base = replace(fused_geglu.CONFIGS["gluon"], fast_tanh=True)  # the post's fastest
    configs = [base] + [replace(base, stages=s) for s in (5, 4, 3)]
    configs += [replace(base, block_k=32, stages=s) for s in (12, 8)]
    configs += [replace(base, block_k=128, stages=3)]  # 1024 clocks a step, the same bytes
    torch.manual_seed(0)
    x = torch.randn(args.m, args.dim, device="cuda", dtype=torch.bfloat16)
    gate, up = (torch.randn(args.hidden, args.dim, device="cuda", dtype=torch.bfloat16)
                / args.dim**0.5 for _ in "gu")  # fmt: skip
    calls = {}
    for cfg in configs:
        call, note = gluon_bench.try_config(cfg, x, gate, up, args.hidden)
        print(f"  {'ok ' if call else 'BAD'} {cfg.describe()}: {note}")
        if call:
            calls[cfg.describe()] = call
    concat = torch.cat([gate, up]).contiguous()
    calls["cuBLAS gate+up, one GEMM"] = lambda: F.linear(x, concat)
    flops = 4 * args.m * args.dim * args.hidden
    print(f"M={args.m} dim={args.dim} hidden={args.hidden}, CUDA-graph replays, L2 flushed:")
    gluon_bench.report(gluon_bench.interleaved(gluon_bench.graph_calls(calls)), None, flops)
    return 0


if __name__ == "__main__":
    sys.exit(gluon_bench.run(main))
