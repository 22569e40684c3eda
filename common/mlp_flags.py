"""Shape flags, file tag and memory estimate shared by the two GeGLU MLP scripts."""

from __future__ import annotations

import argparse

import torch

from common.cli import Run, positive_int


def add_shape_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=positive_int, default=64, help="(default: 64)")
    parser.add_argument(
        "--seq",
        type=positive_int,
        default=128,
        help="tokens per sequence; the GEMMs see M = batch * seq (default: 128)",
    )
    parser.add_argument("--dim", type=positive_int, default=768, help="model width (default: 768)")
    parser.add_argument(
        "--hidden",
        type=positive_int,
        default=3072,
        help="MLP width, 4 x dim as usual (default: 3072)",
    )


def shape_tag(args: argparse.Namespace) -> str:
    return f"b{args.batch}_s{args.seq}_d{args.dim}_h{args.hidden}"


def bytes_needed(args: argparse.Namespace, run: Run) -> int:
    """What a GeGLU MLP run holds at its peak, in bytes.

    In the run's dtype: the three weights, x, the intermediates g, u, h, m and two outputs
    alive at once (warm-up keeps the last). The float32 reference adds a float32 copy of the
    weights and x and its own intermediates and output. The comparison itself works in
    slices and adds little.
    """
    tokens, dim, hidden = args.batch * args.seq, args.dim, args.hidden
    weights, x, inner, y = 3 * dim * hidden, tokens * dim, 4 * tokens * hidden, tokens * dim
    elt = torch.empty((), dtype=run.dtype).element_size()
    return (weights + x + inner + 2 * y) * elt + (weights + x + inner + y) * 4
