"""The reading of a trace for a person (text, one screen) and for a program (JSON).

Text: the summary first, at most SCREEN lines for any trace: per step (median and spread)
wall time, GPU busy and idle (split as HTA splits it), time by class, the top kernels (names
grouped) and CPU ops, phases, launches, host-stalling syncs, collectives, the whole-trace
window as HTA reads it, and the findings, ranked. Below it, where a step is small (the
lessons' size), the step's GPU work and CPU dispatch chain in full; otherwise behind
`--kernels`, `--ops`, `--step N`.

JSON (`--json`): SCHEMA_VERSION 2, `{"schema_version", "traces": [one per rank]}`, each with
`path`, `rank`, `device` {name, source}, `unit` ("step" | "window"), `window` (HTA's
temporal breakdown over the whole trace), `steps_window` (the same keys over the GPU work the
recorded steps launched, HTA's scope on a trace with steps; null without steps), `summary`
(everything the text summary shows; `modules`, the nn.Module tree with each module's CPU and
GPU time, is null without module events; `phase`, "decode" where a generation's per-step
spreads are over its decode steps alone, else null: added keys, so the schema stays 2),
`steps` (every step in full: GPU work with footprints, CPU ops) and `findings` (all of them,
with the time at stake; `shown` false for those the text leaves out; `cause`, `culprit` and
`mib_per_step`, added keys, null but on the cause named first: judge.cause).
"""

from __future__ import annotations

import json
from io import TextIOBase  # not typing.TextIO: typing is start-up time of its own

from tracereader.analyses import generation
from tracereader.judge.finding import SMALL_STEP, Finding
from tracereader.names import footprint
from tracereader.names.kernel_classes import group
from tracereader.reading import Reading
from tracereader.render.lines import WIDTH, cut, header, wrap
from tracereader.trace.model import Step, Trace, silent_ops
from tracereader.units import duration

SCHEMA_VERSION = 2
SCREEN = 80  # lines: the summary of any trace fits one screen
NAME_WIDTH = 70  # a name column's widest, where the line's other columns leave it room
MAX_OPS = 200  # listing: lines per list in a step; a step of 100k ops must stay readable
STEP_LINES = 8  # listing: one line each for this many more steps; a long run stays one screen
SMALL_OPS = 60  # a step this small (and finding.SMALL_STEP GPU items) is listed by default


def _cut(name: str, width: int = NAME_WIDTH) -> str:
    return cut(name, width)


# --- text --------------------------------------------------------------------------------


def _header(trace: Trace) -> list[str]:
    if trace.device is None:
        device = "CPU only"
    elif trace.device_source == "GPU events":
        device = f"{trace.device}, from its GPU events: no deviceProperties"
    else:
        device = trace.device
    rank = f", rank {trace.rank}" if trace.rank is not None else ""
    unit = (
        f"{len(trace.steps)} recorded steps"
        if trace.unit == "step"
        else "no ProfilerStep: the recorded window is one unit"
    )
    return header(f"trace: {trace.path}", f"{device}{rank}; {unit}")


def _first(reading: Reading) -> list[str]:
    """The cause named first (judge.cause), in one line under the header: in full it heads
    the findings below."""
    first = reading.findings[0] if reading.findings else None
    return ["first: " + finding_line(first).strip()] if first is not None and first.cause else []


# long: the summary's lines in the order they print, formatting only
def summary_lines(reading: Reading) -> list[str]:
    trace, data = reading.trace, reading.summary
    unit = "step" if trace.unit == "step" else "window"
    lines = _header(trace)
    lines += generation_lines(data.get("generation"))
    lines += _first(reading)
    phase = f" {data['phase']}" if data.get("phase") else ""
    recorded = f" of the {len(trace.steps)} recorded" if phase else ""
    lines.append(
        f"per {unit} (median [min - max] over {data['steps']}{phase} {unit}s{recorded}):"
        if trace.unit == "step"
        else "the window:"
    )

    def row(label: str, spread: dict, extra: str = "") -> None:
        span = (
            f" [{duration(spread['min'])} - {duration(spread['max'])}]"
            if trace.unit == "step" and data["steps"] > 1
            else ""
        )
        lines.append(f"  {label:<14} {duration(spread['median'])}{span}{extra}")

    row("wall (CPU)", data["wall_us"])
    if trace.on_gpu:
        busy = data["gpu_busy_us"]["median"] or 0.0
        parts = data["idle_us"]
        window = parts["window_us"]["median"] or 0.0
        inside = parts["busy_us"]["median"] or 0.0
        share = f" = {100 * inside / window:.0f}% of its GPU window" if window else ""
        row("GPU busy", data["gpu_busy_us"], f"{share} (union over streams)")
        summed = data["gpu_sum_us"]["median"] or 0.0
        if summed > 1.01 * busy:
            lines.append(
                f"  {'':<14} (kernel durations add up to {duration(summed)}: "
                f"{summed / busy:.2f}x, streams overlap)"
            )
        lines.append(
            f"  {'GPU window':<14} {duration(window)}: from where the GPU is free for the "
            f"{unit} to where it is free for the next"
        )
        lines.append(
            f"  {'GPU idle':<14} waiting on the host {duration(parts['host_wait_us']['median'])}"
            f", between kernels {duration(parts['kernel_wait_us']['median'])}"
            f", other {duration(parts['other_us']['median'])}"
        )
        lines.append(f"  {'kernels':<14} {data['kernels_per_step']['median']:g} per {unit}")
        lines.append("time by class (union per class; classes on several streams overlap):")
        for g, us in sorted(data["by_class_us"].items(), key=lambda kv: -kv[1]):
            pct = f"{100 * us / busy:5.1f}% of GPU busy" if busy else ""
            lines.append(f"  {g:<22} {duration(us):>10}  {pct}")
        if data["top_kernels"]:
            lines.append("top kernels (all steps, names grouped):   total     %  count     mean")
            for k in data["top_kernels"]:
                lines.append(
                    f"  {_cut(k['name'], 40):<40} {duration(k['total_us']):>10} {k['pct']:5.1f}"
                    f" {k['count']:6d} {duration(k['mean_us']):>9}"
                )
        if data["top_ops_by_gpu"]:
            lines.append("top CPU ops by the GPU time they launched (all steps):")
            for op in data["top_ops_by_gpu"][:5]:
                lines.append(
                    f"  {_cut(op['name'], 50):<50} {duration(op['gpu_us']):>10} "
                    f"({op['launches']} launches)"
                )
    if data["top_ops_by_self"]:
        lines.append("top CPU ops by self time (all steps):")
        for op in data["top_ops_by_self"][:5]:
            wait = op.get("backward_wait_us", 0.0)
            row = f"  {_cut(op['name'], 50):<50} {duration(op['self_us']):>10} (x{op['count']}"
            if wait < 0.01 * max(op["self_us"], 1.0):
                lines.append(row + ")")
                continue
            waited = f"and {duration(wait)} waiting in backward(), not counted)"
            if len(row) + 2 + len(waited) <= WIDTH:
                lines.append(f"{row}; {waited}")
            else:  # the row keeps its columns, what it leaves out goes below it, whole
                lines += [row + ";", f"{'':6}{waited}"]
    if data["phases"]:
        lines.append(f"phases (the last {unit}):        CPU      GPU busy")
        for p in data["phases"]:
            lines.append(
                f"  {p['phase']:<20} {duration(p['cpu_us']):>10} {duration(p['gpu_us']):>10}"
            )
    lines += module_lines(data["modules"], unit, trace.on_gpu)
    lines += _launch_lines(data["launches"])
    for s in data["syncs"][:3]:
        lines.append(
            f"host stalls: {s['what']} x{s['count']}, blocked {duration(s['blocked_us'])} "
            f"(in {s['by']})"
        )
    coll = data["collectives"]
    if coll:
        lines.append(
            f"collectives per {unit}: {duration(coll['comm_us']['median'])}, exposed "
            f"{duration(coll['exposed_us']['median'])} (no compute meanwhile)"
        )
        for k in coll["by_kind"][:4]:
            size = f", {k['median_bytes'] / 1e6:.1f} MB" if k["median_bytes"] else ""
            bus = f", bus {k['median_bus_GBps']:.1f} GB/s" if k["median_bus_GBps"] else ""
            group = f", group of {'/'.join(map(str, k['group']))}" if k["group"] else ""
            lines.append(
                f"  {k['kind']:<15} {k['per_step']:g} per {unit}, median "
                f"{duration(k['median_us'])}{size}{bus}{group}"
            )
        if any(k["median_bus_GBps"] for k in coll["by_kind"]):
            lines.append(
                "  (one rank's view: an NCCL kernel's time holds its wait for the other ranks, "
                "so these bandwidths are lower bounds; `explain` on the folder of every "
                "rank's trace times each collective from the last rank to arrive)"
            )
    return lines


def generation_lines(g: dict | None) -> list[str]:
    """A generation's headline: a decode token's time apart from prefill's."""
    if not g:
        return []
    d = g["decode"]
    per = d["per_token_us"]
    line = (
        f"generation: decode {duration(per['median'])} per token "
        f"[{duration(per['min'])} - {duration(per['max'])}] over {d['tokens']} steps"
    )
    if g["prefill"]:
        line += f"; prefill {duration(g['prefill']['wall_us'])} (read apart)"
    lines = [line]
    if g["bound"]:
        lines.append(
            f"  per token: GPU busy {duration(d['gpu_busy_us'])}, waiting on the host "
            f"{duration(d['host_wait_us'])}, {d['kernels']:g} kernels: "
            + generation.WORDS[g["bound"]]
        )
    return lines


def _module_row(label: str, row: dict, on_gpu: bool, width: int) -> str:
    gpu = f" {duration(row['gpu_us']):>10} {row['launches']:8g}" if on_gpu else ""
    return f"{_cut(label, width):<{width}} {duration(row['cpu_us']):>10}{gpu}"


def _module_header(title: str, on_gpu: bool, extra: str = "") -> tuple[list[str], int]:
    """The section's title with the column names after it (a title too long for that: the
    names on a line of their own), and the width of the name column: the line fits WIDTH."""
    gpu = f" {'GPU busy':>10} {'launches':>8}" if on_gpu else ""
    columns = f" {'CPU':>10}{gpu}{extra}"
    width = min(max(46, len(title)), NAME_WIDTH, WIDTH - len(columns))
    if len(title) > width:
        return [title, f"{'':<{width}}{columns}"], width
    return [f"{title:<{width}}{columns}"], width


def module_lines(data: dict | None, unit: str, on_gpu: bool) -> list[str]:
    """The summary's module section (at most modules.ROWS rows and two more lines); none
    without module events."""
    if not data:
        return []
    inside = f" inside {' > '.join(data['wrappers'])}" if data["wrappers"] else ""
    title = f"nn.Modules{inside} (per {unit}, median; --modules: all):"
    lines, width = _module_header(title, on_gpu)
    for row in data["rows"]:
        lines.append(_module_row(f"{'  ' * row['level']}{row['name']}", row, on_gpu, width))
    out = data["outside_modules"] or {}
    parts = []
    if out.get("other_threads_gpu_us"):
        parts.append(
            f"{duration(out['other_threads_gpu_us'])} launched from threads without module "
            "events (the backward: autograd's thread records none)"
        )
    if out.get("module_threads_gpu_us"):
        parts.append(f"{duration(out['module_threads_gpu_us'])} launched outside modules")
    if parts:
        lines.append(f"  GPU busy outside every module: {'; '.join(parts)}")
    return lines


def module_tree_lines(data: dict | None, unit: str, on_gpu: bool, max_ops: int | None) -> list:
    """`--modules`: every module, nested, its children's time included in its own."""
    if not data:
        return [
            "nn.Modules: none in this trace (torch.profiler records nn.Module calls with "
            "with_stack=True)"
        ]
    lines, width = _module_header(
        f"nn.Module tree (per {unit}, median, children included):", on_gpu, f" {'calls':>6}"
    )
    for node in data["tree"][:max_ops]:
        label = f"{'  ' * (node['depth'] + 1)}{node['name']}"
        lines.append(f"{_module_row(label, node, on_gpu, width)} {node['calls']:6g}")
    if max_ops is not None and len(data["tree"]) > max_ops:
        lines.append(f"  {_more(len(data['tree']) - max_ops)}")
    return lines


def _window_lines(reading: Reading) -> list[str]:
    """The whole trace as HTA's temporal breakdown reads it; where the steps launched only part
    of the trace's GPU work (warm-up before the schedule, work after the last step), also the
    steps' part, which is what HTA reads of a trace with steps."""
    whole, steps = reading.window, reading.steps_window
    if not whole["span_us"]:
        return []
    if not steps or not steps["span_us"] or _same_scope(whole, steps):
        return [_window_line("whole trace, as HTA reads it", whole)]
    return [
        _window_line("whole trace", whole),
        _window_line("the steps' GPU work, as HTA reads it", steps),
    ]


def _same_scope(a: dict, b: dict) -> bool:
    return a["gpu_busy_us"] - b["gpu_busy_us"] <= 0.001 * a["gpu_busy_us"] and (
        a["span_us"] - b["span_us"] <= 0.001 * a["span_us"]
    )


def _window_line(label: str, w: dict) -> str:
    overlap = (
        f", comm overlapped {w['comm_overlap_pct']:.0f}%"
        if w["comm_overlap_pct"] is not None
        else ""
    )
    return (
        f"{label}: span {duration(w['span_us'])}, idle "
        f"{w['idle_pct']:.1f}%, compute {w['compute_pct']:.1f}%, non-compute "
        f"{w['non_compute_pct']:.1f}%{overlap}"
    )


def finding_line(f: Finding) -> str:
    stake = f" [{duration(f.us)}, {f.pct:.1f}%]" if f.us is not None and f.pct is not None else ""
    then = f" -> try: {f.next}" if f.next else ""
    return f"  {'PROBLEM: ' if f.problem else ''}[{f.topic}]{stake} {f.message}{then}"


def is_small(step: Step) -> bool:
    return len(step.gpu) <= SMALL_STEP and len(step.cpu_ops) <= SMALL_OPS


def text(
    reading: Reading,
    *,
    all_steps: bool = False,
    max_ops: int | None = MAX_OPS,
    kernels: bool = False,
    ops: bool = False,
    step: int | None = None,
    all_findings: bool = False,
    module_tree: bool = False,
) -> str:
    """The reading for a person: the summary (one screen), then the listing where a step is
    small or a flag asks for it. `max_ops` caps each list of the listing (None: no cap)."""
    trace, data = reading.trace, reading.summary
    # every line at most WIDTH wide: a long one wraps under its item (a path stays whole), and
    # the screen's lines are counted as they print; the listing's rows are a table of their own
    # (one kernel a row, its name cut to its column)
    lines = wrap(summary_lines(reading) if trace.steps else _header(trace))
    lines += wrap(_window_lines(reading))
    shown, hidden = reading.findings, reading.hidden
    if all_findings:
        shown, hidden = shown + hidden, []
    lines.append("findings: (ranked by the time at stake per step: us, % of the step)")
    listed = _listing(reading, all_steps, max_ops, kernels, ops, step)
    hint = wrap([LISTING_HINT]) if not listed and trace.steps else []
    room = SCREEN - len(lines) - 1 - len(hint)  # 1: the line that says how many more
    told = 0
    for f in shown:
        block = wrap([finding_line(f)])
        if not all_findings and len(block) > room:
            break
        lines += block
        room -= len(block)
        told += 1
    if hidden or told < len(shown):
        lines.append(
            f"  ({len(hidden) + len(shown) - told} more: under 1% of the step, or past the "
            "screen; --all-findings lists them)"
        )
    if module_tree and trace.steps:
        unit = "step" if trace.unit == "step" else "window"
        lines += wrap(module_tree_lines(data["modules"], unit, trace.on_gpu, max_ops))
    return "\n".join(lines + hint + wrap(listed))


LISTING_HINT = (
    "per-kernel listing: --kernels (GPU work), --ops (CPU dispatch chain), --step N (which "
    "step, 0 = first), --all-steps"
)


def _listing(reading: Reading, all_steps, max_ops, kernels, ops, step) -> list[str]:
    trace = reading.trace
    if not trace.steps:
        return []
    small = all(is_small(s) for s in trace.steps[:1])
    if not (small or kernels or ops or all_steps or step is not None):
        return []
    both = not (kernels or ops)  # by default, or for --step/--all-steps alone: all of it
    chosen = range(len(trace.steps)) if all_steps else [step or 0]
    lines = []
    short = 0  # one-line steps so far
    for i, s in enumerate(trace.steps):
        if i in chosen:
            lines += step_text(reading, i, max_ops=max_ops, gpu=both or kernels, cpu=both or ops)
        elif small and not (kernels or ops) and step is None:
            short += 1
            if short > STEP_LINES:
                left = len(trace.steps) - i
                lines.append(f"... {left} more steps (--all-steps lists every one)")
                break
            times = ", ".join(f"{item.dur:.1f}" for item in s.gpu[:max_ops])
            lines.append(
                f"{step_summary(s, reading.steps[i])}"
                + (f"; kernel times (us, same order): {times}" if times else "")
            )
    return lines


def _gpu_row(item) -> list[str]:
    """A GPU item's row of the listing: its columns, the name cut to the room they leave; the
    reading after it where it fits, else on the next line under the name."""
    row = f"    {item.dur:8.1f}  {_cut(item.klass.cls, 11):<11} {_cut(item.launched_by, 18):<18} "
    row += _cut(item.name, min(NAME_WIDTH, WIDTH - len(row)))
    reading = f"({item.klass.detail})" if item.klass.detail else ""
    if not reading:
        return [row]
    if len(row) + 1 + len(reading) <= WIDTH:
        return [f"{row} {reading}"]
    return [row, f"{'':{_NAME_AT}}{reading}"]


_NAME_AT = 45  # the listing's name column: 4 + 8 + 2 + 11 + 1 + 18 + 1


def _more(left: int) -> str:
    return f"... {left} more (--max-ops)"


def _occupancy(trace: Trace, item) -> footprint.Occupancy | None:
    if item.kind != "kernel":
        return None
    return footprint.occupancy(item.args, trace.device_properties(item.args.get("device", 0)))


def step_text(
    reading: Reading, index: int, *, max_ops: int | None, gpu: bool, cpu: bool
) -> list[str]:
    """Step `index`'s listing; each kernel's footprint line also gives the occupancy worked
    out from it (with the trace's device properties)."""
    trace = reading.trace
    step, on_gpu = trace.steps[index], trace.device is not None
    lines = [step_summary(step, reading.steps[index])]
    if step.gpu and gpu:
        lines.append("  GPU work, in launch order (a kernel's footprint on the line below it):")
        lines.append(f"    {'us':>8}  {'class':<11} {'launched by':<18} name (reading)")
        for item in step.gpu[:max_ops]:
            lines += _gpu_row(item)
            if item.kind == "kernel":
                shape = footprint.describe(item.args, _occupancy(trace, item))
                if shape:
                    lines.append(f"{'':14}{shape}")
        if max_ops is not None and len(step.gpu) > max_ops:
            lines.append(f"    {_more(len(step.gpu) - max_ops)}")
    if not cpu:
        return lines
    lines.append("  CPU dispatch chain:")
    for op in step.cpu_ops[:max_ops]:
        launched = [
            i.klass.cls + (" (split-K reduce)" if i.klass.joins_previous else "")
            for i in op.launched
        ]
        mark = f"  -> {', '.join(launched)}" if launched else ""
        indent = f"    {'  ' * op.depth}"
        lines.append(f"{indent}{_cut(op.name, max(WIDTH - len(indent), 40))}{mark}")
    if max_ops is not None and len(step.cpu_ops) > max_ops:
        lines.append(f"    {_more(len(step.cpu_ops) - max_ops)}")
    silent = silent_ops(step) if on_gpu else []  # on a CPU trace nothing launches GPU work
    if silent:
        lines.append(f"  launched no GPU work: {', '.join(silent)}")
    return lines


# --- JSON ----------------------------------------------------------------------------------


def _footprint(trace: Trace, item) -> dict | None:
    """A kernel's recorded footprint fields, all of them, and the occupancy worked out from
    them (None where the device properties or a field is missing)."""
    if item.kind != "kernel":
        return None
    occ = _occupancy(trace, item)
    return {**footprint.fields(item.args), "from_footprint": occ.as_dict() if occ else None}


def step_dict(reading: Reading, index: int) -> dict:
    trace, s, row = reading.trace, reading.trace.steps[index], reading.steps[index]
    return {
        "name": s.name,
        "cpu_us": s.dur,
        **{k: v for k, v in row.items() if k not in ("name", "idle_us")},
        "idle_us": row["idle_us"],
        "gpu_us": s.gpu_sum,
        "gpu": [
            {
                "name": i.name,
                "kind": i.kind,
                "class": i.klass.cls,
                "group": group(i.klass.cls),
                "reading": i.klass.detail,
                "facts": i.klass.facts,
                "us": i.dur,
                "stream": i.stream,
                "launched_by": i.launched_by,
                "runtime_call": i.runtime,
                "counted_with_previous": i.klass.joins_previous,
                "footprint": _footprint(trace, i),
            }
            for i in s.gpu
        ],
        "cpu_ops": [
            {"name": o.name, "depth": o.depth, "us": o.dur, "launches": len(o.launched)}
            for o in s.cpu_ops
        ],
        "launched_no_gpu_work": silent_ops(s) if trace.device else None,
    }


def _json_safe(data):
    """Sets (tops' name sets are dropped already) and tuples as lists."""
    return json.loads(json.dumps(data, allow_nan=False, default=sorted))


def trace_dict(reading: Reading, with_steps: bool = True) -> dict:
    """One element of `traces`: the contract's keys, the summary, steps and findings."""
    trace, shown, hidden = reading.trace, reading.findings, reading.hidden
    return {
        "path": str(trace.path),
        "rank": trace.rank,
        "device": {"name": trace.device, "source": trace.device_source},
        "unit": trace.unit,
        "window": reading.window,
        "steps_window": reading.steps_window,
        "summary": _json_safe(reading.summary) if trace.steps else None,
        "steps": [step_dict(reading, i) for i in range(len(trace.steps))] if with_steps else [],
        "findings": [{**f.as_dict(), "shown": True} for f in shown]
        + [{**f.as_dict(), "shown": False} for f in hidden],
    }


def document(traces: list[dict], **extra) -> dict:
    return {"schema_version": SCHEMA_VERSION, "traces": traces, **extra}


def dump_json(data, out: TextIOBase) -> None:
    """Strict JSON (NaN and Infinity are not JSON: refuse rather than write them)."""
    json.dump(data, out, indent=2, allow_nan=False)
    out.write("\n")


_MARK = "\x00steps\x00"


def write_json(reading: Reading, out: TextIOBase, **extra) -> None:
    """document([trace_dict(trace)]) as `dump_json` writes it, one step at a time: the dicts
    of a trace of a million events would take more memory than the trace itself. `extra`:
    added keys of the trace (`memory`, for explain --memory)."""
    trace = reading.trace
    head = {**trace_dict(reading, with_steps=False), **extra}
    head["steps"] = _MARK
    text = json.dumps(document([head]), indent=2, allow_nan=False)
    before, after = text.split(json.dumps(_MARK))
    out.write(before)
    if not trace.steps:
        out.write("[]")
    else:
        pad = "\n        "  # the steps sit four levels deep: document, traces, trace, steps
        out.write("[")
        for i in range(len(trace.steps)):
            body = json.dumps(step_dict(reading, i), indent=2, allow_nan=False)
            out.write(("," if i else "") + pad + body.replace("\n", pad))
        out.write("\n      ]")
    out.write(after + "\n")


def step_summary(step: Step, row: dict) -> str:
    """`row`: the step's breakdown (Reading.steps)."""
    busy = row["gpu_busy_us"]
    return f"{step.name}: CPU {step.dur:.0f} us, GPU busy {busy:.1f} us ({len(step.gpu)} GPU items)"


def _launch_lines(la: dict) -> list[str]:
    """The launches' line: a CUDA graph's replay is one launch of many kernels, told apart."""
    replays = la.get("graph_launches", 0)
    if not la["kernels"] and not replays:
        return []
    if replays:
        what = (f"{la['kernels']} kernels one by one and {replays} CUDA graph replays (one "
                f"launch each, {la['graph_kernels']} kernels in all)")  # fmt: skip
    else:
        what = f"{la['kernels']} kernels"
    return [
        f"launches: {what}, delay launch->start median "
        f"{duration(la['launch_delay_us']['median'])} (p90 "
        f"{duration(la['launch_delay_us']['p90'])}), {la['shorter_than_launch']} "
        f"{'of those one by one ' if replays else ''}shorter than their launch call, queue "
        f"depth median {la['queue_depth']['median']:g} max {la['queue_depth']['max']}"
    ]
