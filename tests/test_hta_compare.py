"""tools/dev/reader_validation/hta_compare.py: its own reading of the raw events (the referee), its
handling of the reader's JSON contract and of bad input, and HTA itself on real traces (skipped when
uv cannot install HTA from its cache)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.helpers import EXTERNAL_TRACES
from tracereader.commands import explain

ROOT = Path(__file__).resolve().parent.parent
TP2 = ROOT / "tests/fixtures/h200x2/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager"


@cache
def tool():
    from tools.dev.reader_validation import hta_compare

    return hta_compare


def kernel(name: str, ts: float, dur: float, stream: int, corr: int) -> list[dict]:
    """A GPU event and the runtime call that launched it."""
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": ts - 5, "dur": 3, "args": {"correlation": corr}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
         "dur": dur, "args": {"stream": stream, "correlation": corr}},
    ]  # fmt: skip


def write(tmp_path: Path, events: list[dict], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_busy_time_is_the_union_of_streams_not_their_sum(tmp_path):
    # two GEMMs overlapping by 5 us on two streams, then a memset after a 10 us gap
    events = kernel("gemm_a", 100, 10, 7, 1) + kernel("gemm_b", 105, 10, 8, 2)
    events += kernel("Memset (Device)", 125, 5, 7, 3)
    reading = tool().raw_reading(write(tmp_path, events))["all"]
    assert reading["gpu_busy_us"] == pytest.approx(20)  # not 25
    assert reading["span_us"] == pytest.approx(30)
    assert reading["idle_pct"] == pytest.approx(100 * 10 / 30)
    assert reading["non_compute_pct"] == pytest.approx(100 * 5 / 30)  # the memset


def test_overlap_is_the_share_of_communication_hidden_under_compute(tmp_path):
    events = kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 100, 20, 9, 1)
    events += kernel("gemm", 110, 30, 7, 2)
    reading = tool().raw_reading(write(tmp_path, events))["all"]
    assert reading["comm_us"] == pytest.approx(20)
    assert reading["comm_overlap_pct"] == pytest.approx(50)


def test_collective_time_per_kind_and_htas_idle_split_per_stream(tmp_path):
    # stream 7: a GEMM, one 10 us later launched before it ended (kernel wait: under 30 us),
    # one 40 us later (other), one launched after the previous ended (host wait, 100 us);
    # stream 9: an all-gather and a reduce-scatter, 60 us apart (other)
    events = kernel("gemm", 100, 10, 7, 1) + kernel("gemm", 120, 10, 7, 2)
    events += kernel("gemm", 170, 10, 7, 3) + kernel("gemm", 290, 10, 7, 4)
    events += kernel("ncclDevKernel_AllGather_RING_LL", 100, 20, 9, 5)
    events += kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 180, 30, 9, 6)
    for call in events[::2]:
        call["ts"] = 50  # every runtime call queued early...
    events[6]["ts"] = 200  # ...but the last GEMM's, after the previous GEMM's end (180)
    reading = tool().raw_reading(write(tmp_path, events))["all"]
    assert reading["collectives_us"] == {"all-gather": 20, "reduce-scatter": 30}
    assert reading["idle_split_us"] == {"host_wait": 110, "kernel_wait": 10, "other": 100}


def test_htas_events_add_the_host_ops_that_carry_a_stream(tmp_path):
    """Inductor records its launcher op as a cpu_op with "stream": 0; HTA counts it as GPU
    compute. The referee shows HTA's scope with it added: here it widens the span."""
    events = kernel("gemm", 100, 10, 7, 1)
    events.append({"ph": "X", "cat": "cpu_op", "name": "triton_poi_fused_0", "pid": 1, "tid": 1,
                   "ts": 60, "dur": 20, "args": {"stream": 0}})  # fmt: skip
    reading = tool().raw_reading(write(tmp_path, events))
    assert reading["hta"]["span_us"] == pytest.approx(10)
    assert reading["hta_events"]["span_us"] == pytest.approx(50)
    assert reading["hta_events"]["compute_pct"] == pytest.approx(60)


def test_a_folder_of_several_runs_is_one_job_per_run(tmp_path):
    """A lesson's trace folder keeps every variant's rank files: one job per STEM, HTA given
    those files only (reading the folder would give it two files per rank)."""
    for stem in ("eager", "compile"):
        for rank in (0, 1):
            write(tmp_path, kernel("gemm", 100, 10, 7, 1), f"{stem}_rank{rank}.json")
    jobs = tool().jobs_from([str(tmp_path)], each=False)
    assert [Path(j.arg).name for j in jobs] == ["compile", "eager"]
    assert [f.name for f in jobs[1].files] == ["eager_rank0.json", "eager_rank1.json"]
    assert jobs[1].hta_arg.split("::") == [str(f.resolve()) for f in jobs[1].files]
    (tmp_path / "compile_rank0.json").unlink()
    (tmp_path / "compile_rank1.json").unlink()
    (job,) = tool().jobs_from([str(tmp_path)], each=False)  # one run: the folder, as before
    assert job.hta_arg == str(tmp_path.resolve())


def two_steps_and_a_late_kernel() -> list[dict]:
    """Two ProfilerSteps (50-140, 150-240 us), a 10 us GEMM inside the first and one launched
    after the last step (at 400 us)."""
    steps = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": 50 + 100 * i, "dur": 90}
        for i in range(2)
    ]  # fmt: skip
    return steps + kernel("gemm", 100, 10, 7, 1) + kernel("gemm", 400, 10, 7, 2)


def test_htas_scope_drops_work_launched_after_the_last_step(tmp_path):
    events = two_steps_and_a_late_kernel()
    reading = tool().raw_reading(write(tmp_path, events))
    assert reading["all"]["gpu_busy_us"] == pytest.approx(20)
    assert reading["steps"]["gpu_busy_us"] == pytest.approx(10)
    assert reading["hta"]["gpu_busy_us"] == pytest.approx(10)


def contract() -> dict:
    window = dict.fromkeys(tool().WINDOW_KEYS, 1.0)
    trace = {"path": "t.json", "rank": 0, "device": {"name": "x", "source": "kernels"}}
    return {"schema_version": 2, "traces": [{**trace, "unit": "step", "window": window}]}


def test_the_readers_contract_is_checked_key_by_key():
    check = tool().check_reader
    assert check(contract()) is None
    data = contract()
    del data["traces"][0]["window"]["comm_overlap_pct"]
    assert check(data) == "reader JSON lacks key traces[].window.comm_overlap_pct"
    data = contract()
    del data["traces"][0]["unit"]
    assert check(data) == "reader JSON lacks key traces[].unit"
    assert "schema_version 2" in check({"path": "t.json", "steps": []})


def run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "tools/dev/reader_validation/hta_compare.py"), *argv]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd)


def test_a_missing_trace_is_one_line_and_exit_2_and_no_file(tmp_path):
    out = tmp_path / "report.json"
    proc = run(str(tmp_path / "nope.json"), "--json", str(out), "--no-hta", "--no-reader")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "nope.json" in proc.stderr
    assert not out.exists()


def test_a_rank_stem_reads_every_rank_against_the_raw_union(tmp_path):
    out = tmp_path / "report.json"
    proc = run(str(TP2), "--json", str(out), "--no-hta", "--no-reader")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())[0]["rows"]
    assert [r["rank"] for r in rows] == [0, 1]
    assert all(r["raw"]["gpu_busy_us"] > 0 and r["raw"]["comm_us"] > 0 for r in rows)


@cache
def hta_installed() -> bool:
    if not shutil.which("uv"):
        return False
    argv = ["uv", "run", "--offline", "--no-project", "--with", tool().HTA_SPEC]
    probe = subprocess.run([*argv, "python", "-c", "import hta"], capture_output=True)
    return probe.returncode == 0


needs_hta = pytest.mark.skipif(
    "not hta_installed()", reason="HTA cannot be installed offline here (uv's cache lacks it)"
)


@pytest.mark.slow
@needs_hta
def test_hta_with_exact_times_agrees_with_the_raw_union(tmp_path):
    """Our restatement of HTA's definitions is HTA's: with its rounding switched off, HTA's
    busy time, breakdown and overlap equal the referee's on both ranks."""
    out = tmp_path / "report.json"
    proc = run(str(TP2), "--json", str(out), "--no-reader", "--hta-exact-times")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())[0]["rows"]
    assert len(rows) == 2
    for row in rows:
        hta, raw = row["hta"], row["raw_hta_scope"]
        # float64 timestamps of ~4e12 us carry ~0.5 ns of noise per event
        assert hta["busy_us"] == pytest.approx(raw["gpu_busy_us"], abs=0.05)
        for key in ("idle_pct", "compute_pct", "non_compute_pct", "comm_overlap_pct"):
            assert hta[key] == pytest.approx(raw[key], abs=0.01)


@pytest.mark.slow
@needs_hta
def test_htas_rounding_refuses_a_trace_with_submicrosecond_kernels(tmp_path):
    """HTA rounds starts up and ends down to whole microseconds: a 0.768 us memset gets a
    negative duration and its temporal breakdown fails an assertion. That is HTA's, not ours."""
    out = tmp_path / "report.json"
    trace = ROOT / "tests/fixtures/h200/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz"
    proc = run(str(trace), "--json", str(out), "--no-reader")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())[0]
    assert any(e.startswith("temporal breakdown: AssertionError") for e in report["hta"]["errors"])
    assert report["rows"][0]["raw"]["gpu_busy_us"] > 0


@pytest.mark.parametrize(  # the second: 5 s on two busy cores
    "name",
    ["hta/trace_compare/base.json.gz",
     pytest.param("hta/negative_queue_rank0.json.gz", marks=pytest.mark.slow)],
)  # fmt: skip
def test_the_readers_steps_window_is_the_work_the_steps_launched(name, capsys):
    """Traces with GPU work outside their steps (warm-up before the schedule): the reader's
    `window` is the whole trace's union and its `steps_window` the union of what the steps
    launched, each equal to the referee's in the same scope; HTA reads the second."""
    path = EXTERNAL_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is absent (other projects' traces, not committed)")
    raw = tool().raw_reading(path)
    assert explain.main([str(path), "--json"]) == 0
    (trace,) = json.loads(capsys.readouterr().out)["traces"]
    assert raw["steps"]["gpu_busy_us"] < 0.9 * raw["all"]["gpu_busy_us"]  # the scopes differ
    for ours, scope in (("window", "all"), ("steps_window", "steps")):
        for key in ("span_us", "gpu_busy_us", "idle_pct", "compute_pct", "non_compute_pct"):
            assert trace[ours][key] == pytest.approx(raw[scope][key], rel=1e-6), (ours, key)
    assert explain.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "the steps' GPU work, as HTA reads it" in out and len(out.splitlines()) <= 80


def test_rows_set_the_readers_steps_window_against_the_raw_steps(tmp_path):
    """Like with like: where the reader reads steps, its steps' window is the row checked
    against the raw steps' union, and its whole-trace window against the raw whole trace."""
    events = two_steps_and_a_late_kernel()
    path = write(tmp_path, events)
    job = tool().Job(str(path), [path], str(path))
    job.raw = [tool().raw_reading(path)]
    reading = contract()
    reading["traces"][0]["window"]["gpu_busy_us"] = 20.0
    reading["traces"][0]["steps_window"] = {**reading["traces"][0]["window"], "gpu_busy_us": 10.0}
    job.reader = reading
    (row,) = tool().rows(job)
    assert row["raw_scope"] == "steps" and row["reader"]["gpu_busy_us"] == 10.0
    assert row["verdicts"]["reader_busy_vs_raw"] == (0.0, True)
    assert row["verdicts"]["reader_all_busy_vs_raw"] == (0.0, True)


def test_rows_set_the_readers_collectives_and_idle_split_against_htas(tmp_path):
    """Per kind, the reader's summed time over its steps against HTA's time per NCCL kernel
    name (in points of HTA's span); the reader's idle split summed over its steps."""
    path = write(tmp_path, two_steps_and_a_late_kernel())
    job = tool().Job(str(path), [path], str(path))
    job.raw = [tool().raw_reading(path)]
    reading = contract()
    trace = reading["traces"][0]
    trace["steps_window"] = trace["window"]
    trace["summary"] = {"collectives": {"by_kind": [{"kind": "all-gather", "total_us": 30.0}]}}
    idle = {"host_wait_us": 5.0, "kernel_wait_us": 0.0, "other_us": 1.0}
    trace["steps"] = [{"idle_us": idle}, {"idle_us": idle}]
    job.reader = reading
    names = {"ncclDevKernel_AllGather_RING_LL": 20.0, "ncclDevKernel_AllGather_RING_LL(x)": 8.0}
    job.hta = {"ranks": [{"file": str(path.resolve()), "span_us": 100.0, "comm_by_name_us": names}]}
    (row,) = tool().rows(job)
    assert row["hta_collectives_us"] == {"all-gather": 28.0}
    assert row["reader_idle_split_us"] == {"host_wait": 10.0, "kernel_wait": 0.0, "other": 2.0}
    assert row["verdicts"]["collectives_vs_hta"] == (pytest.approx(2.0), True)
