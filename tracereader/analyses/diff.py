"""The diff of two traces: which GPU kernels are byte-for-byte the same, gone or new, the CPU
ops that disappeared or appeared, per-kernel and per-step GPU times, the minimum HBM bytes of
each side's extra kernels (`compare --help` says how they are estimated), and at model scale
the wall and GPU busy time, time by class, kernel groups, CPU ops and nn.Modules that changed."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter

from tracereader.analyses import breakdown, generation, idle, tops
from tracereader.names.devices import datasheet
from tracereader.trace.load import GpuItem, Trace
from tracereader.trace.model import ELEMENT_BYTES
from tracereader.units import duration

CHANGED = 0.10  # a kernel group or op whose per-step time moves by more than this has changed


def _kernels(trace: Trace) -> list[GpuItem]:
    return [i for i in trace.steps[-1].gpu if i.kind != "memset"] if trace.steps else []


# The ops whose kernel's traffic is estimated, by family (the launching op's name, minus
# "aten::"); any other op's kernel is "unknown" and left out of the totals.
REDUCTIONS = re.compile(r"^(sum|mean|amax|amin|max|min|norm|linalg_vector_norm|var|std|prod|"
                        r"argmax|argmin|all|any|logsumexp|cumsum)(_|$)")  # fmt: skip
GATHERS = re.compile(r"^(embedding|index_select|gather|index|take|embedding_dense_backward|"
                     r"index_add|scatter|scatter_add)(_|$)")  # fmt: skip
MATMULS = re.compile(r"^(mm|addmm|bmm|baddbmm|matmul|linear|addmm_|_scaled_mm)$")
GATHERED = re.compile(r"embedding|index|gather|scatter")  # in a fused kernel's name
POINTWISE = re.compile(
    r"^(add|sub|mul|div|neg|exp|log|pow|sqrt|rsqrt|tanh|sigmoid|relu|gelu|silu|where|"
    r"masked_fill|fill|copy|_to_copy|clone|abs|clamp|maximum|minimum|lt|gt|le|ge|eq|ne|"
    r"bitwise_\w+|logical_\w+|gelu_backward|silu_backward|threshold_backward|"
    r"_softmax|softmax|_log_softmax|_softmax_backward_data|_log_softmax_backward_data|"
    r"native_layer_norm|native_layer_norm_backward|_fused_rms_norm|dropout|native_dropout|"
    r"cat|stack|zeros_like|ones_like|cos|sin|reciprocal|sign|floor|ceil|round|erf|"
    r"mul_|add_|addcmul_|addcdiv_|lerp_|_foreach_\w+)(_|$)"
)


def item_bytes(item: GpuItem) -> int | None:
    """Minimum HBM traffic of an item, None where unknown (the module docstring says how):
    a copy its read and its write, a memset its write, a GEMM its operands and its product,
    a hand-written Triton kernel's launch its arguments (outputs among them), an Inductor
    kernel its inputs (and an output as large as the largest when pointwise), a pointwise op
    its inputs and
    an output as large as the largest, a reduction its inputs, an embedding its indices and
    the rows it reads and writes; anything else unknown. Each a lower bound: what the kernel
    cannot avoid moving."""
    if item.kind in ("memcpy", "memset"):
        size = item.args.get("bytes")
        if type(size) is not int or size < 0:
            return None
        device_to_device = "DtoD" in item.name  # a host copy touches GPU memory once
        return 2 * size if item.kind == "memcpy" and device_to_device else size
    if item.launcher is None or item.klass.joins_previous:
        return None
    dims, types = item.launcher.args.get("Input Dims"), item.launcher.args.get("Input type")
    if not dims or not types:
        return None
    tensors = [
        (shape, ELEMENT_BYTES[dtype])
        for shape, dtype in zip(dims, types, strict=False)
        if shape and dtype in ELEMENT_BYTES
    ]
    if not tensors:
        return None
    sizes = [math.prod(shape) * elt for shape, elt in tensors]
    if item.klass.cls == "gemm":
        if not MATMULS.match(item.launcher.name.removeprefix("aten::")):
            return None  # a convolution's GEMM: its operands are not the op's tensors
        return _gemm_bytes([tuple(shape) for shape, _ in tensors], tensors[0][1], sum(sizes))
    if item.klass.cls == "triton" and item.launcher.name.startswith(item.name):
        return sum(sizes)  # compiled code's launch op: its arguments include the outputs
    if item.klass.cls == "inductor":  # its launch op records the inputs only
        if GATHERED.search(item.name):
            return None  # it reads some rows of a table it is handed whole
        pointwise = item.name.startswith("triton_poi")
        return sum(sizes) + (max(sizes) if pointwise else 0)  # a reduction writes less
    op = item.launcher.name.removeprefix("aten::")
    if GATHERS.match(op):
        if op.startswith("embedding") and not op.startswith("embedding_dense") and len(tensors) > 1:
            (table, elt), (indices, index_elt) = tensors[0], tensors[1]
            rows = math.prod(indices) * table[-1] * elt
            return math.prod(indices) * index_elt + 2 * rows  # read the rows, write them out
        return None
    if REDUCTIONS.match(op):
        return sum(sizes)  # every input read once; the output is smaller
    if POINTWISE.match(op):
        in_place = op.endswith("_") or op in ("copy", "copy_")  # its output is an input
        return sum(sizes) + (0 if in_place else max(sizes))
    return None


def _gemm_bytes(shapes: list[tuple], elt: int, inputs: int) -> int | None:
    """The operands are the first two shapes that contract ([.., m, k] then [.., k, n]: mm,
    bmm, addmm after its bias); the product is written once, unless an argument after the
    operands has its shape (aten::mm's out=, as compiled code calls it). Broadcast batch
    dimensions are not expanded: a lower bound."""
    for i in range(len(shapes) - 1):
        a, b = shapes[i], shapes[i + 1]
        if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
            product = (*a[:-1], b[-1])
            given = product in shapes[i + 2 :]  # out= comes after the operands
            return inputs + (0 if given else math.prod(product) * elt)
    return None


def _avg_times(trace: Trace) -> dict[str, float]:
    times: dict[str, list[float]] = {}
    for step in trace.steps:
        for item in step.gpu:
            times.setdefault(item.name, []).append(item.dur)
    return {name: statistics.mean(v) for name, v in times.items()}


def compare(a: Trace, b: Trace) -> dict:
    ka, kb = _kernels(a), _kernels(b)
    names_a, names_b = Counter(i.name for i in ka), Counter(i.name for i in kb)
    only_a, only_b = names_a - names_b, names_b - names_a
    common = names_a & names_b
    ops_a = Counter(n for n in a.steps[-1].op_names()) if a.steps else Counter()
    ops_b = Counter(n for n in b.steps[-1].op_names()) if b.steps else Counter()
    avg_a, avg_b = _avg_times(a), _avg_times(b)

    def extra(items, only):
        out, left = [], Counter(only)
        for item in items:
            if left[item.name] > 0:
                left[item.name] -= 1
                out.append(
                    {
                        "name": item.name,
                        "class": item.klass.cls,
                        "reading": item.klass.detail,
                        "launched_by": item.launched_by,
                        # this kernel's own time, beside its own bytes (the mean of every
                        # kernel of its name read a 111 us fill of 524 MB as 10.4 us: 50 TB/s)
                        "us": item.dur,
                        "kernel_us": item.dur,  # the cap's time
                        "name_mean_us": (avg_a if items is ka else avg_b).get(item.name),
                        "bytes": item_bytes(item),
                        "joins_previous": item.klass.joins_previous,
                    }
                )
        return out

    extra_a, extra_b = extra(ka, only_a), extra(kb, only_b)
    _cap(extra_a, a)
    _cap(extra_b, b)
    bytes_a = sum(e["bytes"] or 0 for e in extra_a)
    bytes_b = sum(e["bytes"] or 0 for e in extra_b)
    unknown = {
        side: sorted({e["name"] for e in extra if e["bytes"] is None and not e["joins_previous"]})
        for side, extra in (("a", extra_a), ("b", extra_b))
    }
    gemms_a = [i.name for i in ka if i.klass.cls == "gemm"]
    gemms_b = [i.name for i in kb if i.klass.cls == "gemm"]
    # Two empty lists are not "identical GPU work": with none on either side there is
    # nothing to compare, so the answer is None (CPU-only traces, or no kernels recorded).
    return {
        "a": str(a.path),
        "b": str(b.path),
        "device_a": a.device,
        "device_b": b.device,
        "cpu_only": a.device is None and b.device is None,
        "gpu_items_per_step": {"a": len(ka), "b": len(kb)},
        "gpu_identical": [i.name for i in ka] == [i.name for i in kb] if ka or kb else None,
        "gemms_identical": gemms_a == gemms_b if gemms_a or gemms_b else None,
        "kernels_in_both": sorted(common.elements()),
        "only_in_a": extra_a,
        "only_in_b": extra_b,
        "extra_bytes_a": bytes_a,
        "extra_bytes_b": bytes_b,
        "extra_bytes_unknown": unknown,  # kernels left out of the sums: no recorded shapes
        "cpu_ops_gone": sorted((ops_a - ops_b).elements()),
        "cpu_ops_new": sorted((ops_b - ops_a).elements()),
        "kernel_avg_us": {
            n: {"a": avg_a.get(n), "b": avg_b.get(n)} for n in dict.fromkeys([*avg_a, *avg_b])
        },
        "gpu_us_per_step": {  # summed durations (streams overlapping count twice), median
            "a": statistics.median(s.gpu_sum for s in a.steps) if a.steps else 0,
            "b": statistics.median(s.gpu_sum for s in b.steps) if b.steps else 0,
        },
        **at_scale(a, b),
    }


def _cap(extra: list[dict], trace: Trace) -> None:
    """What the device could move in each kernel's time (its datasheet bandwidth x the time;
    None on a device the table lacks). An estimate above it is no lower bound: it is
    withdrawn (bytes None, `capped` True), never cut to the cap and counted."""
    sheet = datasheet(trace.device)
    for e in extra:
        e["bytes_cap"] = (
            sheet.bytes_per_s * e["kernel_us"] * 1e-6 if sheet and e["kernel_us"] else None
        )
        e["capped"] = False
        e["bytes_touched"] = e["bytes"]
        if e["bytes"] and e["bytes_cap"] is not None and e["bytes"] > e["bytes_cap"]:
            # faster than HBM: the data came from L2 (small tensors just written), so HBM
            # saw less than the kernel touched
            e["bytes"], e["capped"] = None, True


def _per_step(trace: Trace, key) -> dict[str, float]:
    """Per key, the median over the steps of its kernels' time in the step (a kernel group's
    kernels run one after another: their durations add up)."""
    rows = []
    for step in trace.steps:
        row: dict[str, float] = {}
        for item in step.gpu:
            k = key(item)
            row[k] = row.get(k, 0.0) + item.dur
        rows.append(row)
    keys = {k for row in rows for k in row}
    return {k: statistics.median(row.get(k, 0.0) for row in rows) for k in keys}


def _by_class(trace: Trace) -> dict[str, float]:
    """Per kernel class, the median over the steps of its time (union within the class)."""
    rows = [breakdown.step(s)["by_class_us"] for s in trace.steps]
    keys = {k for row in rows for k in row}
    return {k: statistics.median(row.get(k, 0.0) for row in rows) for k in keys}


def _ops(trace: Trace) -> dict[str, tuple[float, float]]:
    """CPU op name -> (count, total us) per step."""
    out: dict[str, list[float]] = {}
    for step in trace.steps:
        for op in step.cpu_ops:
            row = out.setdefault(op.name, [0, 0.0])
            row[0] += 1
            row[1] += op.dur
    n = max(len(trace.steps), 1)
    return {k: (c / n, t / n) for k, (c, t) in out.items()}


def at_scale(a: Trace, b: Trace) -> dict:
    """The model-scale comparison: medians per step, by class, kernel groups, CPU ops."""

    def median(trace: Trace, f) -> float | None:
        return statistics.median(f(s) for s in trace.steps) if trace.steps else None

    wall = {"a": median(a, lambda s: s.dur), "b": median(b, lambda s: s.dur)}
    times = {"a": step_times(a), "b": step_times(b)}
    busy = {
        "a": median(a, lambda s: breakdown.busy(s.gpu)),
        "b": median(b, lambda s: breakdown.busy(s.gpu)),
    }
    ca, cb = _by_class(a), _by_class(b)
    ga, gb = (
        _per_step(a, lambda i: tops.kernel_group(i.name)),
        _per_step(b, lambda i: tops.kernel_group(i.name)),
    )
    changed = [
        {"name": k, "a_us": ga[k], "b_us": gb[k]}
        for k in ga.keys() & gb.keys()
        if abs(gb[k] - ga[k]) > CHANGED * max(ga[k], gb[k])
    ]
    oa, ob = _ops(a), _ops(b)
    ops = [
        {"name": k, "a": oa.get(k, (0, 0.0)), "b": ob.get(k, (0, 0.0))}
        for k in oa.keys() | ob.keys()
        if oa.get(k, (0, 0))[0] != ob.get(k, (0, 0))[0]
        or abs(ob.get(k, (0, 0.0))[1] - oa.get(k, (0, 0.0))[1])
        > CHANGED * max(oa.get(k, (0, 0.0))[1], ob.get(k, (0, 0.0))[1])
    ]
    ops.sort(key=lambda o: -abs(o["b"][1] - o["a"][1]))
    return {
        "step_wall_us": wall,
        "gpu_busy_us": busy,
        "by_class_us": {
            g: {"a": ca.get(g, 0.0), "b": cb.get(g, 0.0)} for g in sorted(ca.keys() | cb.keys())
        },
        "kernel_groups": {
            "gone": sorted(
                ({"name": k, "a_us": ga[k]} for k in ga.keys() - gb.keys()),
                key=lambda r: -r["a_us"],
            ),
            "new": sorted(
                ({"name": k, "b_us": gb[k]} for k in gb.keys() - ga.keys()),
                key=lambda r: -r["b_us"],
            ),
            "changed": sorted(changed, key=lambda r: -abs(r["b_us"] - r["a_us"])),
        },
        "cpu_ops_changed": [
            {
                "name": o["name"],
                "count": {"a": o["a"][0], "b": o["b"][0]},
                "us": {"a": o["a"][1], "b": o["b"][1]},
            }
            for o in ops
        ],
        "modules": _modules(a, b),
        "step_us": {k: statistics.median(v) if v else None for k, v in times.items()},
        "bound": {"a": _bound(a), "b": _bound(b)},
        "same_op_apart": (apart := same_op_apart(a, b, times)),
        "starved_copy": (starved := {"a": starved_copy(a), "b": starved_copy(b)}),
        "verdict": _verdict(
            times, busy, changed, {"a": _bound(a), "b": _bound(b)}, _busy(apart, starved)
        ),
    }


def _modules(a: Trace, b: Trace) -> dict | None:
    """nn.Modules by path, A against B (medians per step); None where neither trace carries
    module events. A compiled model records only its outer module: the rest show as gone."""
    if not a.modules and not b.modules:
        return None
    from tracereader.analyses import modules  # start-up: most traces carry no module events

    ra = modules.read(a) if a.modules else None
    rb = modules.read(b) if b.modules else None
    if ra is None or rb is None:
        return {"carried_by": "a" if ra else "b", "by": None, "changed": [], "gone": [], "new": []}
    key = "gpu_us" if a.on_gpu and b.on_gpu else "cpu_us"
    ta = {n["path"]: n[key] for n in ra["tree"]}
    tb = {n["path"]: n[key] for n in rb["tree"]}
    changed = [
        {"path": p, "a_us": ta[p], "b_us": tb[p]}
        for p in ta.keys() & tb.keys()
        if abs(tb[p] - ta[p]) > CHANGED * max(ta[p], tb[p])
    ]
    return {
        "carried_by": "both",
        "by": key,
        "changed": sorted(changed, key=lambda r: -abs(r["b_us"] - r["a_us"])),
        "gone": [p for p in ta if p not in tb],  # in tree order
        "new": [p for p in tb if p not in ta],
    }


def step_times(trace: Trace) -> list[float]:
    """The steps' times (idle.step_times); a generation's decode steps alone: its prefill step
    is no token (with it, the spread of 6 ms tokens and a 41 ms prefill hid a 1.28x change
    between two H200 runs of 08)."""
    times = idle.step_times(trace)
    decode = {id(s) for s in generation.split(trace).get("decode", ())}
    if decode:
        times = [t for s, t in zip(trace.steps, times, strict=True) if id(s) in decode]
    return times


def _bound(trace: Trace) -> str | None:
    found = idle.bound(trace)
    return found["label"] if found else None


NOISE = 3.0  # a change smaller than this many times the steps' relative spread is noise


def band(times: list[float]) -> tuple[float, float]:
    """The steps' band: their interquartile range where a side has 4 steps or more (one slow
    step in 6 does not widen it: kineto's ResNet-50 with 4 loader workers, steps of 124-127 ms
    and one of 182, read "not measurably different" from 166-188 ms at 0.70x by the full
    range), else the full range (3 steps have no quartiles to speak of)."""
    if len(times) >= 4:
        low, _, high = statistics.quantiles(times, n=4, method="inclusive")
        return low, high
    return min(times), max(times)


def fast_band(times: list[float]) -> tuple[float, float]:
    """band, robust to a slow step under 4 steps too: from the fastest step to the median.
    Noise only adds time, so the slowest of 3 is dropped (a first step slowed by the
    profiler's start), and where two of 3 are slow the median is among them and the band
    reaches down to the fast one."""
    if len(times) >= 4:
        return band(times)
    return min(times), statistics.median(times)


def spread_and_difference(a: list[float], b: list[float]) -> tuple[float, float]:
    """The steps' spread, the wider of the two sides' fast_band, and the difference of the
    medians, both in the steps' unit. Where the spread is the larger, no verdict: two
    02_linear runs on a busy CPU, 3 steps a side, one or two of them 50x the rest, read
    "B is faster (0.02x)" and "B is slower (82.87x)"."""
    (a1, a3), (b1, b3) = fast_band(a), fast_band(b)
    return max(a3 - a1, b3 - b1), abs(statistics.median(b) - statistics.median(a))


FASTEST = 0.5  # the fastest steps must move by this share of the medians' move, the same way


def fastest_agree(a: list[float], b: list[float]) -> bool:
    """Whether the fastest steps moved as the medians did: the same way, by FASTEST of it or
    more. Noise only adds time, so a real change moves the fastest step too; medians set by
    slow steps do not (100, 101, 99 us against 100, 8287, 8300: the medians 83x apart, the
    fastest steps 1%)."""
    moved = statistics.median(b) - statistics.median(a)
    fast = min(b) - min(a)
    return fast * moved > 0 and abs(fast) >= FASTEST * abs(moved)


def measurably_different(a: list[float], b: list[float]) -> bool:
    """Whether B's step times differ from A's beyond their noise, the one definition compare
    uses: the medians differ by more than the wider band (spread_and_difference), and their
    ratio outruns NOISE times the wider band relative to its median, or the two bands do not
    overlap and the medians differ by over 3%. With under 3 steps a side, a change of 15% or
    more."""
    ma, mb = statistics.median(a), statistics.median(b)
    (a1, a3), (b1, b3) = band(a), band(b)
    spread_us, difference_us = spread_and_difference(a, b)
    if spread_us >= difference_us or not fastest_agree(a, b):  # outlier steps: no verdict
        return False
    change = abs(mb / ma - 1)
    spread = max((a3 - a1) / ma, (b3 - b1) / mb)
    apart = a3 < b1 or b3 < a1
    if min(len(a), len(b)) < 3:  # too few steps to see the noise: only a large change counts
        spread, apart = max(spread, 0.1), False
    return change >= max(0.01, NOISE * spread / 2) or (apart and change > 0.03)


MACHINE = 5.0  # the very op on the very inputs this many times slower: the machine changed


def _frozen(value):
    """A recorded argument as a key: lists as tuples, all the way down."""
    return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


def _calls(trace: Trace) -> dict[tuple, tuple[float, float]]:
    """Per CPU op that recorded its inputs (name, input dims, input types): the median of its
    calls' durations, and its time per step (-> (median call, per step))."""
    found: dict[tuple, list[float]] = {}
    for step in trace.steps:
        for op in step.cpu_ops:
            dims, types = op.args.get("Input Dims"), op.args.get("Input type")
            if dims and types:
                key = (op.name, _frozen(dims), _frozen(types))
                found.setdefault(key, []).append(op.dur)
    n = max(len(trace.steps), 1)
    return {k: (statistics.median(v), sum(v) / n) for k, v in found.items()}


def same_op_apart(a: Trace, b: Trace, steps: dict) -> dict | None:
    """On two CPU-only traces, the op that ran on the very same inputs (name, dims, dtypes)
    MACHINE times slower or more on one side and holds a tenth of that side's median step or
    more: no change of code does that to one op on one CPU; a machine busy during one run
    does (02_linear eager against compiled on a shared CPU: aten::copy_ of the bias, 128 kB,
    7.0 ms a call in one and 23.7 us in the other; every step of the busy run at 16 ms, so no
    step stood out). None where there is none (or the traces ran on a GPU)."""
    if a.device is not None or b.device is not None or not steps["a"] or not steps["b"]:
        return None
    ca, cb = _calls(a), _calls(b)
    worst = None
    for key in ca.keys() & cb.keys():
        (call_a, step_a), (call_b, step_b) = ca[key], cb[key]
        if min(call_a, call_b) <= 0 or max(call_a, call_b) < MACHINE * min(call_a, call_b):
            continue
        slow = "a" if call_a > call_b else "b"
        if (step_a if slow == "a" else step_b) < 0.1 * statistics.median(steps[slow]):
            continue
        apart = abs(step_a - step_b)
        if worst is None or apart > worst["apart_us"]:
            worst = {"name": key[0], "a_us": call_a, "b_us": call_b, "apart_us": apart}
    return worst


STARVED = 0.5e9  # bytes/s: a CPU copies GB/s; a copy this slow waited for a core
STARVED_BYTES = 64 * 1024  # below this a copy's dispatch, not its bytes, sets its time


def starved_copy(trace: Trace) -> dict | None:
    """On a CPU-only trace, the slowest aten::copy_ of STARVED_BYTES or more (its read and its
    write, from its recorded inputs) whose median call moved under STARVED: a CPU copies
    GB/s, so that copy's thread waited for a core (02_linear's 128 kB bias copy took 7.0 ms a
    call on a shared CPU under load, 37 MB/s; 12-25 us on the same machine quiet). None
    where there is none, or on a GPU trace."""
    if trace.device is not None:
        return None
    worst = None
    for (name, dims, types), (call, _) in _calls(trace).items():
        if name != "aten::copy_":
            continue
        sized = [
            math.prod(shape) * ELEMENT_BYTES[dtype]
            for shape, dtype in zip(dims[:2], types[:2], strict=False)
            if isinstance(shape, tuple)
            and shape
            and dtype in ELEMENT_BYTES
            and all(type(d) is int and d >= 0 for d in shape)
        ]
        moved = sum(sized) if len(sized) == 2 else 0
        if moved >= 2 * STARVED_BYTES and call > 0 and moved / (call * 1e-6) < STARVED:
            if worst is None or call > worst["us"]:
                worst = {"name": name, "bytes": moved, "us": call}
    return worst


def _busy(apart: dict | None, starved: dict) -> str | None:
    """Why the two runs' times say more about the machine than the code, or None."""
    if apart:
        far = max(apart["a_us"], apart["b_us"]) / min(apart["a_us"], apart["b_us"])
        return (f"the same {apart['name']} on the same inputs took {duration(apart['a_us'])} a "
                f"call in A and {duration(apart['b_us'])} in B ({far:.0f}x): the machine was "
                "busy during one run, not the code's doing")  # fmt: skip
    sides = [side for side in ("a", "b") if starved[side]]
    if not sides:
        return None
    c = max((starved[side] for side in sides), key=lambda c: c["us"])
    who = " and ".join(f"{side.upper()}'s" for side in sides)
    return (f"{who} {c['name']} moved {c['bytes'] / 1e3:.0f} kB in {duration(c['us'])} a call "
            f"({c['bytes'] / c['us']:.0f} MB/s, where a CPU copies GB/s): the machine was busy, "
            f"its steps waited for a core")  # fmt: skip


def _verdict(
    times: dict, busy: dict, changed: list[dict], bound: dict, machine: str | None = None
) -> str:
    """Faster or slower by the step's time (max of CPU span and GPU window per step), only
    where the change outruns the steps' noise (measurably_different) and the machine did
    not set the times (`machine`, why it did: _busy); the GPU's busy time beside it, and the
    largest kernel group that got slower."""
    a, b = times["a"], times["b"]
    if not a or not b:
        return "nothing to compare"
    ma, mb = statistics.median(a), statistics.median(b)
    if not ma or not mb:
        return "nothing to compare"
    ratio = mb / ma
    spread, difference = spread_and_difference(a, b)
    if machine:  # no ratio: the machine's speed is no speed of the code
        line = (f"B is not measurably different: {machine}; median step {duration(ma)} -> "
                f"{duration(mb)}")  # fmt: skip
    elif 0 < spread >= difference:  # no ratio: an outlier step's 0.02x or 83x is no speed
        line = (f"B is not measurably different: the steps' spread ({duration(spread)}) exceeds "
                f"the difference ({duration(difference)}); median step {duration(ma)} -> "
                f"{duration(mb)} (per step the longer of CPU and GPU)")  # fmt: skip
    elif difference and not fastest_agree(a, b):
        line = (f"B is not measurably different: the fastest steps ({duration(min(a))} -> "
                f"{duration(min(b))}) did not move with the medians ({duration(ma)} -> "
                f"{duration(mb)}): slow steps set them (per step the longer of CPU and "
                "GPU)")  # fmt: skip
    else:
        speed = "faster" if ratio < 1 else "slower"
        speed = speed if measurably_different(a, b) else "not measurably different"
        line = (f"B is {speed}: step {duration(ma)} -> {duration(mb)} ({ratio:.2f}x; per step "
                "the longer of CPU and GPU)")  # fmt: skip
    if busy["a"] and busy["b"]:
        change = busy["b"] / busy["a"]
        line += f", GPU busy {duration(busy['a'])} -> {duration(busy['b'])} ({change:.2f}x)"
    if bound["a"] and bound["b"]:
        line += "; " + (f"both {bound['a']}" if bound["a"] == bound["b"]
                        else f"A {bound['a']}, B {bound['b']}")  # fmt: skip
    worse = [c for c in changed if c["b_us"] > c["a_us"] and c["b_us"] - c["a_us"] >= 0.05 * mb]
    if worse:
        w = max(worse, key=lambda c: c["b_us"] - c["a_us"])
        # a group can be in both traces and in none of A's steps but a few (08's prefill-only
        # kernels against a graph replaying them every token): its median step in A is 0 us
        slower = (
            f"is {w['b_us'] / w['a_us']:.1f}x slower"
            if w["a_us"]
            else "runs where A's median step has none"
        )
        line += f"; but {w['name']} {slower} (+{duration(w['b_us'] - w['a_us'])} per step)"
    return line
