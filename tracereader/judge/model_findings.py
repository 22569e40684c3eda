"""What an expert says first about a real model's step, each ranked by its time at stake:

- a GEMM on a slow path because of its shape: a dimension that is no multiple of 8 (16-bit)
  or 4 (fp32) sends cuBLAS to an unaligned kernel (`align1`, an older architecture's
  fallback) at a fraction of the rate the step's aligned GEMMs reach (GPT-2's LM head, N =
  50257: pad the vocabulary to 50304);
- float32 GEMMs beside 16-bit ones: a mixed-precision step whose GEMMs partly run on CUDA
  cores (weights or inputs autocast did not reach, an expert layer's grouped GEMM);
- the optimizer's share of the GPU and its kind (for-loop, foreach or fused AdamW);
- autocast's weight casts: fp32 weights cast to 16 bits again for every GEMM of every step;
- on one rank of several, NCCL kernel time holds the wait for the other ranks.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from tracereader.analyses import breakdown, gemms, phases
from tracereader.analyses.casts import cast
from tracereader.analyses.nesting import innermost
from tracereader.judge.finding import Finding
from tracereader.names.kernel_names import CUDA_CORES, TF32, readable
from tracereader.trace.events import CAST_OPS
from tracereader.trace.model import Step, Trace, input_dtype, subtree

SLOW = 0.5  # a GEMM below this share of the step's best aligned rate is on a slow path
# 06_train_step.py on an H100 (docs/lessons/06_train_step.md): AdamW's GPU time over the same
# 31 fp32 tensors, fused 1.44 ms against foreach 3.95 ms and for-loop 3.46 ms
FUSED_OVER = {"foreach": 1.44 / 3.95, "for-loop": 1.44 / 3.46}


def _aligned(item, dims) -> bool:
    """N and K multiples of 16 bytes' worth of elements: what cuBLAS's aligned kernels need."""
    elt = gemms.element_bytes(item) or 2
    multiple = max(16 // elt, 1)
    _, _, n, k = dims
    return n % multiple == 0 and k % multiple == 0


def _per_step(trace: Trace, pick) -> float:
    return statistics.median(sum(pick(s)) for s in trace.steps) if trace.steps else 0.0


def _slow_shape(trace: Trace) -> Finding | None:
    step = trace.steps[-1]
    rated = [(i, gemms.shape(i), gemms.rate(i)) for i in step.gpu]
    rated = [(i, dims, r) for i, dims, r in rated if dims and r]
    best: dict[int | None, float] = {}  # per element size: the step's best aligned rate
    for i, dims, r in rated:
        if _aligned(i, dims):
            elt = gemms.element_bytes(i)
            best[elt] = max(best.get(elt, 0.0), r)
    slow = [
        (i, dims, r)
        for i, dims, r in rated
        if not _aligned(i, dims) and r < SLOW * best.get(gemms.element_bytes(i), 0.0)
    ]
    if not slow:
        return None
    at_stake = sum(i.dur - gemms.flops(i) / best[gemms.element_bytes(i)] * 1e6 for i, _, _ in slow)
    item, dims, r = max(slow, key=lambda x: x[0].dur)
    _, m, n, k = dims
    multiple = max(16 // (gemms.element_bytes(item) or 2), 1)
    bad = [(name, d) for name, d in (("N", n), ("K", k)) if d % multiple]
    name, value = bad[0]
    padded = -(-value // 64) * 64
    busy = breakdown.step(step)["gpu_busy_us"] or 1.0
    return Finding(
        "gemm shape",
        f"{item.launched_by} [{m}, {k}] x [{k}, {n}] ({name} = {value}, not a multiple of "
        f"{multiple}) runs {readable(item.name)} at {r / 1e12:.0f} TFLOP/s against "
        f"{best[gemms.element_bytes(item)] / 1e12:.0f} for this step's aligned GEMMs: "
        f"{item.dur:.0f} us, "
        f"{100 * item.dur / busy:.0f}% of the step's GPU busy time"
        + (f" ({len(slow)} such GEMMs)" if len(slow) > 1 else ""),
        us=at_stake,
        next=f"pad {name} to a multiple of 64 ({padded}; for a vocabulary, pad the embedding "
        "and the head and ignore the extra logits)",
    )


def _fp32_beside_16bit(trace: Trace) -> Finding | None:
    step = trace.steps[-1]
    if input_dtype(step) in ("bf16", "fp16"):
        return None  # a 16-bit run's float32 work: kernel_findings' [precision] says it
    items = [i for i in step.gpu if i.klass.cls == "gemm" and not i.klass.joins_previous]
    slow = [i for i in items if i.klass.facts.get("precision") in (CUDA_CORES, TF32)]
    fast = [i for i in items if str(i.klass.facts.get("precision", "")).startswith("bf16")]
    if not slow or not fast:
        return None
    slow_us = breakdown.busy(slow)
    launchers = defaultdict(float)
    for i in slow:
        launchers[i.launched_by] += i.dur
    ranked = sorted(launchers.items(), key=lambda kv: -kv[1])[:3]
    top = ", ".join(f"{n} {us / 1e3:.1f} ms" for n, us in ranked)
    # what they would take at the 16-bit GEMMs' achieved rate, where shapes are recorded
    rates = [r for r in (gemms.rate(i) for i in fast) if r]
    work = [gemms.flops(i) for i in slow]
    cores = sum(i.klass.facts.get("precision") == CUDA_CORES for i in slow)
    # without shapes: fp32 on CUDA cores runs at about a tenth of bf16 (Hopper: 67 of 989
    # TFLOP/s), TF32 at half
    fallback = 0.9 if cores else 0.5
    saved = slow_us - sum(work) / max(rates) * 1e6 if rates and all(work) else slow_us * fallback
    how = (f"{cores} on CUDA cores" if cores == len(slow) else
           f"{cores} on CUDA cores, {len(slow) - cores} in TF32")  # fmt: skip
    tf32 = ", or allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True)" if cores else ""
    return Finding(
        "precision",
        f"{len(slow)} float32 GEMMs per step ({how}) beside {len(fast)} 16-bit ones: "
        f"{slow_us / 1e3:.1f} ms of GPU time ({top}): a mixed-precision step whose GEMMs "
        "partly miss bf16's Tensor-core rate",
        us=max(saved, 0.0),
        next="run them in bf16 too (the layer's weights or inputs autocast does not reach; "
        f"for an MoE's grouped GEMM, cast the experts' weights){tf32}",
    )


def _optimizer(trace: Trace) -> Finding | None:
    step = trace.steps[-1]
    rows = {r["phase"]: r for r in phases.step(step)}
    if "optimizer" not in rows or not rows["optimizer"]["gpu_us"]:
        return None
    names = {op.name for op in (*step.cpu_ops, *step.other_ops)}
    if any("_fused_adam" in n for n in names):
        kind = "fused"
    elif any(n.startswith("aten::_foreach_") for n in names):
        kind = "foreach"
    else:
        kind = "for-loop"
    busy = breakdown.step(step)["gpu_busy_us"] or 1.0
    opt = rows["optimizer"]["gpu_us"]
    share = opt / busy
    if kind == "fused" or share < 0.1:
        return None
    saved = opt * (1 - FUSED_OVER[kind])
    return Finding(
        "optimizer",
        f"the optimizer ({kind}) takes {opt / 1e3:.1f} ms of GPU time per step, {share:.0%} of "
        f"the step's GPU busy time",
        us=saved,
        next=f"fused=True (06_train_step.py measured fused AdamW at {FUSED_OVER[kind]:.0%} of "
        f"{kind}'s GPU time on an H100), or a larger batch per step",
    )


def _is_cast(op) -> bool:
    return op.name in CAST_OPS


def _weight_casts(trace: Trace) -> Finding | None:
    """fp32 -> 16-bit casts of 2-D tensors (weights) in the forward, with the GPU work they
    launch; repeated every step they are autocast's per-GEMM weight casts."""
    rows = []
    cast_around = innermost(_is_cast)  # one for the trace: nested casts walk the nest once
    for step in trace.steps:
        us, count = 0.0, 0
        for op in step.cpu_ops:
            if "Cast to" not in op.args:
                continue  # no target dtype recorded (most ops): cast() would read none
            source, target, _ = cast(op)
            dims = op.args.get("Input Dims") or ()
            if source == "fp32" and target in ("bf16", "fp16") and dims and len(dims[0]) == 2:
                if cast_around(op.parent) is not None:
                    continue  # counted at the outer cast (autocast's aten::to holds _to_copy)
                count += 1
                us += sum(i.dur for i in _launched(step, op))
        rows.append((us, count))
    us = statistics.median(r[0] for r in rows)
    count = statistics.median(r[1] for r in rows)
    if not count or not us:
        return None
    busy = statistics.median(breakdown.step(s)["gpu_busy_us"] for s in trace.steps) or 1.0
    return Finding(
        "autocast",
        f"autocast casts {count:g} fp32 weights to 16 bits every step: {us / 1e3:.2f} ms of "
        f"copies per step, {us / busy:.0%} of the GPU busy time",
        us=us,
        next="keep 16-bit weights for the compute and fp32 master weights in the optimizer "
        "(FSDP2's MixedPrecisionPolicy, or a bf16 model with an fp32 optimizer copy)",
    )


def _launched(step: Step, op) -> list:
    return [i for o in subtree(step, op) for i in o.launched]


def found(trace: Trace) -> list[Finding | None]:
    if not trace.steps or not trace.gpu_all:
        return []
    return [_slow_shape(trace), _fp32_beside_16bit(trace), _optimizer(trace),
            _weight_casts(trace)]  # fmt: skip
