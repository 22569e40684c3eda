"""Shape flags, file tag and memory estimate shared by the four attention lessons (Part 3).

q, k and v are [batch, heads, seq, head_dim] as SDPA takes them (04_d lays them out as
[batch, seq, heads, head_dim], the same elements); the scores of the unfused forward are
[batch, heads, seq, seq], which is what makes attention memory-hungry.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from common.cli import Run, positive_int


def add_shape_flags(parser: argparse.ArgumentParser) -> None:
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


def shape_tag(args: argparse.Namespace) -> str:
    return f"b{args.batch}_h{args.heads}_s{args.seq}_d{args.head_dim}"


@dataclass(frozen=True)
class Sizes:
    """The shape, and element counts of one run's tensors."""

    batch_heads: int  # independent attention problems: batch * heads
    seq: int
    head_dim: int
    qkv: int  # one of q, k, v or the output: batch * heads * seq * head_dim
    scores: int  # one [batch, heads, seq, seq] buffer
    mask: int  # the [seq, seq] causal mask


def sizes(args: argparse.Namespace) -> Sizes:
    bh = args.batch * args.heads
    return Sizes(
        batch_heads=bh,
        seq=args.seq,
        head_dim=args.head_dim,
        qkv=bh * args.seq * args.head_dim,
        scores=bh * args.seq * args.seq,
        mask=args.seq * args.seq,
    )


def bytes_needed(
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
    n = sizes(args)
    elt = torch.empty((), dtype=run.dtype).element_size()
    inputs = 3 * n.qkv * elt + n.mask
    forward = n.scores * score_bytes + fp32_copies * n.qkv * 4 + 2 * n.qkv * elt
    reference = (4 * n.qkv + 2 * n.scores) * 4 + n.qkv * elt
    return inputs + max(forward, reference)


def explain_compile(parser: argparse.ArgumentParser, why: str) -> None:
    """Rewrite the shared --compile flag's help where a lesson refuses it, so --help says why."""
    parser._option_string_actions["--compile"].help = why  # argparse has no public setter
