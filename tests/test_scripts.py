"""Every script end to end on the CPU at small shapes, eager and compiled: real torch, real
profiler, real torch.compile. What a user relies on: the files appear under the right names,
hold exactly the recorded steps, and show the dispatch chain the posts describe."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import inside, read_trace, run_script, steps

SMALL = {
    "01_matmul_add": (["--size", "16"], "16_bf16_cold_{mode}_cpu", "matmul_add"),
    "02_linear": (
        ["--batch", "8", "--in_dim", "4", "--out_dim", "6"],
        "b8_in4_out6_bf16_{mode}_cpu",
        "linear_fwd",
    ),
    "03_simple_mlp": (
        ["--batch", "2", "--seq", "3", "--dim", "8", "--hidden", "16"],
        "b2_s3_d8_h16_bf16_{mode}_cpu",
        "mlp_fwd",
    ),
}


def run_small(script, tmp_path, *extra):
    argv, tag, annotation = SMALL[script]
    mode = "compile" if "--compile" in extra else "eager"
    rc = run_script(script, *argv, "--traces-dir", str(tmp_path), *extra)
    assert rc == 0
    trace = tmp_path / script / f"{tag.format(mode=mode)}.json"
    assert trace.is_file() and trace.with_suffix(".txt").is_file()
    return read_trace(trace), annotation, trace


def names_in(step, events):
    return [e["name"] for e in inside(step, events)]


@pytest.mark.parametrize("script", list(SMALL))
@pytest.mark.parametrize("mode", ["eager", pytest.param("compile", marks=pytest.mark.slow)])
def test_three_active_steps_each_with_its_annotation(script, mode, tmp_path, capsys):
    extra = ["--compile"] if mode == "compile" else []
    events, annotation, trace = run_small(script, tmp_path, *extra)
    recorded = steps(events)
    # schedule(wait=1, warmup=1, active=3): steps 0 and 1 are dropped, #2..#4 recorded; a cold
    # 01 run records from its first call (wait=0, warmup=0): #0..#2.
    first = 0 if script == "01_matmul_add" else 2
    assert [s["name"] for s in recorded] == [f"ProfilerStep#{i}" for i in range(first, first + 3)]
    for step in recorded:
        assert annotation in names_in(step, events)
        if mode == "compile":
            assert any(n.startswith("Torch-Compiled Region") for n in names_in(step, events))
    out = capsys.readouterr().out
    assert f"trace: {trace}" in out and "relative error" in out
    table = trace.with_suffix(".txt").read_text()
    assert "ProfilerStep*" in table and annotation in table


def test_linear_eager_chain_is_t_then_addmm_with_no_add(tmp_path):
    events, _, _ = run_small("02_linear", tmp_path)
    for step in steps(events):
        names = names_in(step, events)
        linear = next(e for e in inside(step, events) if e["name"] == "aten::linear")
        chain = [e["name"] for e in inside(linear, events)]
        assert chain.index("aten::t") < chain.index("aten::addmm")
        assert "aten::transpose" in chain
        assert "aten::add" not in names


@pytest.mark.slow  # compiles with Inductor
def test_linear_compiled_keeps_addmm_and_drops_the_view_chain(tmp_path):
    events, _, _ = run_small("02_linear", tmp_path, "--compile")
    for step in steps(events):
        names = names_in(step, events)
        assert "aten::addmm" in names
        assert "aten::linear" not in names and "aten::t" not in names


def test_matmul_add_eager_dispatches_mm_then_add(tmp_path):
    events, _, _ = run_small("01_matmul_add", tmp_path)
    for step in steps(events):
        names = names_in(step, events)
        assert names.index("aten::matmul") < names.index("aten::mm") < names.index("aten::add")


def test_mlp_eager_shows_three_linears_gelu_and_mul(tmp_path):
    events, _, _ = run_small("03_simple_mlp", tmp_path)
    for step in steps(events):
        names = names_in(step, events)
        assert names.count("aten::linear") == 3 and names.count("aten::mm") == 3
        assert "aten::gelu" in names and "aten::mul" in names


def test_schedule_overrides_change_the_steps_and_the_name(tmp_path):
    argv, _, _ = SMALL["02_linear"]
    rc = run_script(
        "02_linear",
        *argv,
        "--traces-dir",
        str(tmp_path),
        "--wait",
        "0",
        "--warmup-steps",
        "1",
        "--active",
        "5",
    )
    assert rc == 0
    trace = tmp_path / "02_linear" / "b8_in4_out6_bf16_eager_w0-1-5_cpu.json"
    assert [s["name"] for s in steps(read_trace(trace))] == [
        f"ProfilerStep#{i}" for i in range(1, 6)
    ]


def test_warm_flag_and_dtype_are_in_the_name(tmp_path):
    rc = run_script(
        "01_matmul_add", "--size", "8", "--warmup", "--dtype", "fp32", "--traces-dir", str(tmp_path)
    )
    assert rc == 0
    assert (tmp_path / "01_matmul_add" / "8_fp32_warm_eager_cpu.json").is_file()


def test_gzip_writes_a_trace_perfetto_can_open(tmp_path):
    argv, _, _ = SMALL["02_linear"]
    assert run_script("02_linear", *argv, "--gzip", "--traces-dir", str(tmp_path)) == 0
    trace = tmp_path / "02_linear" / "b8_in4_out6_bf16_eager_cpu.json.gz"
    assert trace.read_bytes()[:2] == b"\x1f\x8b"  # really gzip, not JSON with a .gz name
    assert len(steps(read_trace(trace))) == 3
    assert sorted(p.name for p in trace.parent.iterdir()) == [
        trace.name,
        "b8_in4_out6_bf16_eager_cpu.txt",
    ]


def test_cpu_run_keeps_kineto_quiet(tmp_path, capfd):
    run_small("02_linear", tmp_path)
    captured = capfd.readouterr()
    assert "USDT" not in captured.err + captured.out
    assert "gpuGetDeviceCount" not in captured.err + captured.out


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_cold_run_records_its_very_first_call(warm, tmp_path, monkeypatch):
    """Cold means the first call is in the trace: with the post's wait=1 it ran untraced and
    the first recorded step was as warm as the rest. A warm run warms up, then keeps the
    post's schedule."""
    from tests.helpers import load_script

    lesson = load_script("01_matmul_add")
    calls = []
    real = lesson.matmul_add
    # the float32 reference calls it too, on float32 copies: count the bf16 calls only
    monkeypatch.setattr(lesson, "matmul_add", lambda *a: calls.append(a[0].dtype) or real(*a))
    extra = ["--warmup"] if warm else []
    argv = ["--size", "8", "--traces-dir", str(tmp_path), *extra]
    assert run_script("01_matmul_add", *argv) == 0
    trace = tmp_path / "01_matmul_add" / f"8_bf16_{'warm' if warm else 'cold'}_eager_cpu.json"
    recorded = [s["name"] for s in steps(read_trace(trace))]
    if warm:  # 3 warm-up calls, then wait 1 + warmup 1 + active 3
        assert recorded == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
        assert calls.count(torch.bfloat16) == 3 + 5
    else:  # every call is a recorded step
        assert recorded == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
        assert calls.count(torch.bfloat16) == 3
