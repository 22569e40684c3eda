"""What an expert names first when the GPU is the slower side, each as the GPU time a fix would
save per step (median over the steps) and the op that holds most of it:

  fp32 GEMMs          GEMMs on CUDA cores (fp32 SIMT kernels) making most of the GEMM time:
                      TF32 or bf16 would run them at the datasheet's TF32 rate instead
  unaligned GEMMs     GEMMs whose own M, N or K (from the launching matmul's recorded shapes,
                      never a convolution's) is no multiple of 16 bytes of elements, run below
                      the rate the step's aligned GEMMs reach together: the time above it
  unfused elementwise runs of elementwise/reduction kernels with no other GPU work between them,
                      three or more of ATen's elementwise kernels from at least two different
                      ops on tensors of one size (the optimizer's apart: its own finding), each
                      a separate pass over memory: the run less one pass (its median full-size
                      kernel, what one fused kernel takes)
  recompute           forward ops run again inside the backward (gradient checkpointing): the
                      GPU time of what they launched
  autocast casts      fp32 tensors of two or more dimensions cast to 16 bits in the forward
                      (autocast's weight casts) and the casts back in the backward
                      (ToCopyBackward0): their kernels' time
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter

from tracereader.analyses import gemms
from tracereader.analyses.casts import cast
from tracereader.analyses.nesting import along, innermost
from tracereader.names.devices import datasheet
from tracereader.names.kernel_names import CUDA_CORES
from tracereader.trace import intervals
from tracereader.trace.events import CAST_OPS
from tracereader.trace.model import CpuOp, Step, Trace

TF32_OVER_FP32 = 494.7 / 66.9  # Hopper SXM's datasheet, where the device's is not known
MATMUL_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
     "aten::_grouped_mm", "aten::_scaled_mm", "aten::addbmm"}
)  # fmt: skip
CHAIN_CLASSES = frozenset({"elementwise", "aten"})
OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#|^(## )?optimizer(\.step)?$")
CHAIN = 3  # kernels in a row that make an unfused chain
# Ops a backward never runs for its own gradient: under a backward node they are the forward
# run again (a checkpointed region recomputed).
FORWARD_ONLY = frozenset(
    {"aten::linear", "aten::addmm", "aten::gelu", "aten::native_dropout", "aten::dropout",
     "aten::softmax", "aten::_softmax", "aten::layer_norm", "aten::native_layer_norm",
     "aten::rms_norm", "aten::_fused_rms_norm", "aten::scaled_dot_product_attention",
     "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
     "aten::_scaled_dot_product_cudnn_attention", "aten::conv2d", "aten::convolution",
     "aten::embedding", "aten::silu", "aten::relu", "aten::group_norm", "aten::batch_norm"}
)  # fmt: skip


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def _top(counter: Counter) -> str | None:
    return counter.most_common(1)[0][0] if counter else None


def _gemm_items(s: Step) -> list:
    return [i for i in s.gpu if i.klass.cls == "gemm"]


def fp32_gemms(trace: Trace) -> dict | None:
    ratio = TF32_OVER_FP32
    sheet = datasheet(trace.device)
    if sheet and sheet.rate("fp32") and sheet.rate("tf32"):
        ratio = sheet.rate("tf32") / sheet.rate("fp32")
    rows, total, by = [], [], Counter()
    for s in trace.steps:
        items = _gemm_items(s)
        slow = [i for i in items if i.klass.facts.get("precision") == CUDA_CORES]
        rows.append(sum(i.dur for i in slow))
        total.append(sum(i.dur for i in items))
        for i in slow:
            by[i.launched_by] += i.dur
    fp32, gemm = _median(rows), _median(total)
    if not fp32 or fp32 < 0.5 * gemm:
        return None  # a 16-bit step's fp32 leftovers: model_findings' [precision] says it
    return {
        "cause": "fp32 GEMMs",
        "culprit": _top(by),
        "gpu_us": fp32 * (1 - 1 / ratio),
        "fp32_us": fp32,
        "gemm_us": gemm,
        "ratio": ratio,
    }


def _aligned(item, dims) -> bool:
    """M, N and K multiples of 16 bytes' worth of elements: an operand read transposed (a
    weight gradient's) has M as its leading dimension."""
    multiple = max(16 // (gemms.element_bytes(item) or 2), 1)
    return all(d % multiple == 0 for d in dims[1:])


def unaligned_gemms(trace: Trace) -> dict | None:
    rows, by, shapes = [], Counter(), Counter()
    for s in trace.steps:
        rated = []
        for i in _gemm_items(s):
            dims = gemms.shape(i)
            if dims and i.launcher is not None and i.launcher.name in MATMUL_OPS and i.dur > 0:
                rated.append((i, dims, gemms.flops(i)))
        good = [(i, f) for i, d, f in rated if _aligned(i, d)]
        bad = [(i, d, f) for i, d, f in rated if not _aligned(i, d)]
        if not good or not bad:
            rows.append(0.0)
            continue
        rate = sum(f for _, f in good) / sum(i.dur for i, _ in good)  # flops per us
        saved = 0.0
        for i, d, f in bad:
            lost = i.dur - f / rate
            if lost > 0:
                saved += lost
                by[i.launched_by] += lost
                shapes[d] += lost
        rows.append(saved)
    saved = _median(rows)
    if not saved:
        return None
    _, m, n, k = _top(shapes)
    return {"cause": "unaligned GEMM", "culprit": _top(by), "gpu_us": saved,
            "shape": (m, n, k)}  # fmt: skip


def _size(item) -> int | None:
    dims = item.launcher.args.get("Input Dims") if item.launcher is not None else None
    return max((math.prod(d) for d in dims or () if d), default=None)


def _is_chain(run: list, sizes: list) -> bool:
    """`sizes`: each item's _size, read once as the run grew."""
    plain = [i for i in run if i.klass.cls == "elementwise"]
    names = {i.launched_by for i in plain}
    return len(plain) >= CHAIN and len(names) >= 2 and len(set(sizes) - {None}) <= 2


def _chains(s: Step, optimizer) -> list[list]:
    """`optimizer`: the innermost optimizer region around an op (_in_optimizer)."""
    out, run, sizes = [], [], []
    for item in s.gpu:  # launch order
        if item.kind == "memset":
            continue
        if (
            item.kind == "kernel"
            and item.klass.cls in CHAIN_CLASSES
            and optimizer(item.launcher) is None
        ):
            size = _size(item)
            if run and size not in (None, sizes[-1]) and len(run) < CHAIN:
                run, sizes = [], []  # another tensor's work: a run starts again
            run.append(item)
            sizes.append(size)
            continue
        if _is_chain(run, sizes):
            out.append(run)
        run, sizes = [], []
    if _is_chain(run, sizes):
        out.append(run)
    return out


def _in_optimizer(op: CpuOp) -> bool:
    return OPTIMIZER.search(op.name) is not None


def unfused(trace: Trace) -> dict | None:
    rows, kernels, by = [], [], Counter()
    optimizer = innermost(_in_optimizer)  # one for the trace: each op is walked once
    for s in trace.steps:
        saved = count = 0.0
        for run in _chains(s, optimizer):
            top = max(i.dur for i in run)
            full = [i.dur for i in run if i.dur >= 0.25 * top]
            saved += sum(i.dur for i in run) - statistics.median(full)
            count += len(run)
            for i in run:
                by[i.launched_by] += i.dur
        rows.append(saved)
        kernels.append(count)
    saved = _median(rows)
    if not saved:
        return None
    return {"cause": "unfused elementwise", "culprit": _top(by), "gpu_us": saved,
            "kernels": _median(kernels), "ops": [n for n, _ in by.most_common(4)]}  # fmt: skip


def _recomputed(above: tuple[bool, str | None] | None, op: CpuOp) -> tuple[bool, str | None]:
    """A fold (nesting.along): whether a backward node holds `op`, and the outermost forward
    op between the innermost such node and `op` (the one that launched its work again)."""
    if "Backward" in op.name or op.name.startswith("autograd::engine"):
        return True, None
    held, found = above or (False, None)
    if found is None and op.name in FORWARD_ONLY:
        found = op.name
    return held, found


def _is_node(op: CpuOp) -> bool:
    """A backward node: autograd's evaluate_function op."""
    return op.name.startswith("autograd::engine::evaluate_function")


def _recompute_items(s: Step, by: Counter, node_of, again) -> list:
    """Per backward node, the GPU work launched from its first recomputed forward op to its
    last (the forward replayed: its elementwise ops too). `node_of` and `again` answer
    _is_node and _recomputed for a launcher (one each for the trace)."""
    spans: dict[int, list[float]] = {}
    nodes: dict[int, list] = {}
    for i in s.gpu:
        node = node_of(i.launcher) if i.launcher is not None and i.call is not None else None
        if node is None:
            continue
        nodes.setdefault(id(node), []).append(i)
        held, name = again(i.launcher)
        name = name if held else None
        if name:
            span = spans.setdefault(id(node), [i.call.ts, i.call.ts])
            span[0], span[1] = min(span[0], i.call.ts), max(span[1], i.call.ts)
            by[name] += i.dur
    return [i for key, (lo, hi) in spans.items() for i in nodes[key] if lo <= i.call.ts <= hi]


def recompute(trace: Trace) -> dict | None:
    rows, by = [], Counter()
    node_of, again = innermost(_is_node), along(_recomputed)
    for s in trace.steps:
        rows.append(intervals.length(intervals.of(_recompute_items(s, by, node_of, again))))
    saved = _median(rows)
    if not saved:
        return None
    return {"cause": "recompute", "culprit": _top(by), "gpu_us": saved}


def _casts_around(above: tuple[bool, CpuOp | None] | None, op: CpuOp):
    """A fold (nesting.along): whether ToCopyBackward0 holds `op` (or is it), and the
    outermost cast op around it (itself included)."""
    back, outer = above or (False, None)
    if outer is None and op.name in CAST_OPS:
        outer = op
    return back or op.name == "ToCopyBackward0", outer


def _a_cast(item, around) -> str | None:
    """The cast op behind `item` where it is autocast's: an fp32 tensor of 2+ dimensions cast
    to 16 bits, or a cast inside ToCopyBackward0 (the gradient cast back). `around` answers
    _casts_around for its launcher."""
    back, outer = around(item.launcher)
    if back:
        return outer.name if outer is not None else "ToCopyBackward0"
    if outer is None:
        return None
    source, target, _ = cast(outer)
    dims = outer.args.get("Input Dims") or ()
    if source == "fp32" and target in ("bf16", "fp16") and dims and len(dims[0]) >= 2:
        return outer.name
    return None


def casts(trace: Trace) -> dict | None:
    rows, by = [], Counter()
    around = along(_casts_around)
    for s in trace.steps:
        items = []
        for i in s.gpu:
            name = _a_cast(i, around) if i.launcher is not None else None
            if name:
                items.append(i)
                by[name] += i.dur
        rows.append(intervals.length(intervals.of(items)))
    saved = _median(rows)
    if not saved:
        return None
    return {"cause": "autocast casts", "culprit": _top(by), "gpu_us": saved}


def read(trace: Trace) -> list[dict]:
    """Every cause above that the trace shows, largest saving first."""
    if not trace.gpu_all or not trace.steps:
        return []
    found = [f(trace) for f in (fp32_gemms, unaligned_gemms, unfused, recompute, casts)]
    return sorted((f for f in found if f), key=lambda f: -f["gpu_us"])
