"""Attention at one query per sequence (a decode step), split across the cache: the kernel that
08_generate.py's `--attention split` runs. Read it beside that lesson.

At one query the arithmetic is nothing (4 FLOPs per cached value) and the whole job is reading
the cache. SDPA's kernels give each (sequence, key/value head) to one block: at batch 1 and 8 kv
heads, 8 blocks on 132 SMs stream 768 positions each (21 us on an H200 for 3 MB). Here the
positions are cut into splits, one program per (sequence, kv head, split), as FlashDecoding does:

    partial   each program: its group's query heads (grouped-query attention: heads // kv_heads
              of them share the key/value head) against its split's keys, only those written so
              far (<= the position); its softmax's running max and sum, and its weighted values
    combine   per query head: the splits' partials rescaled to one max and summed

The position is read on the device, so a CUDA graph replays the step at the next position; keys
past it are neither read nor counted. Both kernels are Triton, registered as a custom op that
torch.compile keeps in its graph. On a CPU, TRITON_INTERPRET=1 runs them in NumPy (the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from modules.triton_support import INTERPRETING, UPCAST_FOR_INTERPRETER, sm_count, traceable

OP = "profiling_pytorch::decode_attention"
BLOCK_N = 64  # keys per iteration of a split
MIN_ROWS = 16  # the group's query heads padded to tl.dot's smallest M


@triton.jit
def decode_attention_partial_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, acc_ptr, m_ptr, l_ptr,
    stride_qb, stride_qh, keys,
    KV: tl.constexpr, GROUP: tl.constexpr, SPLITS: tl.constexpr, PER_SPLIT: tl.constexpr,
    D: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, SCALE: tl.constexpr,
):  # fmt: skip
    """One (sequence b, kv head h, split s): softmax(q k^T) v over its keys, unnormalized."""
    bh, split = tl.program_id(0), tl.program_id(1)
    b, h = bh // KV, bh % KV
    rows, d = tl.arange(0, ROWS), tl.arange(0, D)
    live = rows < GROUP  # the padding rows compute nothing that is kept
    heads = h * GROUP + rows
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
                mask=live[:, None], other=0.0)  # fmt: skip
    if UPCAST_FOR_INTERPRETER:
        q = q.to(tl.float32)
    seen = tl.minimum(tl.load(pos_ptr) + 1, keys)  # keys 0..pos are written
    start = split * PER_SPLIT
    end = tl.minimum(start + PER_SPLIT, seen)
    m = tl.full((ROWS,), -1.0e30, tl.float32)  # finite: an empty split combines to weight 0
    total = tl.zeros((ROWS,), tl.float32)  # the softmax's running sum
    acc = tl.zeros((ROWS, D), tl.float32)
    cache = bh * keys * D
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        inside = n < end
        k = tl.load(k_ptr + cache + n[:, None] * D + d[None, :], mask=inside[:, None], other=0.0)
        v = tl.load(v_ptr + cache + n[:, None] * D + d[None, :], mask=inside[:, None], other=0.0)
        if UPCAST_FOR_INTERPRETER:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * SCALE  # [ROWS, BLOCK_N]; a constexpr: float32, never
        # the float64 that a Python float argument becomes under Inductor's launcher
        s = tl.where(inside[None, :], s, -1.0e30)
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        total = total * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = (bh * SPLITS + split) * ROWS + rows
    tl.store(acc_ptr + out[:, None] * D + d[None, :], acc)
    tl.store(m_ptr + out, m)
    tl.store(l_ptr + out, total)


@triton.jit
def split_softmax_combine_kernel(
    acc_ptr, m_ptr, l_ptr, o_ptr, stride_ob, stride_oh,
    KV: tl.constexpr, GROUP: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
    D: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """One query head (b, head): its splits' partials rescaled to their common max, summed."""
    b, head = tl.program_id(0), tl.program_id(1)
    bh, row = b * KV + head // GROUP, head % GROUP
    s, d = tl.arange(0, SPLITS_P2), tl.arange(0, D)
    at = (bh * SPLITS + s) * ROWS + row
    m = tl.load(m_ptr + at, mask=s < SPLITS, other=-1.0e30)
    total = tl.load(l_ptr + at, mask=s < SPLITS, other=0.0)
    acc = tl.load(acc_ptr + at[:, None] * D + d[None, :], mask=(s < SPLITS)[:, None], other=0.0)
    w = tl.exp(m - tl.max(m, axis=0))
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(total * w, axis=0)
    tl.store(o_ptr + b * stride_ob + head * stride_oh + d, out.to(o_ptr.dtype.element_ty))


def splits_for(batch: int, kv_heads: int, keys: int, sms: int) -> int:
    """Splits enough for about two programs per SM, none shorter than BLOCK_N keys."""
    return max(1, min(triton.cdiv(keys, BLOCK_N), triton.cdiv(2 * sms, batch * kv_heads)))


def _sms(device: torch.device) -> int:
    """The GPU's SMs; under the interpreter an H100/H200's 132, so its splits are the GPU's."""
    return sm_count(device) if device.type == "cuda" else 132


def launch(q, k, v, pos, wrap=lambda kernel: kernel) -> torch.Tensor:
    """q [B, H, 1, D]; k, v [B, KV, keys, D] contiguous caches; pos [1] the last position
    written. Returns [B, H, 1, D]."""
    b, heads, _, dim = q.shape
    kv, keys = k.shape[1], k.shape[2]
    group = heads // kv
    rows = max(MIN_ROWS, triton.next_power_of_2(group))
    splits = splits_for(b, kv, keys, _sms(q.device))
    per_split = triton.cdiv(triton.cdiv(keys, splits), BLOCK_N) * BLOCK_N
    part = (b * kv, splits, rows)
    acc = torch.empty((*part, dim), device=q.device, dtype=torch.float32)
    m = torch.empty(part, device=q.device, dtype=torch.float32)
    total = torch.empty(part, device=q.device, dtype=torch.float32)
    out = torch.empty((b, heads, 1, dim), device=q.device, dtype=q.dtype)
    meta = dict(KV=kv, GROUP=group, SPLITS=splits, D=dim, ROWS=rows)
    wrap(decode_attention_partial_kernel)[(b * kv, splits)](
        q, k, v, pos, acc, m, total, q.stride(0), q.stride(1), keys,
        PER_SPLIT=per_split, BLOCK_N=BLOCK_N, SCALE=dim**-0.5, **meta,
    )  # fmt: skip
    wrap(split_softmax_combine_kernel)[(b, heads)](
        acc, m, total, out, out.stride(0), out.stride(1),
        SPLITS_P2=triton.next_power_of_2(splits), **meta,
    )  # fmt: skip
    return out


@triton_op(OP, mutates_args=())
def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor
) -> torch.Tensor:
    return launch(q.contiguous(), k, v, pos, wrap=traceable)


@decode_attention.register_fake
def _(q, k, v, pos):
    return q.new_empty(q.shape)


def usable(device: torch.device, compiled: bool, flag: str = "--attention split") -> str | None:
    """Why the flag's Triton kernels (these, or decode_gemv's) cannot run here, or None: a CUDA
    GPU; on a CPU Triton's interpreter, uncompiled (Inductor would trace into the kernels,
    which the interpreter runs in NumPy)."""
    if device.type == "cuda":
        return None
    if not INTERPRETING:
        return f"{flag} runs Triton kernels: a CUDA GPU, or TRITON_INTERPRET=1 on a CPU"
    if compiled:
        return f"{flag} with --compile needs a CUDA GPU (Triton's interpreter runs it eagerly)"
    return None
