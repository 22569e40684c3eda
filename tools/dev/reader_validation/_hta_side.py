"""Holistic Trace Analysis' numbers for traces, as JSON: the helper of
tools/dev/reader_validation/hta_compare.py and tools/dev/reader_validation/trace_bench.py. It runs
in HTA's own environment, never in the project's:

    uv run --no-project --with holistictraceanalysis==0.5.0 \
        python -m tools.dev.reader_validation._hta_side --out hta.json TRACE_OR_FOLDER...

A file is read as one trace (HTA names its rank from the file's first `"rank": N`), a folder as
HTA reads a job (every .json/.gz directly inside it), `A::B::...` as one job of those files.
Per input: HTA's load time (parse, align, filter: `TraceAnalysis(...)`) and the time of the
analyses below, then per rank the temporal breakdown, the comm/compute overlap, the time of
each communication kernel name (the kernel breakdown, nothing grouped into "others") and the
idle time breakdown summed over streams.
Whatever HTA raises is recorded as that input's error; its warnings are kept, not printed
(HTA logs to stdout). Imports nothing from the project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()[:300]
        if not text.startswith(NOISE) and text not in self.messages:
            self.messages.append(text)


# HTA's progress lines, logged as warnings: timings, not findings
NOISE = ("Parsed ", "Overall parsing", "leaving ")


def _num(value) -> float | None:
    """A float for JSON; NaN (HTA's 0/0, e.g. overlap without communication) becomes null."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def analyse(path: str, include_last_step: bool) -> dict:
    from hta.trace_analysis import TraceAnalysis

    out: dict = {"input": path, "ranks": [], "warnings": [], "errors": []}
    collect = _Collect()
    for name in ("hta", ""):  # HTA's logging.config sends both to stdout
        logging.getLogger(name).handlers = [collect]
    start = time.perf_counter()
    try:
        if os.path.isdir(path):
            analysis = TraceAnalysis(trace_dir=path, include_last_profiler_step=include_last_step)
        else:
            files = [os.path.abspath(p) for p in path.split("::")]
            analysis = TraceAnalysis(
                trace_files=files,
                trace_dir=os.path.dirname(files[0]),
                include_last_profiler_step=include_last_step,
            )
    except BaseException as exc:  # noqa: BLE001 (what HTA refuses is the finding)
        out["errors"].append(f"load: {_error(exc)}")
        out["load_s"] = time.perf_counter() - start
        out["warnings"] = collect.messages
        return out
    out["load_s"] = time.perf_counter() - start
    files = analysis.t.trace_files
    rows = {rank: {"rank": rank, "file": os.path.abspath(files[rank])} for rank in files}

    start = time.perf_counter()
    try:
        df = analysis.get_temporal_breakdown(visualize=False)
        for r in df.to_dict("records"):
            span = _num(r["kernel_time(us)"])
            idle = _num(r["idle_time(us)"])
            rows[int(r["rank"])].update(
                span_us=span,
                busy_us=None if span is None or idle is None else span - idle,
                idle_us=idle,
                compute_us=_num(r["compute_time(us)"]),
                non_compute_us=_num(r["non_compute_time(us)"]),
                idle_pct=_num(r["idle_time_pctg"]),
                compute_pct=_num(r["compute_time_pctg"]),
                non_compute_pct=_num(r["non_compute_time_pctg"]),
            )
    except BaseException as exc:  # noqa: BLE001
        out["errors"].append(f"temporal breakdown: {_error(exc)}")
    try:
        df = analysis.get_comm_comp_overlap(visualize=False)
        for r in df.to_dict("records"):
            rows[int(r["rank"])]["comm_overlap_pct"] = _num(r["comp_comm_overlap_pctg"])
    except BaseException as exc:  # noqa: BLE001
        out["errors"].append(f"comm/comp overlap: {_error(exc)}")
    try:
        # every kernel by name (no "others" row): HTA's time per communication kernel name
        _, df = analysis.get_gpu_kernel_breakdown(
            visualize=False, duration_ratio=1.0, num_kernels=10**9, include_memory_kernels=False
        )
        for r in df[df["kernel_type"] == "COMMUNICATION"].to_dict("records"):
            by_name = rows[int(r["rank"])].setdefault("comm_by_name_us", {})
            by_name[str(r["name"])] = _num(r["sum (us)"])
    except BaseException as exc:  # noqa: BLE001
        out["errors"].append(f"kernel breakdown: {_error(exc)}")
    for rank in rows:
        try:
            df, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
            by_kind = df.groupby("idle_category")["idle_time"].sum()
            rows[rank]["idle_breakdown_us"] = {k: _num(v) for k, v in by_kind.items()}
            rows[rank]["idle_streams"] = int(df["stream"].nunique())
        except BaseException as exc:  # noqa: BLE001
            out["errors"].append(f"idle time breakdown, rank {rank}: {_error(exc)}")
    out["analyses_s"] = time.perf_counter() - start
    out["ranks"] = [rows[rank] for rank in sorted(rows)]
    out["warnings"] = collect.messages
    return out


def main() -> int:
    # argparse itself: this file runs in HolisticTraceAnalysis's own environment, without
    # the project (hta_compare starts it there), so the project's Parser is out of reach
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="trace files or folders of rank traces")
    parser.add_argument("--out", required=True, help="write the JSON here")
    parser.add_argument(
        "--exclude-last-step",
        action="store_true",
        help="HTA's default: drop the last ProfilerStep (the callers include it, to compare "
        "the same window as the reader's)",
    )
    args = parser.parse_args()
    from hta.version import __version_tuple__

    results = []
    with contextlib.redirect_stdout(sys.stderr):  # anything HTA prints stays off our JSON
        for path in args.inputs:
            results.append(analyse(path, include_last_step=not args.exclude_last_step))
    data = {"hta_version": ".".join(map(str, __version_tuple__)), "inputs": results}
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1, allow_nan=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
