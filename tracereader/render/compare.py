"""Text of the diff of two traces (analyses.diff): formats, computes nothing."""

from __future__ import annotations

from collections import Counter

from tracereader.names.kernel_names import labels
from tracereader.render.lines import fit
from tracereader.units import duration

TOP_CHANGES = 12


LABEL_WIDTH = 44


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def text(result: dict) -> str:
    def short(name: str) -> str:
        return name if len(name) <= 70 else name[:67] + "..."

    lines = [
        f"A: {result['a']} ({result['device_a'] or 'CPU only'})",
        f"B: {result['b']} ({result['device_b'] or 'CPU only'})",
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
                moved = f", moves >= {_mb(e['bytes'])}" if e["bytes"] else ""
                if e["bytes"] and e["bytes_cap"] is None:
                    moved += " (cap unknown: no device bandwidth to check it against)"
                if e["capped"]:
                    moved += (f", touches {_mb(e['bytes_touched'])}: more than HBM moves in its "
                              "time, so read from L2, not counted")  # fmt: skip
                lines.append(
                    f"  {e['us'] or 0:7.1f} us  {e['class']:<11} {short(e['name'])} "
                    f"[{e['reading'] or e['launched_by']}]{moved}"
                )
            if len(items) > TOP_CHANGES:
                lines.append(f"  ... {len(items) - TOP_CHANGES} more (--json lists every one)")
    ba, bb = result["extra_bytes_a"], result["extra_bytes_b"]
    unknown = result["extra_bytes_unknown"]
    if ba or bb or unknown["a"] or unknown["b"]:
        known = not unknown["a"] and not unknown["b"]
        lines.append(
            f"HBM traffic of the extra kernels, at least: A {_mb(ba)}, B {_mb(bb)}"
            + (f" (difference {_mb(abs(ba - bb))})" if known else "")
        )
        for side in ("a", "b"):
            if unknown[side]:
                lines.append(
                    f"  not counted in {side.upper()} (no byte estimate: no recorded shapes, an "
                    "op of no known family, or an estimate above the device's bandwidth): "
                    f"{', '.join(short(n) for n in unknown[side])}"
                )
    if result["cpu_ops_gone"]:
        lines.append(
            "CPU ops only in A (gone in B): "
            + ", ".join(f"{short(n)} x{c}" for n, c in Counter(result["cpu_ops_gone"]).items())
        )
    if result["cpu_ops_new"]:
        lines.append(
            "CPU ops only in B (new): "
            + ", ".join(f"{short(n)} x{c}" for n, c in Counter(result["cpu_ops_new"]).items())
        )
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
    return fit(lines)


def _scale_text(result: dict) -> list[str]:
    lines = [f"verdict: {result['verdict']}"]
    by_class = result["by_class_us"]
    if by_class:
        lines.append(f"{'time by class per step (union):':<46} {'A':>10} {'B':>10}")
        for g, t in sorted(by_class.items(), key=lambda kv: -max(kv[1].values())):
            lines.append(f"  {g:<44} {duration(t['a']):>10} {duration(t['b']):>10}")
    groups = result["kernel_groups"]
    for what, key in (("gone", "a_us"), ("new", "b_us")):
        if groups[what]:
            shown = ", ".join(
                f"{r['name'][:50]} ({duration(r[key])})" for r in groups[what][:TOP_CHANGES]
            )
            more = len(groups[what]) - TOP_CHANGES
            lines.append(
                f"kernel groups {what} (per step): {shown}" + (f", {more} more" if more > 0 else "")
            )
    if groups["changed"]:
        lines.append("kernel groups changed by over 10% (per step):")
        for r in groups["changed"][:TOP_CHANGES]:
            lines.append(
                f"  {r['name'][:44]:<44} {duration(r['a_us']):>10} {duration(r['b_us']):>10}"
            )
    lines += _module_text(result["modules"])
    return lines


def _module_text(found: dict | None) -> list[str]:
    if not found:
        return []
    if found["carried_by"] != "both":
        return [f"nn.Modules: only {found['carried_by'].upper()} carries module events"]

    def cut(path: str) -> str:
        return path if len(path) <= 44 else "..." + path[-41:]

    what = "GPU busy" if found["by"] == "gpu_us" else "CPU time"
    lines = []
    if found["changed"]:
        lines.append(f"{f'nn.Modules whose {what} changed by over 10% (per step):':<46}")
        for r in found["changed"][:TOP_CHANGES]:
            lines.append(
                f"  {cut(r['path']):<44} {duration(r['a_us']):>10} {duration(r['b_us']):>10}"
            )
    for side, paths in (("A", found["gone"]), ("B", found["new"])):
        if paths:
            shown = ", ".join(cut(p) for p in paths[:3])
            more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
            lines.append(f"nn.Modules only in {side} ({len(paths)}): {shown}{more}")
    return lines
