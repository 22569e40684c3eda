"""The findings about single kernels (Part 3): occupancy and its gaps, split-K, hidden and clone
memcpys, a mask rebuilt every step, float32 work in a 16-bit run, a library's opaque CPU work."""

from __future__ import annotations

import math
import statistics

from tracereader.analyses import breakdown, generation
from tracereader.analyses.casts import cast
from tracereader.analyses.nesting import innermost
from tracereader.judge.cause_text import graphs
from tracereader.judge.finding import SHOWN_KERNELS, SMALL_STEP, Finding
from tracereader.names import footprint
from tracereader.names.kernel_names import CUDA_CORES, TF32, readable
from tracereader.trace import intervals
from tracereader.trace.model import (
    DTYPES,
    CpuOp,
    GpuItem,
    Step,
    Trace,
    ancestors,
    input_dtype,
    launched_below,
    subtree,
)

OCCUPANCY = "cudaOccupancyMaxActiveBlocksPerMultiprocessor"


LOW_OCCUPANCY_PCT = 25  # a theoretical occupancy at or below this is low


MAIN_KERNEL_SHARE = 0.1  # a kernel with this share of its step's GPU busy time is a main one
ONE_BLOCK_SHARE = 0.02  # single-block kernels worth a finding: this share of GPU busy time
ONE_BLOCK_US = 10.0  # and this much a step (a tiny problem's lone kernel is not one)


# An op's own CPU time, outside its children and its runtime calls, that makes a library's
# opaque bar worth pointing at: this many us and this share of the step's CPU time.
OPAQUE_US = 40


OPAQUE_SHARE = 0.2


SIXTEEN_BIT = {spelling: short for spelling, short in DTYPES.items() if short in ("bf16", "fp16")}


MASK_BUILDERS = frozenset({"aten::tril", "aten::triu", "aten::tril_", "aten::triu_"})


MASK_SOURCES = frozenset({"aten::ones", "aten::ones_like", "aten::full", "aten::new_ones"})


# Ops whose copy is their whole point: no in-place variant would avoid it.
COPYING_OPS = frozenset(
    {
        "aten::clone",
        "aten::contiguous",
        "aten::reshape",
        "aten::flatten",
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::repeat",
        "aten::cat",
        "aten::stack",
    }
)


def _occupancy(trace: Trace) -> list[Finding]:
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    step = trace.steps[-1]
    queries = sum(c.name == OCCUPANCY for c in step.runtime)
    gemm_launches = sorted({i.runtime for i in step.gpu if i.klass.cls == "gemm"})
    if queries:
        return [
            Finding(
                "launch",
                f"{queries} occupancy quer{'y' if queries == 1 else 'ies'} "
                f"({OCCUPANCY}) per step before launches: the library sizing its grid",
            )
        ]
    if gemm_launches:
        return [
            Finding(
                "launch",
                "no occupancy queries before the GEMMs, launched with "
                f"{', '.join(gemm_launches)} (Ampere's cuBLAS queries first; Hopper's "
                "nvjet kernels do not)",
            )
        ]
    return []


def _hidden_memcpy(trace: Trace) -> list[Finding]:
    if not trace.steps:
        return []
    for op in trace.steps[-1].cpu_ops:
        if op.name == "aten::addmm" and launched_below(op, "memcpy"):
            return [
                Finding(
                    "memcpy",
                    "aten::addmm runs as a Memcpy DtoD (C copied into the "
                    "output) and a GEMM that adds onto it: two GPU operations for one "
                    "CPU op",
                )
            ]
    return []


def _kernels_once(step: Step) -> list[GpuItem]:
    """The step's kernels, one per distinct name (its first launch), in launch order."""
    seen: set[str] = set()
    out = []
    for item in step.gpu:
        if item.kind == "kernel" and item.name not in seen:
            seen.add(item.name)
            out.append(item)
    return out


def _dims(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple | list) else "?"


def _size(nbytes) -> str:
    if not isinstance(nbytes, int):
        return "?"
    return f"{nbytes} B" if nbytes < 1024 else f"{nbytes / 1024:.3g} KB"


def _under(op: CpuOp | None) -> str:
    """ " under A > B": the two outermost ATen ops around `op` (itself included), the call a
    user made and the path it took (aten::scaled_dot_product_attention >
    aten::_scaled_dot_product_attention_math); "" when there is none."""
    names = [o.name for o in ancestors(op) if o.name.startswith("aten::")]
    return f" under {' > '.join(reversed(names[-2:]))}" if names else ""


def _split_k(trace: Trace) -> list[Finding]:
    """A GEMM that ran as a product kernel and a split-K reduce kernel."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    out, seen, gemm = [], set(), None
    for item in trace.steps[-1].gpu:
        if item.klass.cls != "gemm":
            continue
        if not item.klass.joins_previous:
            gemm = item
            continue
        if item.klass.detail != "split-K reduce":  # cuBLASLt's separate epilogue joins too
            continue
        if gemm is None or (gemm.name, item.name) in seen:
            continue
        seen.add((gemm.name, item.name))
        grid = gemm.args.get("grid")
        blocks = footprint.blocks(gemm.args)
        sms = trace.device_properties(gemm.args.get("device", 0)).get("numSms")
        here = (
            f"here a grid of {blocks} block{'s' if blocks != 1 else ''}, {_dims(grid)}"
            + (f", for {sms} SMs" if isinstance(sms, int) else "")
            if blocks
            else "a small output"
        )
        out.append(
            Finding(
                "split-K",
                f"{gemm.launched_by}'s GEMM ran as two kernels, {readable(gemm.name)} then "
                f"{readable(item.name)}: split-K, the K dimension cut into slices that "
                "separate blocks multiply at the same time, their partial sums added up by "
                "the second kernel; cuBLAS picks it when the output has too few tiles to "
                f"keep the SMs busy ({here}); one GEMM, counted once",
            )
        )
    return out


def _occupancy_gap(trace: Trace) -> list[Finding]:
    """Kernels whose recorded occupancy is 0 while their footprint and grid fill SMs."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    gaps = []
    for item in _kernels_once(trace.steps[-1]):
        if item.args.get("est. achieved occupancy %") != 0:
            continue
        props = trace.device_properties(item.args.get("device", 0))
        occ = footprint.occupancy(item.args, props)
        if occ is not None and occ.estimated_pct >= 1:
            gaps.append((item, occ, props))
    out = []
    for item, occ, props in gaps[:SHOWN_KERNELS]:
        args = item.args
        shared, default = args["shared memory"], props.get("sharedMemPerBlock")
        why = ""
        if isinstance(default, int) and shared > default:
            why = (
                f"; its shared memory is above the {default // 1024} KB a block gets by "
                "default, the limit the profiler's estimate assumes"
            )
        grid = args["grid"]
        out.append(
            Finding(
                "occupancy",
                f"{readable(item.name)} reads 0% est. achieved occupancy (launched with "
                f"{item.runtime}): a gap in the profiler's estimate, not an idle GPU; its "
                f"footprint, {args['registers per thread']} registers x "
                f"{math.prod(args['block'])} threads and {_size(shared)} of shared memory "
                f"per block, fits {occ.blocks_per_sm} block{'s' if occ.blocks_per_sm != 1 else ''}"
                f" per SM (limit: {occ.limited_by}), {occ.warps_per_sm} of {occ.max_warps} "
                f"warps = {footprint.rounded(occ.theoretical_pct)}% (with its grid of "
                f"{math.prod(grid)} blocks: {occ.estimated_pct}%){why}",
            )
        )
    if len(gaps) > SHOWN_KERNELS:
        out.append(
            Finding(
                "occupancy",
                f"{len(gaps) - SHOWN_KERNELS} more kernels read 0% the same way (explain "
                "shows each kernel's footprint and the occupancy it allows)",
            )
        )
    return out


def _low_occupancy_by_design(trace: Trace) -> list[Finding]:
    """A main kernel whose registers or shared memory per block keep its occupancy low."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    step = trace.steps[-1]
    busy = breakdown.step(step)["gpu_busy_us"]
    out = []
    for item in _kernels_once(step):
        reported = item.args.get("est. achieved occupancy %")
        if not isinstance(reported, int | float) or reported <= 0:
            continue
        if item.dur < MAIN_KERNEL_SHARE * busy:
            continue
        occ = footprint.occupancy(item.args, trace.device_properties(item.args.get("device", 0)))
        if (
            item.klass.cls != "attention"  # GEMMs are low by design too: not worth a line each
            or occ is None
            or occ.theoretical_pct > LOW_OCCUPANCY_PCT
            or occ.grid_blocks_per_sm < occ.blocks_per_sm  # the grid, not the design
            or not ("registers" in occ.limited_by or "shared memory" in occ.limited_by)
        ):
            continue
        out.append(
            Finding(
                "occupancy",
                f"{readable(item.name)} runs at {reported:g}% est. achieved occupancy by "
                f"design: {item.args['registers per thread']} registers per thread and "
                f"{_size(item.args['shared memory'])} of shared memory per block leave room "
                f"for {occ.blocks_per_sm} block{'s' if occ.blocks_per_sm != 1 else ''}, "
                f"{occ.warps_per_sm} of {occ.max_warps} warps per SM (limit: "
                f"{occ.limited_by}), because each block keeps its tiles of q, k and v and the "
                "running softmax on chip and reuses them instead of going back to GPU memory; "
                "fewer warps, less traffic: judge it by its time"
                f" ({item.dur:.1f} us here), not by its occupancy",
            )
        )
    return out[:SHOWN_KERNELS]


def _one_block(trace: Trace) -> Finding | None:
    """Kernels launched as a single block: one SM works while the rest of the GPU waits. At
    batch 1 small work gets one block (a norm, a rotary lookup, a cache write) and so does a
    reduction over one long row (an argmax over the vocabulary, a split-K's final sum fused
    into a norm). Counted per step: their time that no other kernel overlaps (by union;
    communication kernels, one block by design, left out), the median over the steps, a
    generation's decode steps alone (its prefill is another phase)."""
    if trace.device is None or not trace.steps:
        return None
    steps = generation.decode_only(trace).steps
    times, counts, longest = [], [], None  # longest: the longest one-block kernel seen
    for step in steps:
        kernels = [i for i in step.gpu if i.kind == "kernel" and i.klass.cls != "collective"]
        ones = [i for i in kernels if footprint.blocks(i.args) == 1]
        alone_ids = {id(i) for i in ones}
        others = intervals.union((i.ts, i.end) for i in step.gpu if id(i) not in alone_ids)
        alone = intervals.subtract(intervals.union((i.ts, i.end) for i in ones), others)
        times.append(intervals.length(alone))
        counts.append(len(ones))
        for item in ones:
            if longest is None or item.dur > longest.dur:
                longest = item
    us = statistics.median(times)
    busy = statistics.median(breakdown.step(s)["gpu_busy_us"] for s in steps)
    if busy <= 0 or us < max(ONE_BLOCK_US, ONE_BLOCK_SHARE * busy):
        return None
    sms = trace.device_properties(longest.args.get("device", 0)).get("numSms")
    launches = "" if graphs(trace) else ", CUDA graphs for the launches"  # none to replay
    return Finding(
        "one block",
        f"{statistics.median_low(counts)} kernels a step run as a single block"
        + (f" (one SM of {sms})" if isinstance(sms, int) else "")
        + f", {us:.1f} us a step that no other kernel overlaps ({100 * us / busy:.1f}% of "
        f"its GPU busy time); the longest, {readable(longest.name)}, {longest.dur:.1f} us",
        us=us,
        next=f"fewer, larger kernels (fusion{launches}) or more rows per step "
        "(a larger batch); for a reduction over one long row, a split reduction (blocks over "
        "parts of the row, then a small combine)",
    )


def _clone_memcpy(trace: Trace) -> list[Finding]:
    """A Memcpy under aten::clone beneath another op: an out-of-place op copying its input."""
    if trace.device is None or not trace.steps:
        return []
    hits: dict[str, tuple[GpuItem, set[int]]] = {}
    clone_of = innermost(_is_clone)  # one for the trace: each op is walked once
    for n, step in enumerate(trace.steps):
        for item in step.gpu:
            if item.kind != "memcpy":
                continue
            inner = clone_of(item.launcher)  # an outer clone is the caller's copy, not this
            outer = inner.parent if inner is not None else None
            if (
                outer is not None
                and outer.name.startswith("aten::")
                and outer.name not in COPYING_OPS
            ):
                hits.setdefault(outer.name, (item, set()))[1].add(n)
    out = []
    for name, (item, steps) in hits.items():
        size = item.args.get("bytes")
        mb = f"{size / 1e6:.1f} MB " if isinstance(size, int) else ""
        every = (
            "in every recorded step"
            if len(steps) == len(trace.steps)
            else f"in {len(steps)} of {len(trace.steps)} recorded steps"
        )
        inplace = name if name.endswith("_") else f"{name}_"
        out.append(
            Finding(
                "memcpy",
                f"{name} copied its input first: a {mb}Memcpy {item.klass.detail} under "
                f"{name} > aten::clone {every}, because an out-of-place op clones its input "
                f"and works on the copy; the in-place variant ({inplace}) writes into its "
                "input and skips the copy (safe when nothing needs the old values, e.g. "
                "under torch.no_grad())",
                us=item.dur,
            )
        )
    return out


def _is_clone(op: CpuOp) -> bool:
    return op.name == "aten::clone"


def _mask_builder(step: Step) -> CpuOp | None:
    """The first tril/triu on a square [S, S] (or [..., S, S]) tensor in the step."""
    for op in step.cpu_ops:
        if op.name in MASK_BUILDERS:
            dims = op.args.get("Input Dims")
            if dims and len(dims[0]) >= 2 and dims[0][-1] == dims[0][-2] > 1:
                return op
    return None


def _mask_rebuilt(trace: Trace) -> Finding | None:
    """A causal mask built inside every recorded step."""
    if not trace.steps:
        return None
    builders = [_mask_builder(step) for step in trace.steps]
    if not all(builders):
        return None
    step, op = trace.steps[-1], builders[-1]
    parts = [op]
    j = op.index - 1  # the op just before it at its depth: where the tensor came from
    while j >= 0 and step.cpu_ops[j].depth > op.depth:
        j -= 1
    if j >= 0 and step.cpu_ops[j].depth == op.depth and step.cpu_ops[j].name in MASK_SOURCES:
        parts.insert(0, step.cpu_ops[j])
    chain = ", then ".join(p.name for p in parts)
    where = _under(op.parent)
    shape = ", ".join(map(str, op.args["Input Dims"][0]))
    launched = ""
    if trace.device is not None:
        n = sum(len(o.launched) for p in parts for o in subtree(step, p))
        launched = f", {n} GPU operation{'s' if n != 1 else ''} for it" if n else ""
    return Finding(
        "mask",
        f"a [{shape}] mask is built again in every recorded step ({chain}{where}{launched}): "
        "constant work redone on every call; build it once outside the forward, or let a "
        "fused kernel apply causality itself (is_causal=True)",
    )


def _upcast(trace: Trace) -> Finding | None:
    """float32 work inside a run whose inputs are bf16 or fp16."""
    if not trace.steps:
        return None
    step = trace.steps[-1]
    dtype = input_dtype(step)
    if dtype not in ("bf16", "fp16"):
        return None
    gemms = [
        i
        for i in step.gpu
        if i.klass.cls == "gemm"
        and not i.klass.joins_previous
        and i.klass.facts.get("precision") in (CUDA_CORES, TF32)
    ]
    # a cast counts when the trace says it turns a non-empty 16-bit tensor into float32 (an
    # empty bf16 -> bf16 copy, as transformers' cache set-up makes, is no upcast)
    casts = [
        op
        for op in step.cpu_ops
        if op.name == "aten::_to_copy"
        and cast(op)[0] == dtype
        and cast(op)[1] in ("fp32", "fp64")
        and (cast(op)[2] or 0) > 0
    ]
    if not gemms and not casts:
        return None
    parts = []
    if gemms:
        precision = gemms[0].klass.facts["precision"]
        parts.append(
            f"{len(gemms)} GEMM{'s' if len(gemms) > 1 else ''} compute in "
            + (
                "fp32 on CUDA cores, no Tensor cores"
                if precision == CUDA_CORES
                else "tf32 on Tensor cores"
            )
            + f" ({readable(gemms[0].name)})"
        )
    if casts:
        parts.append(
            f"{len(casts)} aten::_to_copy cast{'s' if len(casts) > 1 else ''} of {dtype} tensors "
            "to float32"
        )
    first = gemms[0].launcher if gemms else casts[0]
    where = _under(first.parent if first else None)
    return Finding(
        "precision",
        f"float32 inside a {dtype} run: {' and '.join(parts)}{where}: the inputs are "
        f"upcast, so this work runs at float32's speed, not {dtype}'s",
        us=sum(i.dur for i in gemms) or None,
        next=f"keep the operands in {dtype} (or allow TF32 where float32 is needed)",
    )


def _below_each(step: Step) -> dict[CpuOp, tuple[int, bool, float]]:
    """Per CPU op of the step, what the ops under it (not itself) launched: how many GPU
    items, whether a GEMM is among them, the longest one's time (-inf: none). One pass from
    the innermost ops out, each adding itself and its own below to its parent's: asking each
    op's subtree instead is quadratic in the depth of a nest where every op launches."""
    below: dict[CpuOp, tuple[int, bool, float]] = {}
    for op in reversed(step.cpu_ops):  # children come after their parent in start order
        # An op whose subtree launched nothing (op.below, the model's mask: most ops of a
        # large trace) would add nothing to its parent but the default entry `get` answers.
        if op.parent is None or not op.below:
            continue
        n, gemm, longest = below.get(op, (0, False, -math.inf))
        for i in op.launched:
            n, gemm, longest = n + 1, gemm or i.klass.cls == "gemm", max(longest, i.dur)
        up_n, up_gemm, up_longest = below.get(op.parent, (0, False, -math.inf))
        below[op.parent] = (up_n + n, up_gemm or gemm, max(up_longest, longest))
    return below


def _opaque_library(trace: Trace) -> list[Finding]:
    """An op that launches one kernel itself (no GEMM: a GEMM library's bar is always one op)
    after much CPU time of its own, with at most small work under it (no GEMM, nothing longer
    than its own kernel): a library planning and launching where the profiler cannot look.
    Medians over the steps, matching an op to its namesakes by their order in the step."""
    if trace.device is None or not trace.steps:
        return []
    seen: dict[tuple[str, int], list[tuple[float, float, CpuOp, GpuItem, int]]] = {}
    for step in trace.steps:
        calls: dict[CpuOp, float] = {}  # children's time, then runtime calls' time
        for call in step.runtime:
            op = call.launcher
            if op is not None and op.index >= 0:
                calls[op] = calls.get(op, op.inner) + call.dur
        order: dict[str, int] = {}  # counted among the candidates only: most ops are not
        under = _below_each(step)
        for op in step.cpu_ops:
            if not op.launched:
                continue
            kernels = [i for i in op.launched if i.kind == "kernel"]
            if len(kernels) != 1 or kernels[0].klass.cls == "gemm":
                continue
            # Small work under it is its children's (SDPA's flash op routed to FA4 fills two
            # tensors first; its own time excludes them); a GEMM, or anything longer than its
            # own kernel, means it wraps real work (a module's forward, a user's annotation).
            below, gemm, longest = under.get(op, (0, False, -math.inf))
            if gemm or longest > kernels[0].dur:
                continue
            nth = order[op.name] = order.get(op.name, -1) + 1
            own = op.dur - calls.get(op, op.inner)
            share = own / step.dur if step.dur > 0 else 0.0
            seen.setdefault((op.name, nth), []).append((own, share, op, kernels[0], below))
    best = None
    for runs in seen.values():
        own = statistics.median(r[0] for r in runs)
        share = statistics.median(r[1] for r in runs)
        if own >= OPAQUE_US and share >= OPAQUE_SHARE and (best is None or own > best[0]):
            best = (own, share, *runs[-1][2:])
    if best is None:
        return []
    own, share, op, kernel, below = best
    under = (
        "with nothing under it that launches GPU work"
        if not below
        else f"outside the ops under it (which launch {below} small GPU "
        f"item{'s' if below > 1 else ''})"
    )
    return [
        Finding(
            "library",
            f"{op.name} spends {own:.0f} us of CPU time of its own per step ({share:.0%} of "
            f"the step), {under}, and then launches one kernel, {readable(kernel.name)}, with "
            f"{kernel.runtime}: the library plans and launches inside one bar that the profiler "
            "cannot see into",
            us=own,
        )
    ]


def found(trace: Trace) -> list[Finding | None]:
    """Every kernel rule's findings, in the order ties are ranked."""
    return [
        *_occupancy(trace),
        *_split_k(trace),
        *_occupancy_gap(trace),
        *_low_occupancy_by_design(trace),
        *_hidden_memcpy(trace),
        *_clone_memcpy(trace),
        _one_block(trace),
        _mask_rebuilt(trace),
        _upcast(trace),
        *_opaque_library(trace),
    ]
