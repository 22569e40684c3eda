"""Text of the diff of two traces (analyses.diff): formats, computes nothing."""

from __future__ import annotations

from collections import Counter

from tracereader.names.kernel_names import labels
from tracereader.render.lines import WIDTH, clauses, cut, header, wrap, wrap_items
from tracereader.units import duration

TOP_CHANGES = 12


LABEL_WIDTH = 44
NAME_WIDTH = 70  # a kernel's name at its widest in a row, as in explain's listing
NAME_LEAST = 32  # a row's name keeps this much before its reading does: it says which kernel
READING_LEAST = 8  # a reading cut shorter than this says nothing: left out


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def text(result: dict) -> str:
    """Every line at most WIDTH wide, as explain's: a table's row keeps its columns (a long
    name cut with an ellipsis), a list wraps under its line without breaking a name."""
    lines = [
        *header(f"A: {result['a']}", result["device_a"] or "CPU only"),
        *header(f"B: {result['b']}", result["device_b"] or "CPU only"),
    ]
    if result["gpu_identical"] is None:
        lines.append(
            "GPU work: none in either trace ("
            + ("CPU-only traces)" if result["cpu_only"] else "no GPU work was recorded)")
        )
    else:
        lines.append(
            "GPU work: "
            + ("identical, kernel for kernel" if result["gpu_identical"] else "differs")
        )
        gemms = result["gemms_identical"]
        lines.append(
            "GEMM kernels: "
            + {True: "byte-for-byte identical", False: "differ", None: "none on either side"}[gemms]
        )
    for side in ("a", "b"):
        items = result[f"only_in_{side}"]
        if items:
            lines.append(f"only in {side.upper()}:")
            for e in items[:TOP_CHANGES]:
                lines += _row(e)
            if len(items) > TOP_CHANGES:
                lines.append(f"  ... {len(items) - TOP_CHANGES} more (--json lists every one)")
    lines += _bytes_text(result)
    for key, head in (("cpu_ops_gone", "CPU ops only in A (gone in B): "),
                      ("cpu_ops_new", "CPU ops only in B (new): ")):  # fmt: skip
        if result[key]:
            ops = [f"{short(n)} x{c}" for n, c in Counter(result[key]).items()]
            lines += wrap_items(head, ops)
    lines += _scale_text(result)
    if result["kernel_avg_us"] and len(result["kernel_avg_us"]) <= 40:
        names = labels(result["kernel_avg_us"], LABEL_WIDTH)  # unique: no two rows read alike
        lines.append(f"{'average GPU time per kernel (us):':<{LABEL_WIDTH + 2}} {'A':>8} {'B':>8}")
        for name, t in result["kernel_avg_us"].items():
            fa = f"{t['a']:8.1f}" if t["a"] is not None else "       -"
            fb = f"{t['b']:8.1f}" if t["b"] is not None else "       -"
            lines.append(f"  {names[name]:<{LABEL_WIDTH}} {fa} {fb}")
    if result["gpu_identical"] is not None:
        g = result["gpu_us_per_step"]
        lines.append(f"GPU time per step, durations summed: A {g['a']:.1f} us, B {g['b']:.1f} us")
    return "\n".join(wrap(lines))  # what the rows and lists above left wider (none known)


def short(name: str) -> str:
    return cut(name, NAME_WIDTH)


def _row(e: dict) -> list[str]:
    """An extra kernel's row, one line (a row a line, as the tests and the eye read them): its
    time, class, name and reading, cut with an ellipsis to the room that the bytes, shown
    whole, leave; a note on the bytes on the lines below it, under the name."""
    start = f"  {e['us'] or 0:7.1f} us  {e['class']:<11} "
    moved = f", moves >= {_mb(e['bytes'])}" if e["bytes"] else ""
    room = WIDTH - len(start) - len(moved)
    reading = e["reading"] or e["launched_by"]
    name = cut(e["name"], min(NAME_WIDTH, room))
    if len(name) + len(reading) + 3 <= room or reading not in name:
        # the reading beside the name, both cut where they must: the name keeps NAME_LEAST
        name = cut(e["name"], min(NAME_WIDTH, max(room - len(reading) - 3, NAME_LEAST)))
        if len(name) + len(reading) + 3 > room:  # what the name, as shown, does not say
            reading = _news(reading, name)
            name = cut(e["name"], min(NAME_WIDTH, max(room - len(reading) - 3, len(name))))
        name += _tag(reading, room - len(name))
    # else the name, cut, still says what its reading would (a reading that is the name's
    # base, as an aten kernel's): the room goes to the name
    notes = []
    if e["bytes"] and e["bytes_cap"] is None:
        notes.append("(cap unknown: no device bandwidth to check it against)")
    if e["capped"]:
        notes.append(f"touches {_mb(e['bytes_touched'])}: more than HBM moves in its time, so "
                     "read from L2, not counted")  # fmt: skip
    return [f"{start}{name}{moved}", *wrap([" " * len(start) + n for n in notes])]


def _news(reading: str, name: str) -> str:
    """The reading's facts that the name does not show (a GEMM's tile and layout are in
    nvjet's name): what a row short of room keeps of it."""
    shown = name.removesuffix("...")
    facts = [f for f in reading.split(", ") if not f or f.split()[-1] not in shown]
    return ", ".join(facts) or reading


def _tag(reading: str, room: int) -> str:
    """` [reading]` in at most `room`: whole, else as many of its facts as fit and an
    ellipsis, else cut; nothing where a cut would say nothing."""
    if len(reading) + 3 <= room:
        return f" [{reading}]"
    facts = reading.split(", ")
    for n in range(len(facts) - 1, 0, -1):
        kept = ", ".join(facts[:n]) + ", ..."
        if len(kept) + 3 <= room:
            return f" [{kept}]"
    return f" [{cut(reading, room - 3)}]" if room - 3 >= READING_LEAST else ""


def _bytes_text(result: dict) -> list[str]:
    ba, bb = result["extra_bytes_a"], result["extra_bytes_b"]
    unknown = result["extra_bytes_unknown"]
    if not (ba or bb or unknown["a"] or unknown["b"]):
        return []
    known = not unknown["a"] and not unknown["b"]
    lines = [
        f"HBM traffic of the extra kernels, at least: A {_mb(ba)}, B {_mb(bb)}"
        + (f" (difference {_mb(abs(ba - bb))})" if known else "")
    ]
    for side in ("a", "b"):
        if unknown[side]:
            lines += wrap_items(
                f"  not counted in {side.upper()} (no byte estimate: no recorded shapes, an op "
                "of no known family, or an estimate above the device's bandwidth): ",
                [short(n) for n in unknown[side]],
            )
    return lines


def _scale_text(result: dict) -> list[str]:
    # the verdict's first clause starts its line, broken at a space where it must ("verdict:"
    # alone on a line says nothing); the others wrap whole where they fit
    first, *rest = clauses(result["verdict"]) or [""]
    lines = wrap_items(f"verdict: {first} ", rest, sep=" ") if rest else [f"verdict: {first}"]
    by_class = result["by_class_us"]
    if by_class:
        lines.append(f"{'time by class per step (union):':<46} {'A':>10} {'B':>10}")
        for g, t in sorted(by_class.items(), key=lambda kv: -max(kv[1].values())):
            lines.append(f"  {g:<44} {duration(t['a']):>10} {duration(t['b']):>10}")
    groups = result["kernel_groups"]
    for what, key in (("gone", "a_us"), ("new", "b_us")):
        if groups[what]:
            shown = [f"{cut(r['name'], NAME_WIDTH)} ({duration(r[key])})" for r in groups[what]]
            more = len(groups[what]) - TOP_CHANGES
            lines += wrap_items(
                f"kernel groups {what} (per step): ",
                shown[:TOP_CHANGES] + ([f"{more} more"] if more > 0 else []),
            )
    if groups["changed"]:
        lines.append("kernel groups changed by over 10% (per step):")
        for r in groups["changed"][:TOP_CHANGES]:
            lines.append(
                f"  {cut(r['name'], 44):<44} {duration(r['a_us']):>10} {duration(r['b_us']):>10}"
            )
    lines += _module_text(result["modules"])
    return lines


def _module_text(found: dict | None) -> list[str]:
    if not found:
        return []
    if found["carried_by"] != "both":
        return [f"nn.Modules: only {found['carried_by'].upper()} carries module events"]

    def tail(path: str) -> str:  # a module's path: its end names it
        return path if len(path) <= 44 else "..." + path[-41:]

    what = "GPU busy" if found["by"] == "gpu_us" else "CPU time"
    lines = []
    if found["changed"]:
        lines.append(f"{f'nn.Modules whose {what} changed by over 10% (per step):':<46}")
        for r in found["changed"][:TOP_CHANGES]:
            lines.append(
                f"  {tail(r['path']):<44} {duration(r['a_us']):>10} {duration(r['b_us']):>10}"
            )
    for side, paths in (("A", found["gone"]), ("B", found["new"])):
        if paths:
            shown = [tail(p) for p in paths[:3]]
            if len(paths) > 3:
                shown[-1] += f" and {len(paths) - 3} more"
            lines += wrap_items(f"nn.Modules only in {side} ({len(paths)}): ", shown)
    return lines
