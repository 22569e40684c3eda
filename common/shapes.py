"""The lessons' shape flags, the file tag they give, and the memory a run of that shape holds.

02_linear's nn.Linear (batch, in_dim, out_dim); the GeGLU MLP's (03_*, 05_tp_mlp; tokens =
batch x seq, model width dim, MLP width hidden); attention's (04_*; q, k and v are
[batch, heads, seq, head_dim] as SDPA takes them, 04_d lays them out as
[batch, seq, heads, head_dim], the same elements). The unfused attention's scores are
[batch, heads, seq, seq], which is what makes attention memory-hungry.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from common.cli import Run, element_size, positive_int

# --- nn.Linear -----------------------------------------------------------------------------------


def add_linear_flags(parser: argparse.ArgumentParser) -> None:
    """The post's shape: x [1024, 32] through nn.Linear(32, 64)."""
    parser.add_argument(
        "--batch", type=positive_int, default=1024, help="rows of x (default: 1024, the post's)"
    )
    parser.add_argument(
        "--in_dim", "--in-dim", type=positive_int, default=32, help="input features (default: 32)"
    )
    parser.add_argument(
        "--out_dim",
        "--out-dim",
        type=positive_int,
        default=64,
        help="output features (default: 64)",
    )


def linear_tag(args: argparse.Namespace) -> str:
    return f"b{args.batch}_in{args.in_dim}_out{args.out_dim}"


# --- the GeGLU MLP ------------------------------------------------------------------------------


def add_mlp_flags(parser: argparse.ArgumentParser) -> None:
    """The post's shape: 64 sequences of 128 tokens, width 768, MLP width 3072."""
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


def mlp_tag(args: argparse.Namespace) -> str:
    return f"b{args.batch}_s{args.seq}_d{args.dim}_h{args.hidden}"


def mlp_bytes_needed(args: argparse.Namespace, run: Run) -> int:
    """What a GeGLU MLP run holds at its peak, in bytes.

    In the run's dtype: the three weights, x, the intermediates g, u, h, m and two outputs
    alive at once (warm-up keeps the last). The float32 reference adds a float32 copy of the
    weights and x and its own intermediates and output. The comparison itself works in
    slices and adds little.
    """
    tokens, dim, hidden = args.batch * args.seq, args.dim, args.hidden
    weights, x, inner, y = 3 * dim * hidden, tokens * dim, 4 * tokens * hidden, tokens * dim
    return (weights + x + inner + 2 * y) * element_size(run) + (weights + x + inner + y) * 4


# --- attention ----------------------------------------------------------------------------------


def add_attention_flags(parser: argparse.ArgumentParser) -> None:
    """The public port's flags and defaults: a batch of 8 sequences of 1024 tokens, 16 heads
    of 64 features (a GPT-2-medium-sized layer)."""
    parser.add_argument(
        "--batch", type=positive_int, default=8, help="sequences per batch (default: 8)"
    )
    parser.add_argument(
        "--heads", type=positive_int, default=16, help="attention heads (default: 16)"
    )
    parser.add_argument(
        "--seq",
        type=positive_int,
        default=1024,
        help="tokens per sequence; the unfused scores are [batch, heads, seq, seq], so memory "
        "grows with its square (default: 1024)",
    )
    parser.add_argument(
        "--head_dim",
        "--head-dim",
        type=positive_int,
        default=64,
        help="features per head; the scores are scaled by 1/sqrt(head_dim) (default: 64)",
    )


def attention_tag(args: argparse.Namespace) -> str:
    return f"b{args.batch}_h{args.heads}_s{args.seq}_d{args.head_dim}"


@dataclass(frozen=True)
class AttentionSizes:
    """The shape, and element counts of one run's tensors."""

    batch_heads: int  # independent attention problems: batch * heads
    seq: int
    head_dim: int
    qkv: int  # one of q, k, v or the output: batch * heads * seq * head_dim
    scores: int  # one [batch, heads, seq, seq] buffer
    mask: int  # the [seq, seq] causal mask


def attention_sizes(args: argparse.Namespace) -> AttentionSizes:
    bh = args.batch * args.heads
    return AttentionSizes(
        batch_heads=bh,
        seq=args.seq,
        head_dim=args.head_dim,
        qkv=bh * args.seq * args.head_dim,
        scores=bh * args.seq * args.seq,
        mask=args.seq * args.seq,
    )


def attention_bytes_needed(
    args: argparse.Namespace, run: Run, *, score_bytes: int, fp32_copies: int = 0
) -> int:
    """What an attention run holds at its peak, in bytes.

    Always, in the run's dtype: q, k, v and the causal mask (one byte per element), and two
    outputs (warm-up keeps the last one while the next is computed).
    The forward's own peak: `score_bytes` per [batch, heads, seq, seq] element (the naive
    forward holds two score buffers at once, softmax's output beside its input: 2 x the
    element size; a fused kernel holds none: 0), plus `fp32_copies` float32 tensors the size
    of q (SDPA's math backend upcasts q, k, v and scales q and k).
    The float32 reference, computed while one output is alive: float32 copies of q, k, v, two
    float32 score buffers and its output. The forward's intermediates are gone by then, so
    the larger of the two counts, not their sum.
    """
    n = attention_sizes(args)
    elt = element_size(run)
    inputs = 3 * n.qkv * elt + n.mask
    forward = n.scores * score_bytes + fp32_copies * n.qkv * 4 + 2 * n.qkv * elt
    reference = (4 * n.qkv + 2 * n.scores) * 4 + n.qkv * elt
    return inputs + max(forward, reference)
