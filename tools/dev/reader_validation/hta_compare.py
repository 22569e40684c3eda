"""Our reader against Holistic Trace Analysis on the same traces, with the raw events as referee.

    uv run python -m tools.dev.reader_validation.hta_compare ARGS, ARGS one of:
        TRACE.json.gz                               one trace
        RANK_FOLDER                                 the ranks of one job
        FOLDER/STEM                                 STEM_rank*.json[.gz]
        --each ../shared/external-traces/hta        each file alone
        --json out.json TRACE ...                   everything, as JSON

Per trace (per rank) three sources side by side:
  raw     this tool's own reading (hta_raw.py): json.load of the whole file, the union of the
          GPU events' intervals (kernels, memcpys, memsets) per rank, exact to the recorded
          decimals;
          idle / compute / non-compute and the comm/compute overlap by HTA's definitions
          (docs/reader_vs_hta.md), computed by interval arithmetic. Shown in two scopes: the
          reader's (all GPU work, or what the steps launched when the reader reads steps) and
          HTA's (what HTA keeps after filtering its steps); where host events carry a `stream`
          arg (Inductor's launcher ops), HTA's scope with them added too, as HTA counts them.
          Per kind of collective (from the NCCL kernel's name) the summed kernel time, and
          HTA's idle split (per stream, summed over streams) restated.
  HTA     holistictraceanalysis 0.5.0 in its own environment (`uv run --no-project --with ...`
          python -m tools.dev.reader_validation._hta_side): get_temporal_breakdown,
          get_comm_comp_overlap, get_idle_time_breakdown, get_gpu_kernel_breakdown's communication
          kernels (their time per kind), with the last ProfilerStep included (HTA drops it by
          default; --hta-default-steps keeps HTA's default).
  reader  `python -m tracereader.commands.explain PATH --json` (schema_version 2) of this
          checkout: its `window` (the whole trace) and, where it reads steps, its
          `steps_window` (the work the steps launched), each against the raw union in the same
          scope; the steps' scope is the one set against HTA, which filters a trace with steps
          the same way. Its time per kind of collective and its idle split (by union, per
          step) are summed over its steps (summary.collectives.by_kind, steps[].idle_us).

Targets, marked per row: the reader's GPU busy within 0.5% of the raw union; its idle / compute /
non-compute within 1 point, its comm/compute overlap, idle and time per kind of collective
(in points of HTA's span) within 2 points of HTA's. A folder holding several runs' rank files
(STEM_rank<r>.json[.gz]) is one job per STEM. HTA's own
busy against the raw union in its scope is shown too: that is where HTA mis-reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.dev.reader_validation.hta_raw import IDLE_KINDS, kind_of, raw_reading
from tracereader import Parser, run

ROOT = Path(__file__).resolve().parents[3]
HTA_SPEC = "holistictraceanalysis==0.5.0"
SIDE = ROOT / "tools" / "dev" / "reader_validation" / "_hta_side.py"
SCHEMA_VERSION = 2
WINDOW_KEYS = (
    "span_us",
    "gpu_busy_us",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "comm_us",
    "comm_overlap_pct",
)
TRACE_KEYS = ("path", "rank", "device", "unit", "window")
TARGET_BUSY_REL = 0.005
TARGET_BREAKDOWN_PT = 1.0
TARGET_OVERLAP_PT = 2.0
TARGET_IDLE_PT = 2.0
TARGET_COLLECTIVE_PT = 2.0


class BadInput(Exception):
    pass


# ---------------------------------------------------------------- inputs


@dataclass
class Job:
    """One thing a user names: a trace, or the ranks of one job (a folder or FOLDER/STEM)."""

    arg: str
    files: list[Path]
    hta_arg: str  # what _hta_side.py reads: a file, a folder, or files joined by "::"
    raw: list[dict] = field(default_factory=list)
    hta: dict | None = None
    reader: dict | None = None
    notes: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)


def _traces_in(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
    )


RANK_FILE = re.compile(r"^(?P<stem>.+)_rank\d+\.json(\.gz)?$")


def _stem_jobs(folder: Path, files: list[Path]) -> list[Job] | None:
    """One job per run where a folder holds the rank files of several (a lesson's trace folder
    keeps every variant's `STEM_rank<r>.json`), else None."""
    stems: dict[Path, list[Path]] = {}
    for f in files:
        found = RANK_FILE.match(f.name)
        if not found:
            return None
        stems.setdefault(f.parent / found["stem"], []).append(f)
    if len(stems) < 2:
        return None
    return [
        Job(str(stem), fs, "::".join(str(f.resolve()) for f in fs))
        for stem, fs in sorted(stems.items())
    ]


def jobs_from(args: list[str], each: bool) -> list[Job]:
    jobs = []
    for arg in args:
        path = Path(arg)
        if path.is_file():
            jobs.append(Job(arg, [path], str(path.resolve())))
        elif path.is_dir():
            files = _traces_in(path)
            if not files:
                raise BadInput(f"{arg}: no .json or .json.gz trace in this folder")
            if each:
                jobs += [Job(str(f), [f], str(f.resolve())) for f in files]
            else:
                jobs += _stem_jobs(path, files) or [Job(arg, files, str(path.resolve()))]
        else:
            files = sorted(path.parent.glob(f"{path.name}_rank*.json*")) if path.parent else []
            if not files:
                raise BadInput(f"{arg}: no such trace, folder or FOLDER/STEM of rank traces")
            jobs.append(Job(arg, files, "::".join(str(f.resolve()) for f in files)))
    return jobs


# ---------------------------------------------------------------- the two tools


def run_hta(jobs: list[Job], spec: str, default_steps: bool, exact_times: bool) -> None:
    """All jobs in one child of HTA's own environment (its start-up, about 3 s, paid once)."""
    with tempfile.TemporaryDirectory(prefix="hta_compare_") as tmp:
        out = Path(tmp) / "hta.json"
        argv = ["uv", "run", "--no-project", "--with", spec, "python", str(SIDE), "--out"]
        argv += [str(out), *(["--exclude-last-step"] if default_steps else [])]
        argv += [j.hta_arg for j in jobs]
        env = dict(os.environ, **({"HTA_DISABLE_NS_ROUNDING": "1"} if exact_times else {}))
        proc = subprocess.run(argv, capture_output=True, text=True, env=env)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            for job in jobs:
                job.notes.append(f"HTA did not run (exit {proc.returncode}): {tail[0][:200]}")
            return
        data = json.loads(out.read_text())
    for job, result in zip(jobs, data["inputs"], strict=True):
        job.hta = dict(result, version=data["hta_version"])


def check_reader(data) -> str | None:
    """None when the reader's JSON has what this tool reads, else what it lacks."""
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        got = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        return f"reader JSON is not schema_version {SCHEMA_VERSION} (got {got!r})"
    if not isinstance(data.get("traces"), list):
        return "reader JSON lacks key traces"
    for t in data["traces"]:
        for key in TRACE_KEYS:
            if key not in t:
                return f"reader JSON lacks key traces[].{key}"
        for key in WINDOW_KEYS:
            if key not in t["window"]:
                return f"reader JSON lacks key traces[].window.{key}"
    return None


def run_reader(job: Job, repo: Path) -> None:
    argv = [sys.executable, "-m", "tracereader.commands.explain", job.arg, "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=repo)
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        job.notes.append(f"reader refused (exit {proc.returncode}): {line[:200]}")
        return
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        job.notes.append(f"reader printed no JSON: {exc}")
        return
    lacking = check_reader(data)
    if lacking:
        job.notes.append(lacking)
        return
    job.reader = data


# ---------------------------------------------------------------- side by side


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()


def rows(job: Job) -> list[dict]:
    """One row per rank file: the three readings and the targets' verdicts."""
    out = []
    hta_ranks = (job.hta or {}).get("ranks", [])
    reader_traces = (job.reader or {}).get("traces", [])
    for raw in job.raw:
        hta = next((r for r in hta_ranks if _same(r.get("file"), raw["file"])), None)
        reader = next((t for t in reader_traces if _same(t.get("path"), raw["file"])), None)
        if reader is None and len(reader_traces) == 1 == len(job.raw):
            reader = reader_traces[0]
        unit = reader.get("unit") if reader else None
        hta_kinds = None
        if hta and hta.get("comm_by_name_us") is not None:
            hta_kinds = {}
            for name, us in hta["comm_by_name_us"].items():
                hta_kinds[kind_of(name)] = hta_kinds.get(kind_of(name), 0.0) + (us or 0.0)
        # Like with like: the steps' scope on both sides where the reader reads steps (its
        # `steps_window`), the whole trace where it does not.
        steps_window = reader.get("steps_window") if reader else None
        scope = "steps" if unit == "step" and raw["steps"] and steps_window else "all"
        row = {
            "file": raw["file"],
            "rank": raw["rank"],
            "gpu_events": raw["gpu_events"],
            "raw": raw[scope],
            "raw_scope": scope,
            "raw_all": raw["all"],
            "raw_hta_scope": raw["hta"],
            "raw_hta_events": raw["hta_events"],
            "hta": hta,
            "reader": (steps_window if scope == "steps" else reader["window"]) if reader else None,
            "reader_all": reader["window"] if reader else None,
            "reader_unit": unit,
            "hta_collectives_us": hta_kinds,
            "reader_collectives_us": _reader_collectives(reader) if scope == "steps" else None,
            "reader_idle_split_us": _reader_idle_split(reader) if scope == "steps" else None,
        }
        row["verdicts"] = verdicts(row)
        out.append(row)
    return out


def _reader_collectives(reader: dict) -> dict | None:
    """The reader's summed time per kind of collective over its steps."""
    found = ((reader.get("summary") or {}).get("collectives") or {}).get("by_kind")
    return None if found is None else {r["kind"]: r["total_us"] for r in found}


def _reader_idle_split(reader: dict) -> dict | None:
    """The reader's idle split summed over its steps, in HTA's kind names, its host wait
    without the trace's two ends (HTA counts only gaps between two kernels)."""
    steps = [s["idle_us"] for s in reader.get("steps") or [] if s.get("idle_us")]
    if not steps:
        return None
    out = {k: sum(s.get(f"{k}_us", 0.0) for s in steps) for k in IDLE_KINDS}
    out["host_wait"] -= sum(s.get("edge_us", 0.0) for s in steps)
    return out


def _gap(a, b) -> float | None:
    return None if a is None or b is None else abs(a - b)


def verdicts(row: dict) -> dict:
    """Each target: (measured gap, within target) or None where a side lacks the number."""
    raw, hta, reader = row["raw"], row["hta"], row["reader"]
    out: dict = {}
    if reader and raw and raw["gpu_busy_us"]:
        rel = abs(reader["gpu_busy_us"] - raw["gpu_busy_us"]) / raw["gpu_busy_us"]
        out["reader_busy_vs_raw"] = (rel, rel <= TARGET_BUSY_REL)
    whole, raw_all = row["reader_all"], row["raw_all"]
    if row["raw_scope"] != "all" and whole and raw_all and raw_all["gpu_busy_us"]:
        rel = abs(whole["gpu_busy_us"] - raw_all["gpu_busy_us"]) / raw_all["gpu_busy_us"]
        out["reader_all_busy_vs_raw"] = (rel, rel <= TARGET_BUSY_REL)
    hraw = row["raw_hta_scope"]
    if hta and hta.get("busy_us") is not None and hraw and hraw["gpu_busy_us"]:
        rel = abs(hta["busy_us"] - hraw["gpu_busy_us"]) / hraw["gpu_busy_us"]
        out["hta_busy_vs_raw"] = (rel, rel <= TARGET_BUSY_REL)
    if reader and hta:
        gaps = [
            _gap(reader.get(k), hta.get(k)) for k in ("idle_pct", "compute_pct", "non_compute_pct")
        ]
        if None not in gaps:
            out["breakdown_vs_hta"] = (max(gaps), max(gaps) <= TARGET_BREAKDOWN_PT)
        gap = _gap(reader.get("comm_overlap_pct"), hta.get("comm_overlap_pct"))
        if gap is not None:
            out["overlap_vs_hta"] = (gap, gap <= TARGET_OVERLAP_PT)
        gap = _gap(reader.get("idle_pct"), hta.get("idle_pct"))
        if gap is not None:
            out["idle_vs_hta"] = (gap, gap <= TARGET_IDLE_PT)
    ours, theirs = row.get("reader_collectives_us"), row.get("hta_collectives_us")
    if ours is not None and theirs is not None and hta and hta.get("span_us"):
        # in points of HTA's span: a kind's time as a share of the window, like idle's
        gap = max(
            (abs(ours.get(k, 0.0) - theirs.get(k, 0.0)) for k in {*ours, *theirs}), default=0.0
        )
        gap = 100.0 * gap / hta["span_us"]
        out["collectives_vs_hta"] = (gap, gap <= TARGET_COLLECTIVE_PT)
    return out


def _f(value, fmt: str) -> str:
    """`value` formatted, or a dash as wide as the format asks."""
    width = int(re.match(r"\d*", fmt).group() or 0)
    return format("-", f">{width}") if value is None else format(value, fmt)


def _line(label: str, r: dict | None, busy_key: str) -> str:
    if not r:
        return f"  {label:<18} {'(no reading)':>10}"
    return (
        f"  {label:<18} {_f(r.get('span_us') and r['span_us'] / 1e3, '10.3f')} "
        f"{_f(r.get(busy_key) and r[busy_key] / 1e3, '10.3f')} "
        f"{_f(r.get('idle_pct'), '7.2f')} {_f(r.get('compute_pct'), '9.2f')} "
        f"{_f(r.get('non_compute_pct'), '9.2f')} {_f(r.get('comm_overlap_pct'), '9.2f')}"
    )


NAMES = {
    "reader_busy_vs_raw": ("reader busy vs raw", "rel", TARGET_BUSY_REL),
    "reader_all_busy_vs_raw": ("reader busy vs raw, whole trace", "rel", TARGET_BUSY_REL),
    "hta_busy_vs_raw": ("HTA busy vs raw", "rel", TARGET_BUSY_REL),
    "breakdown_vs_hta": ("reader breakdown vs HTA", "pt", TARGET_BREAKDOWN_PT),
    "overlap_vs_hta": ("reader overlap vs HTA", "pt", TARGET_OVERLAP_PT),
    "idle_vs_hta": ("reader idle vs HTA", "pt", TARGET_IDLE_PT),
    "collectives_vs_hta": ("reader time per collective kind vs HTA", "pt", TARGET_COLLECTIVE_PT),
}


def _ms(values: dict | None, keys) -> str:
    if values is None:
        return "-"
    return " / ".join(f"{values.get(k, 0.0) / 1e3:.3f}" for k in keys)


def _extra_lines(row: dict) -> list[str]:
    """Time per collective kind and the idle split, ms, in the row's scope; the raw idle split
    is HTA's definition (per stream, summed) restated, the reader's is its own (by union)."""
    raw, hta = row["raw"], row["hta"] or {}
    kinds = sorted(
        {*(raw or {}).get("collectives_us", {}), *(row["hta_collectives_us"] or {})}
        | set(row["reader_collectives_us"] or {})
    )
    lines = []
    if kinds:
        lines.append(f"  collectives ms ({' / '.join(kinds)})")
        lines.append(f"    raw {_ms((raw or {}).get('collectives_us'), kinds)}")
        lines.append(f"    HTA {_ms(row['hta_collectives_us'], kinds)}")
        lines.append(f"    reader {_ms(row['reader_collectives_us'], kinds)}")
    idle = row["raw_hta_scope"] and row["raw_hta_scope"].get("idle_split_us")
    lines.append(f"  idle split ms ({' / '.join(IDLE_KINDS)})")
    lines.append(f"    raw, HTA's definition, HTA's scope {_ms(idle, IDLE_KINDS)}")
    lines.append(f"    HTA (per stream, summed) {_ms(hta.get('idle_breakdown_us'), IDLE_KINDS)}")
    lines.append(f"    reader (by union, its steps) {_ms(row['reader_idle_split_us'], IDLE_KINDS)}")
    return lines


def render(job: Job) -> str:
    lines = [f"== {job.arg}"]
    hta = job.hta or {}
    if hta:
        lines.append(
            f"  HTA {hta['version']}: load {hta.get('load_s', 0):.2f} s, analyses "
            f"{_f(hta.get('analyses_s'), '.2f')} s"
        )
        lines += [f"  HTA error: {e}" for e in hta.get("errors", [])]
        lines += [f"  HTA warning: {w[:160]}" for w in hta.get("warnings", [])]
    lines += [f"  {n}" for n in job.notes]
    for row in job.rows:
        rank = "-" if row["rank"] is None else row["rank"]
        head = f"  -- {Path(row['file']).name}  rank {rank}, {row['gpu_events']} GPU events"
        lines.append(head + (f", reader unit: {row['reader_unit']}" if row["reader_unit"] else ""))
        lines.append(
            f"  {'':<18} {'span ms':>10} {'busy ms':>10} {'idle%':>7} {'compute%':>9} "
            f"{'non-comp%':>9} {'overlap%':>9}"
        )
        scoped = row["raw_scope"] != "all"
        if scoped:
            lines.append(_line("raw (all)", row["raw_all"], "gpu_busy_us"))
        lines.append(_line(f"raw ({row['raw_scope']})", row["raw"], "gpu_busy_us"))
        lines.append(_line("raw (HTA's scope)", row["raw_hta_scope"], "gpu_busy_us"))
        if row["raw_hta_events"]:
            lines.append(_line("raw (+stream ops)", row["raw_hta_events"], "gpu_busy_us"))
        lines.append(_line("HTA", row["hta"], "busy_us"))
        if scoped:
            lines.append(_line("reader (all)", row["reader_all"], "gpu_busy_us"))
        lines.append(_line(f"reader ({row['raw_scope']})", row["reader"], "gpu_busy_us"))
        lines += _extra_lines(row)
        for key, (gap, ok) in row["verdicts"].items():
            name, kind, target = NAMES[key]
            shown = (
                f"{100 * gap:.3f}% (target {100 * target:g}%)"
                if kind == "rel"
                else (f"{gap:.2f} pt (target {target:g} pt)")
            )
            lines.append(f"  {'ok  ' if ok else 'MISS'} {name}: {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="tools/dev/reader_validation/hta_compare.py", description=__doc__)
    parser.add_argument("traces", nargs="+", help="trace files, rank folders or FOLDER/STEM")
    parser.add_argument("--each", action="store_true", help="every file of a folder alone")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write all of it here")
    parser.add_argument("--hta", default=HTA_SPEC, help=f"HTA's package (default {HTA_SPEC})")
    parser.add_argument(
        "--hta-default-steps",
        action="store_true",
        help="let HTA drop the last ProfilerStep, as it does by default",
    )
    parser.add_argument(
        "--hta-exact-times",
        action="store_true",
        help="HTA_DISABLE_NS_ROUNDING=1: HTA keeps fractional microseconds instead of rounding "
        "starts up and ends down",
    )
    parser.add_argument("--no-hta", action="store_true", help="raw and reader only")
    parser.add_argument("--no-reader", action="store_true", help="raw and HTA only")
    parser.add_argument(
        "--repo", type=Path, default=ROOT, help="the checkout whose reader runs (default: this)"
    )
    args = parser.parse_args(argv)
    if args.json and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no folder {args.json.parent} to write it in")
    try:
        jobs = jobs_from(args.traces, args.each)
        for job in jobs:
            job.raw = [raw_reading(f) for f in job.files]
    except (BadInput, OSError, ValueError) as exc:
        parser.error(str(exc).splitlines()[0][:300])
    if not args.no_hta:
        run_hta(jobs, args.hta, args.hta_default_steps, args.hta_exact_times)
    for job in jobs:
        if not args.no_reader:
            run_reader(job, args.repo.resolve())
        job.rows = rows(job)
        print(render(job), flush=True)
    if args.json:
        report = [{"input": j.arg, "hta": j.hta, "notes": j.notes, "rows": j.rows} for j in jobs]
        args.json.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
