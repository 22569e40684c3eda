"""Text of the multi-rank reading (one run: explain's, every line at most lines.WIDTH wide)
and of two runs side by side (compare's): formats, computes nothing."""

from __future__ import annotations

from tracereader.render.lines import header, typed, wrap
from tracereader.units import bytes_text, cell


def _finding(f: dict) -> str:
    """One of analyses.straggle's findings."""
    stake = f" [{cell(f['us'] / 1e3)} ms, {f['pct']:.0f}%]" if f["pct"] is not None else ""
    return f"  [{f['cause']}]{stake} {f['message']} -> try: {f['next']}"


# long: the rank table's lines in the order they print, formatting only
def text(result: dict) -> str:
    on_gpu = result["device"] is not None
    where = result["device"] or "CPU only"
    lines = header(
        f"run: {result['run']}",
        f"{len(result['ranks'])} of {result['world']} ranks, "
        f"{result['backend'] or 'backend unknown'}, {where}; {result['steps_matched']} "
        "recorded steps on every rank",
    )
    lines += [f"  PROBLEM: {p}" for p in result["problems"]]
    lines += [_finding(f) for f in result.get("findings", [])[:2]]  # the cause first
    lane = "GPU work" if on_gpu else "CPU time on the step's thread"
    lines.append(f"per rank ({lane}, us; each column its own median over the recorded steps):")
    columns = f"  {'rank':>4} {'step':>10} {'compute':>10} {'comm':>10} {'exposed':>10}"
    columns += f" {'comm share':>11}" + (f" {'waits':>8} {'exposed-waits':>13}" if on_gpu else "")
    lines.append(columns)
    for row in result["per_rank"]:
        busy = (row["compute_us"] or 0) + (row["comm_us"] or 0)
        share = f"{(row['comm_us'] or 0) / busy:.0%}" if busy else "-"
        line = (
            f"  {row['rank']:>4} {cell(row['step_us']):>10} {cell(row['compute_us']):>10} "
            f"{cell(row['comm_us']):>10} {cell(row['exposed_us']):>10} {share:>11}"
        )
        if on_gpu:
            line += f" {cell(row['wait_us']):>8} {cell(row.get('exposed_less_waits_us')):>13}"
        lines.append(line)
    if on_gpu:
        lines.append(
            "  (step: the CPU's ProfilerStep; waits: per step, the time this rank's collectives "
            "spent waiting for the last rank to arrive; exposed-waits: the exposed time that is "
            "not such waiting, the link's own share)"
        )
    skew, straggler = result["skew_us"], result["straggler"]
    if len(result["ranks"]) > 1 and skew["median"] is not None:
        line = (
            f"skew of the step starts: median {cell(skew['median'])} us, max {cell(skew['max'])} us"
        )
        if straggler:
            line += (
                f"; rank {straggler['rank']} started last in {straggler['steps']} of "
                f"{result['steps_matched']} steps (the others wait for it inside the collectives"
                + (f"; its {straggler['late']} is late" if straggler.get("late") else "")
                + ")"
            )
        lines.append(line)
    coll = result["collective"]
    per_step = "/".join(map(str, coll["per_step"])) or "0"
    if coll["per_step"] in ([0], []):
        lines.append(
            "collectives: none in the recorded steps"
            + (" (one rank: nothing to reduce)" if result["world"] == 1 else "")
        )
    else:
        kinds = len(result.get("by_kind", []))
        if kinds > 1:  # FSDP's all-gathers and reduce-scatters: sizes and bandwidth per kind
            lines.append(f"collectives: {per_step} per step, of {kinds} kinds (each below)")
        else:
            lines.append(
                f"collectives: {per_step} per step, {bytes_text(coll['bytes'])} each"
                + (f" ({coll['shape']})" if coll["shape"] else "")
            )
        if not on_gpu:
            lines.append(
                "  no bandwidth from a CPU trace: gloo reduces on a thread of its own, which "
                "this reading does not see; comm above is the calling thread's issue + wait"
            )
        elif kinds > 1:
            pass  # one median over kinds would mean nothing
        elif coll["bus_GBps"] is not None:
            line = (
                f"  transfer (the last rank's kernel) median {cell(coll['transfer_us'])} us -> "
                f"bus bandwidth (nccl-tests' factor per kind) = {coll['bus_GBps']:.1f} GB/s"
            )
            lines.append(line)
            if coll.get("link_reading"):
                lines.append(
                    f"  the link at this size and kind: {coll['link_GBps']:.0f} GB/s "
                    f"({coll['link_measured']}): {coll['link_reading']}"
                )
            else:
                lines.append(
                    "  the link: not measured at this size on this machine yet (python -m "
                    "tools.dev.ranks.link_curve under torchrun, or the lesson's --bench)"
                )
        else:
            lines.append("  bus bandwidth: unknown (the collective's size was not recorded)")
    for k in result.get("by_kind", []):
        if len(result.get("by_kind", [])) > 1 or k["kind"] != "all-reduce":
            bus = f", bus {k['bus_GBps']:.1f} GB/s" if k["bus_GBps"] else ""
            if k.get("link_reading") and len(result["by_kind"]) > 1:  # one kind: said above
                bus += f": {k['link_reading']}"
            lines.append(
                f"  {k['kind']}: {k['count']} in all, median {bytes_text(k['bytes'])}, "
                f"transfer {cell(k['transfer_us'])} us{bus}"
            )
    first = result["per_rank"][0]["path"] if result["per_rank"] else None
    if first:
        lines.append(f"one rank in full: uv run explain {typed(first)}")
    return "\n".join(wrap(lines))


def compare_text(result: dict) -> str:
    a, b = result["a"], result["b"]
    lines = [
        f"A: {a['run']} ({a['ranks']} ranks, {a['backend']}, {a['device'] or 'CPU only'})",
        f"B: {b['run']} ({b['ranks']} ranks, {b['backend']}, {b['device'] or 'CPU only'})",
    ]
    for side in ("a", "b"):
        lines += [f"  PROBLEM in {side.upper()}: {p}" for p in result["problems"][side]]
    lines.append(f"{'per rank, averaged over ranks (us):':<40} {'A':>10} {'B':>10}")
    rows = [
        ("step (CPU)", "step_us"),
        ("compute", "compute_us"),
        ("communication", "comm_us"),
        ("exposed communication", "exposed_us"),
        ("skew of step starts (median)", "skew_us"),
    ]
    for label, key in rows:
        lines.append(f"  {label:<38} {cell(a[key]):>10} {cell(b[key]):>10}")
    lines.append(
        f"  {'collective size':<38} {bytes_text(a['collective_bytes']):>10} "
        f"{bytes_text(b['collective_bytes']):>10}"
    )
    bus_a = "-" if a["bus_GBps"] is None else f"{a['bus_GBps']:.1f}"
    bus_b = "-" if b["bus_GBps"] is None else f"{b['bus_GBps']:.1f}"
    lines.append(f"  {'bus bandwidth (GB/s)':<38} {bus_a:>10} {bus_b:>10}")
    if a["rank0"] and b["rank0"]:
        pair = f"{typed(a['rank0'])} {typed(b['rank0'])}"
        lines.append(f"kernel by kernel, rank 0: uv run compare {pair}")
    return "\n".join(wrap(lines))
