"""Measuring: the traffic model, the timing harness, the ceilings cache, --bench, and the shape
sweep's bookkeeping (recompile counts read from Dynamo, for real, on the CPU)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from common import bench, ceilings, timing, trace_reader, traffic
from tests.helpers import load_script, run_script

H200 = Path(__file__).parent / "fixtures" / "h200"


def test_traffic_model_exact_bytes_for_the_posts_mlp():
    tokens, dim, hidden, bf16 = 64 * 128, 768, 3072, 2
    model = load_script("03_simple_mlp").traffic_model
    eager = model(tokens, dim, hidden, bf16, fused=False)
    fused = model(tokens, dim, hidden, bf16, fused=True)
    # gate: x [8192, 768] + w [768, 3072] + out [8192, 3072] = 33,816,576 elements, 2 bytes each
    assert eager[0].bytes == 67_633_152 and eager[0].flops == 2 * 8192 * 768 * 3072
    # gelu reads g, writes h; mul reads h and u, writes m: 5 x [8192, 3072] bf16
    assert [k.bytes for k in eager[2:4]] == [100_663_296, 150_994_944]
    assert fused[2].bytes == 150_994_944  # reads g and u, writes m
    intermediate = 8192 * 3072 * 2
    assert intermediate == 50_331_648  # the post's "around 50 MB"
    assert traffic.total(eager)[1] - traffic.total(fused)[1] == 2 * intermediate
    assert traffic.total(eager)[0] == traffic.total(fused)[0] == 3 * 2 * 8192 * 768 * 3072


def test_traffic_model_matmul_add_and_linear():
    n = 64
    model = load_script("01_matmul_add").traffic_model
    eager = model(n, 2, compiled=False)
    compiled = model(n, 2, compiled=True)
    assert [k.bytes for k in eager] == [3 * n * n * 2, 3 * n * n * 2]
    assert [k.cls for k in compiled] == ["memcpy", "gemm"]
    assert [k.bytes for k in compiled] == [2 * n * n * 2, 4 * n * n * 2]  # C is read back
    (gemm,) = load_script("02_linear").traffic_model(1024, 32, 64, 2)
    assert gemm.bytes == (1024 * 32 + 32 * 64 + 1024 * 64 + 64) * 2


def test_kernel_floor_picks_the_binding_resource():
    gemm = traffic.gemm("g", 8192, 8192, 8192, 2)
    seconds, by = gemm.floor_s(flops_per_s=700e12, bytes_per_s=4e12)
    assert by == "matrix" and seconds == pytest.approx(2 * 8192**3 / 700e12)
    add = traffic.elementwise("add", 1 << 20, 2, reads=2)
    assert add.floor_s(flops_per_s=700e12, bytes_per_s=4e12) == (3 * 2 * (1 << 20) / 4e12, "memory")


def test_timing_harness_median_and_percentiles_on_a_controlled_clock():
    durations = [5.0, 1.0, 2.0, 3.0, 4.0, 9.0, 6.0, 7.0, 8.0, 10.0]  # seconds, one per call
    now = [0.0]
    calls = []

    def clock():
        return now[0]

    def work():
        calls.append(1)
        if len(calls) > 1:  # the first call is the untimed warm-up
            now[0] += durations[len(calls) - 2]

    result = timing.time_cpu(work, warmup_s=0, budget_s=0, min_runs=10, clock=clock)
    assert result.runs == 10 and len(calls) == 11
    assert result.median_s == 5.5
    assert result.p20_s == pytest.approx(2.8)  # numpy's linear interpolation: 1+0.2*9 = 2.8th
    assert result.p80_s == pytest.approx(8.2)


def test_timing_harness_keeps_going_until_the_budget():
    now = [0.0]

    def work():
        now[0] += 0.01

    result = timing.time_cpu(work, warmup_s=0.05, budget_s=0.2, min_runs=3, clock=lambda: now[0])
    assert result.runs == 20 and result.median_s == pytest.approx(0.01)


def test_ceilings_are_measured_once_then_cached(tmp_path):
    path = tmp_path / "ceilings.json"
    measured = []

    def measure():
        measured.append(1)
        return ceilings.Ceilings(4.2e12, 7.0e14, "measured in a test")

    first, cached = ceilings.get("GPU X | torch 9", measure, path=path)
    assert not cached and first.bytes_per_s == 4.2e12
    second, cached = ceilings.get("GPU X | torch 9", measure, path=path)
    assert cached and second == first and len(measured) == 1
    ceilings.get("GPU X | torch 9", measure, path=path, fresh=True)
    ceilings.get("GPU Y | torch 9", measure, path=path)
    assert len(measured) == 3


def test_per_kernel_times_from_a_real_trace_match_the_model_in_order():
    trace = trace_reader.load(H200 / "03_simple_mlp" / "b64_s128_d768_h3072_bf16_eager.json.gz")
    mlp_model = load_script("03_simple_mlp").traffic_model
    model = mlp_model(8192, 768, 3072, 2, fused=False)
    times = bench.kernel_times(trace, model)
    # independently: the non-memset kernels of each step in launch order, median per position
    kernels = [[i.dur for i in step.gpu if i.kind == "kernel"] for step in trace.steps]
    expected = [statistics.median(col) / 1e6 for col in zip(*kernels, strict=True)]
    assert times == pytest.approx(expected)
    assert [k.label for k in model][2:4] == ["gelu(g)", "h * u"]
    assert 30e-6 < times[2] < 34e-6  # the GeLU kernel, ~32 us on the H200
    wrong = mlp_model(8192, 768, 3072, 2, fused=True)
    assert "per-kernel comparison skipped" in bench.kernel_times(trace, wrong)
    # a profiled step spans from its CPU start to its last kernel's end
    assert 250e-6 < bench.profiled_step_s(trace) < 1e-3


def test_bench_flag_on_the_cpu(tmp_path, capsys):
    assert run_script("02_linear", "--batch", "64", "--bench", "--traces-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "bench (profiler detached):" in out and "runs, host clock" in out
    assert "GFLOP/s on the CPU" in out and "x the benched forward" in out


SWEEP = ["--dim", "8", "--hidden", "16", "--hidden-change", "32"]


def read_rows(folder: Path) -> list[dict]:
    (path,) = folder.glob("03_shape_sweep/*.csv")
    return list(csv.DictReader(path.open()))


def test_sweep_counts_recompiles_from_dynamo(tmp_path, capsys):
    rc = run_script(
        "03_shape_sweep",
        "--shapes",
        "2x4,3x4,4x4",
        *SWEEP,
        "--variants",
        "eager,compile,compile-static,compile-dynamic,mark-dynamic",
        "--traces-dir",
        str(tmp_path),
    )
    assert rc == 0
    compiles = {}
    for row in read_rows(tmp_path):
        compiles.setdefault(row["variant"], []).append(int(row["compiles"]))
        if row["variant"] != "eager":
            assert row["ran_compiled"] == "True"
        assert float(row["rel_err"]) < 2e-2
    # shapes: 2x4, 3x4, 4x4 at hidden 16, then 4x4 at hidden 32 (a new module)
    assert compiles == {
        "eager": [0, 0, 0, 0],
        "compile": [1, 1, 0, 1],  # automatic dynamic after the 2nd shape
        "compile-static": [1, 1, 1, 1],
        "compile-dynamic": [1, 0, 0, 1],
        "mark-dynamic": [1, 0, 0, 1],
    }
    out = capsys.readouterr().out
    assert out.count("[") >= 20 and "[20/20] mark-dynamic" in out  # a progress line per shape
    png = next((tmp_path / "03_shape_sweep").glob("*.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_flags_rows_that_fell_back_to_eager_at_the_recompile_limit(tmp_path, capsys):
    rc = run_script(
        "03_shape_sweep",
        "--shapes",
        "2x4,3x4,4x4",
        "--dim",
        "8",
        "--hidden",
        "16",
        "--hidden-change",
        "0",
        "--variants",
        "compile-static",
        "--recompile-limit",
        "2",
        "--traces-dir",
        str(tmp_path),
    )
    assert rc == 0
    rows = read_rows(tmp_path)
    assert [(r["compiles"], r["limit_hit"], r["ran_compiled"]) for r in rows] == [
        ("1", "False", "True"),
        ("1", "False", "True"),
        ("0", "True", "False"),
    ]
    out = capsys.readouterr().out
    assert "RECOMPILE LIMIT HIT: ran eagerly" in out
    assert "WARNING: 1 'compiled' row(s) ran eagerly (recompile limit 2)" in out
    import torch

    assert torch._dynamo.config.recompile_limit == 8  # the sweep's setting did not leak


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", ""], "the shape list is empty"),
        (["--shapes", "0x128"], "must be greater than 0"),
        (["--shapes", "64"], "is not BATCHxSEQ"),
        (["--variants", "eager,fast"], "unknown or no variants ['fast']"),
        (["--dim", "-1"], "must be greater than 0"),
    ],
)
def test_sweep_bad_input(argv, message, tmp_path, capsys):
    assert run_script("03_shape_sweep", *argv, "--traces-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_sweep_liger_needs_a_gpu(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert run_script("03_shape_sweep", "--variants", "liger", "--traces-dir", str(tmp_path)) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_a_stopped_sweep_keeps_the_rows_it_measured(tmp_path, monkeypatch, capsys):
    real, calls = timing.time_cpu, []

    def interrupt_the_second_row(fn, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(fn, **kwargs)

    monkeypatch.setattr(timing, "time_cpu", interrupt_the_second_row)
    argv = ["--shapes", "2x4,3x4", *SWEEP, "--variants", "eager", "--traces-dir", str(tmp_path)]
    assert run_script("03_shape_sweep", *argv) == 130
    rows = read_rows(tmp_path)
    assert [(r["variant"], r["batch"]) for r in rows] == [("eager", "2")]
    (table,) = (tmp_path / "03_shape_sweep").glob("*.txt")
    assert "STOPPED after 1 of 3 rows" in table.read_text()
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"


def test_sweep_counts_gpu_work_once_not_the_annotations_over_it():
    from types import SimpleNamespace

    import torch

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [
        SimpleNamespace(name="sweep_fwd", device_type=cuda, is_user_annotation=True),
        SimpleNamespace(name="nvjet_gemm", device_type=cuda, is_user_annotation=False),
        SimpleNamespace(name="Memset (Device)", device_type=cuda, is_user_annotation=False),
        SimpleNamespace(name="aten::mm", device_type=cpu, is_user_annotation=False),
    ]
    sweep = load_script("03_shape_sweep")
    assert [e.name for e in sweep.gpu_work(events)] == ["nvjet_gemm", "Memset (Device)"]
