"""Measuring: the traffic model, the timing harness, the ceilings cache and --bench (the shape
sweep's bookkeeping: tests/test_sweep.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import shapes
from common.measuring import bench, ceilings, timing, traffic
from tests.helpers import load_script, run_script
from tracereader.analyses import bench as profiled
from tracereader.names.kernel_classes import TENSOR_CORES
from tracereader.trace import load as trace_reader

H200 = Path(__file__).parent / "fixtures" / "h200"
H100_FIXTURES = Path(__file__).parent / "fixtures" / "h100"


def test_fusing_the_geglu_saves_the_posts_intermediate_twice():
    tokens, dim, hidden, bf16 = 64 * 128, 768, 3072, 2
    model = load_script("03_simple_mlp").traffic_model
    eager = model(tokens, dim, hidden, bf16, fused=False)
    fused = model(tokens, dim, hidden, bf16, fused=True)
    # the [8192, 3072] bf16 intermediate (the post's ~50 MB) is no longer written and read back
    assert traffic.total(eager)[1] - traffic.total(fused)[1] == 2 * 50_331_648
    assert traffic.total(eager)[0] == traffic.total(fused)[0]  # the same GEMM FLOPs


POST_ATTENTION = shapes.attention_sizes(SimpleNamespace(batch=8, heads=16, seq=1024, head_dim=64))
MODELS = {  # lesson: (H100 fixture stem, the lesson's traffic model at that shape)
    "01_matmul_add": (
        "4096_bf16_warm",
        lambda m, mode: m.traffic_model(4096, 2, compiled=mode == "compile"),
    ),
    "02_linear": ("b1024_in32_out64_bf16", lambda m, mode: m.traffic_model(1024, 32, 64, 2)),
    "03_simple_mlp": (
        "b64_s128_d768_h3072_bf16",
        lambda m, mode: m.traffic_model(8192, 768, 3072, 2, fused=mode == "compile"),
    ),
    **{  # compiled: the fused softmax
        lesson: (
            "b8_h16_s1024_d64_bf16",
            lambda m, mode: m.traffic_model(POST_ATTENTION, 2, fused=mode == "compile"),
        )
        for lesson in ("04_a_naive_attention", "04_b_inplace_ops_attention")
    },
}


@pytest.mark.parametrize("lesson", list(MODELS))
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_traffic_models_line_up_kernel_for_kernel_with_real_h100_traces(lesson, mode):
    """--bench times each modelled kernel from the trace: the model must name the kernels the
    H100 ran, by class and in order (compiled 01: the copy of b into C, then addmm's GEMM)."""
    stem, build = MODELS[lesson]
    model = build(load_script(lesson), mode)
    trace = trace_reader.load(H100_FIXTURES / lesson / f"{stem}_{mode}.json.gz")
    times = profiled.kernel_times(trace, model)
    assert isinstance(times, list), times  # a string says why the comparison was skipped
    assert len(times) == len(model) and all(t > 0 for t in times)


def test_kernel_floor_picks_the_binding_resource():
    gemm = traffic.gemm("g", 8192, 8192, 8192, 2)
    add = traffic.elementwise("add", 1 << 20, 2, reads=2)
    seconds, by = gemm.floor_s(flops_per_s=700e12, bytes_per_s=4e12)
    assert by == "matrix" and gemm.floor_s(flops_per_s=700e12, bytes_per_s=8e12)[0] == seconds
    seconds, by = add.floor_s(flops_per_s=700e12, bytes_per_s=4e12)
    assert by == "memory" and add.floor_s(flops_per_s=1e12, bytes_per_s=4e12)[0] == seconds


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


def test_interleaved_timing_alternates_and_takes_each_ones_median():
    """Two forwards compared in turn, round after round, so a clock that drifts (a GPU nearing
    its power limit) slows both alike; each gets the median of its own rounds."""
    order, drift = [], [0.0]

    def timer(fn):
        order.append(fn())
        drift[0] += 1.0  # every timing slower than the one before
        seconds = {"ours": 10.0, "theirs": 20.0}[order[-1]] + drift[0]
        return timing.summarize([seconds], "fake")

    pair = timing.time_gpu_interleaved(
        {"ours": lambda: "ours", "theirs": lambda: "theirs"}, rounds=3, timer=timer
    )
    assert order == ["ours", "theirs", "theirs", "ours", "ours", "theirs"]
    # ours at drifts 1, 4, 5 and theirs at 2, 3, 6: medians 10 + 4 and 20 + 3
    assert pair["ours"].median_s == 14.0 and pair["theirs"].median_s == 23.0
    assert pair["ours"].runs == 3 and "interleaved" in pair["ours"].how
    with pytest.raises(ValueError):
        timing.time_gpu_interleaved({}, timer=timer)


def test_timing_harness_keeps_going_until_the_budget():
    now = [0.0]

    def work():
        now[0] += 0.01

    result = timing.time_cpu(work, warmup_s=0.05, budget_s=0.2, min_runs=3, clock=lambda: now[0])
    assert result.runs == 20 and result.median_s == pytest.approx(0.01)


def test_each_phase_timed_from_the_mark_before_it():
    now = [0.0]
    took = {"forward": 0.003, "backward": 0.006, "optimizer": 0.001}

    def step(mark):
        for phase, seconds in took.items():
            now[0] += seconds
            mark(phase)
        now[0] += 1.0  # after the last mark: in no phase

    result = timing.time_phases(step, on_gpu=False, steps=5, clock=lambda: now[0])
    assert list(result) == list(took)  # in the step's order
    assert {p: t.median_s for p, t in result.items()} == pytest.approx(took)
    assert all(t.runs == 5 for t in result.values())


H100 = "NVIDIA H100 80GB HBM3"


class FakeProbes:
    """Stands in for the GPU's measurements: a rate per (ceiling, probe), every call noted."""

    def __init__(self, rates=None, default=1e14):
        self.rates, self.default, self.calls = rates or {}, default, []

    def __call__(self, what, probe):
        self.calls.append((what, probe))
        return self.rates.get((what, probe), self.default)


def test_ceilings_are_measured_per_precision_once_then_cached(tmp_path):
    path = tmp_path / "ceilings.json"
    fake = FakeProbes({("bf16", "4096^3"): 8e14, (ceilings.MEMORY, ceilings.COPY): 3e12})
    first = ceilings.get(H100, "2.11", {ceilings.MEMORY: [], "bf16": []}, fake, path=path)
    # the copy, and the bf16 squares: nothing for the precisions this run does not need
    assert sorted({what for what, _ in fake.calls}) == ["bf16", ceilings.MEMORY]
    assert first["bf16"].per_s == 8e14 and first["bf16"].best == "4096^3"
    assert first[ceilings.MEMORY].per_s == 3e12 and not first["bf16"].cached
    again = ceilings.get(H100, "2.11", {ceilings.MEMORY: [], "bf16": []}, fake, path=path)
    assert len(fake.calls) == 1 + len(ceilings.SQUARES)  # nothing measured twice
    assert again["bf16"].cached and again["bf16"].per_s == 8e14
    # a new precision, a new shape, another torch: measured alone, the rest from the cache
    fake.calls.clear()
    ceilings.get(H100, "2.11", {"bf16": [(1, 8192, 768, 6144)], "fp32": []}, fake, path=path)
    assert fake.calls == [("bf16", "8192x768x6144")] + [
        ("fp32", f"{n}^3") for n in ceilings.SQUARES
    ]
    fake.calls.clear()
    ceilings.get(H100, "2.12", {"bf16": []}, fake, path=path)
    assert len(fake.calls) == len(ceilings.SQUARES)
    keys = json.loads(path.read_text())
    assert f"{H100} | torch 2.11 | fp32" in keys and f"{H100} | torch 2.12 | bf16" in keys


def test_fresh_ceilings_measure_every_needed_probe_again(tmp_path):
    path = tmp_path / "ceilings.json"
    ceilings.get(H100, "2.11", {"fp16": []}, FakeProbes(default=5e14), path=path)
    fake = FakeProbes(default=6e14)
    found = ceilings.get(H100, "2.11", {"fp16": []}, fake, path=path, fresh=True)
    assert len(fake.calls) == len(ceilings.SQUARES) and found["fp16"].per_s == 6e14
    assert not found["fp16"].cached


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2, 3]",
        "42",
        "not json at all",
        f'{{"{H100} | torch 2.11 | bf16": [1]}}',
        f'{{"{H100} | torch 2.11 | bf16": {{"4096^3": {{"per_s": "fast"}}}}}}',
        f'{{"{H100} | torch 2.11 | bf16": {{"4096^3": {{"per_s": -1}}}}}}',
        f'{{"{H100} | torch 2.11 | bf16": {{"4096^3": 7e14}}}}',
    ],
)
def test_a_damaged_ceilings_cache_is_measured_again_and_repaired(content, tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text(content)
    fake = FakeProbes(default=7e14)
    found = ceilings.get(H100, "2.11", {"bf16": []}, fake, path=path)
    assert ("bf16", "4096^3") in fake.calls and found["bf16"].per_s == 7e14
    entry = json.loads(path.read_text())[f"{H100} | torch 2.11 | bf16"]
    assert entry["4096^3"]["per_s"] == 7e14


def test_a_probe_that_cannot_run_leaves_the_others_to_decide(tmp_path):
    path = tmp_path / "ceilings.json"
    fake = FakeProbes({("fp32", "16384^3"): None}, default=5e13)
    found = ceilings.get(H100, "2.11", {"fp32": []}, fake, path=path)
    assert "16384^3" not in found["fp32"].rates and found["fp32"].per_s == 5e13
    nothing = ceilings.get("GPU X", "2.11", {"fp32": []}, lambda *_: None, path=path)
    assert nothing == {}


LINEAR = load_script("02_linear").traffic_model


@pytest.mark.parametrize(
    ("dtype", "tf32", "judged_by"),
    [
        ("bf16", False, "bf16"),
        ("fp16", False, "fp16"),
        ("fp32", False, "fp32"),  # torch's default: float32 matmuls on the CUDA cores
        ("fp32", True, "tf32"),  # allow_tf32 / set_float32_matmul_precision("high")
    ],
)
def test_each_gemm_is_judged_against_the_ceiling_of_its_own_precision(
    dtype, tf32, judged_by, tmp_path
):
    elt = 4 if dtype == "fp32" else 2
    model = LINEAR(8192, 4096, 4096, elt)
    fake = FakeProbes()
    precisions, ceil, _ = bench.judge(
        model, [""], run_dtype=dtype, tf32=tf32, device_name=H100, torch_version="2.11",
        measure_fn=fake, path=tmp_path / "ceilings.json",
    )  # fmt: skip
    assert precisions == [judged_by]
    assert set(ceil) == {ceilings.MEMORY, judged_by}  # only what the run needs was measured
    assert (judged_by, "8192x4096x4096") in fake.calls  # the lesson's own shape among them


def test_the_trace_decides_what_a_gemm_computed_in():
    """04_c's math backend on an H100, bf16 inputs: its GEMMs ran fp32 on the CUDA cores (the
    kernel names say ffma), so they are judged against fp32's ceiling, whatever TF32 says."""
    from common import shapes

    folder = H100_FIXTURES / "04_c_sdpa_attention"
    trace = trace_reader.load(folder / "b8_h16_s1024_d64_bf16_eager_math.json.gz")
    shape = shapes.attention_sizes(SimpleNamespace(batch=8, heads=16, seq=1024, head_dim=64))
    model = load_script("04_c_sdpa_attention").traffic_model(shape, 2, "math")
    named = profiled.named_precisions(trace, model)
    gemms = [n for n, k in enumerate(model) if k.cls == "gemm"]
    for tf32 in (False, True):
        precisions = [
            bench.precision(k, "bf16", named=p, tf32=tf32)
            for k, p in zip(model, named, strict=True)
        ]
        assert {precisions[n] for n in gemms} == {"fp32"}
        assert set(precisions) == {None, "fp32"}  # no bf16 FLOPs in a math run
    # a Tensor-core GEMM of the bf16 MLP: bf16's ceiling
    mlp = trace_reader.load(
        H100_FIXTURES / "03_fused_mlp" / "b64_s128_d768_h3072_bf16_hopper_eager.json.gz"
    )
    fused = load_script("03_fused_mlp").traffic_model(8192, 768, 3072, 2)
    named = profiled.named_precisions(mlp, fused)
    judged = [
        bench.precision(k, "bf16", named=p, tf32=False) for k, p in zip(fused, named, strict=True)
    ]
    assert named == ["", TENSOR_CORES] and judged == ["bf16", "bf16"]


def test_each_ceiling_is_printed_beside_its_datasheet_peak():
    rates = {"8192^3": 700e12, "4096^3": 767e12}
    bf16 = ceilings.Ceiling("bf16", 767e12, rates, "2026-11-24", cached=True)
    line = bf16.describe(H100)
    assert line.startswith("bf16: measured 767 of a 989 TFLOP/s datasheet bf16 peak (78%, H100")
    assert "best of 2 matmuls: 4096^3, 2026-11-24 [cached]" in line
    copy = ceilings.Ceiling(ceilings.MEMORY, 3.01e12, {ceilings.COPY: 3.01e12}, "2026-11-24", False)
    line = copy.describe("NVIDIA H200")
    assert line.startswith("memory: measured 3.01 of a 4.80 TB/s datasheet peak (63%, H200")
    assert ceilings.COPY in line and "[cached]" not in line
    assert "(no datasheet row for this device)" in bf16.describe("Some Future GPU")
    assert "(V100's datasheet has no rate)" in bf16.describe("Tesla V100-SXM2-16GB")


def ceil_rates(ceil):
    return {p: c.per_s for p, c in ceil.items() if p != ceilings.MEMORY}


def test_a_kernel_faster_than_its_ceiling_is_a_measurement_problem_not_a_speed(tmp_path):
    """The issue's H100 run: 02_linear's bf16 [8192, 4096] x [4096, 4096] GEMM at 801.7 TFLOP/s
    against a measured 767; and its fp32 twin, once judged against bf16's ceiling (x15)."""
    model = LINEAR(8192, 4096, 4096, 2)
    fake = FakeProbes({(ceilings.MEMORY, ceilings.COPY): 3.0e12}, default=767e12)
    precisions, ceil, lines = bench.judge(
        model, [""], run_dtype="bf16", tf32=False, device_name=H100, torch_version="2.11",
        measure_fn=fake, path=tmp_path / "ceilings.json",
    )  # fmt: skip
    assert lines[0] == f"ceilings: measured on {H100}, torch 2.11; datasheet beside:"
    assert "bf16: measured 767 of a 989 TFLOP/s" in "\n".join(lines)
    seconds = model[0].flops / 801.7e12
    rates, raised = bench.floor_rates(model, precisions, [seconds], ceil)
    (said,) = raised
    assert "801.7 TFLOP/s (profiled), 105% of the measured bf16 ceiling" in said
    assert bench.NOT_A_CEILING in said
    line = bench.kernel_line(model[0], "bf16", seconds, rates, 3.0e12)
    assert line.endswith("x1.00") and "(bf16, " in line  # never x0.96, never "105%"
    # the whole forward, timed apart, still faster than the floor: said, not printed as a speed
    out, compute_s, _ = bench.roofline(model, precisions, seconds * 0.97, rates, 3.0e12, how="x")
    assert compute_s > seconds * 0.97
    assert f"103% of the bf16 ceiling is {bench.ABOVE}" in out[-1]
    # within the ceiling's own run-to-run spread: at the ceiling, not a measurement problem
    near = model[0].flops / (767e12 * 1.006)
    _, said = bench.floor_rates(model, precisions, [near], ceil)
    assert "at the measured bf16 ceiling (+0.6%" in said[0] and bench.NOT_A_CEILING not in said[0]
    out, _, _ = bench.roofline(model, precisions, near, ceil_rates(ceil), 3.0e12, how="x")
    assert "within its 2% run-to-run spread" in out[-1] and bench.ABOVE not in "\n".join(out)

    fp32 = LINEAR(8192, 4096, 4096, 4)
    fake = FakeProbes({("fp32", "8192x4096x4096"): 51e12}, default=45e12)
    precisions, ceil, _ = bench.judge(
        fp32, [""], run_dtype="fp32", tf32=False, device_name=H100, torch_version="2.11",
        measure_fn=fake, path=tmp_path / "ceilings.json",
    )  # fmt: skip
    seconds = fp32[0].flops / 48e12
    rates, raised = bench.floor_rates(fp32, precisions, [seconds], ceil)
    assert raised == [] and rates == {"fp32": 51e12}
    assert bench.kernel_line(fp32[0], "fp32", seconds, rates, 3.0e12).endswith("x1.06")


def test_bytes_faster_than_the_copy_ceiling_are_explained_by_the_l2_or_flagged():
    add = traffic.elementwise("add", 1 << 20, 2, reads=2)  # 6.3 MB
    floor, _ = add.floor_s(flops_per_s=1e15, bytes_per_s=3e12)
    fits = bench.kernel_line(add, None, floor / 2, {}, 3e12, l2_bytes=50 << 20)
    assert fits.endswith("x0.50: its 6.3 MB fit in the 52 MB L2, so part of it never went to HBM")
    assert bench.kernel_line(add, None, floor / 2, {}, 3e12, l2_bytes=1 << 20).endswith(bench.ABOVE)
    out, _, _ = bench.roofline([add], [None], floor / 2, {}, 3e12, how="one call")
    assert out[0] == "model: no FLOPs, 6.3 MB through HBM (memory 2.1 us)"
    assert "(200% of the copy ceiling)" in out[1] and bench.ABOVE in out[2]


def test_per_kernel_times_from_a_real_trace_match_the_model_in_order():
    trace = trace_reader.load(H200 / "03_simple_mlp" / "b64_s128_d768_h3072_bf16_eager.json.gz")
    mlp_model = load_script("03_simple_mlp").traffic_model
    model = mlp_model(8192, 768, 3072, 2, fused=False)
    times = profiled.kernel_times(trace, model)
    # independently: the non-memset kernels of each step in launch order, median per position
    kernels = [[i.dur for i in step.gpu if i.kind == "kernel"] for step in trace.steps]
    expected = [statistics.median(col) / 1e6 for col in zip(*kernels, strict=True)]
    assert times == pytest.approx(expected)
    assert [k.label for k in model][2:4] == ["gelu(g)", "h * u"]
    assert 30e-6 < times[2] < 34e-6  # the GeLU kernel, ~32 us on the H200
    wrong = mlp_model(8192, 768, 3072, 2, fused=True)
    assert "per-kernel comparison skipped" in profiled.kernel_times(trace, wrong)
    # the classes that do match are still timed: the GEMMs, judged apart from the GeGLU
    partial, (why,) = profiled.matched_times(trace, wrong)
    assert partial[2] is None and why.startswith("the trace has 2 elementwise-like kernels")
    assert [partial[n] for n in (0, 1, 3)] == pytest.approx([times[n] for n in (0, 1, 4)])
    # a profiled step spans from its CPU start to its last kernel's end
    assert 250e-6 < profiled.profiled_step_s(trace) < 1e-3


def test_bench_flag_on_the_cpu(tmp_path, capsys):
    assert run_script("02_linear", "--batch", "64", "--bench", "--traces-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "bench (profiler detached):" in out and "runs, host clock" in out
    assert "GFLOP/s on the CPU" in out
    # a ratio where it makes sense; on a busy machine the forward can outlast the profiled step
    assert "x the benched forward" in out or "less than the benched forward" in out
    assert "0.0x" not in out


def test_a_ratio_keeps_three_significant_digits():
    assert [bench.ratio(r) for r in (0.00412, 0.04, 0.5, 1.04, 4.667, 23.44, 231.9)] == [
        "0.00412x", "0.0400x", "0.500x", "1.04x", "4.67x", "23.4x", "232x",
    ]  # fmt: skip


def test_a_benched_forward_longer_than_a_profiled_step_on_a_cpu_is_said_to_be_noise():
    """02 on a busy CPU: "a profiled step took 174.0 us, 0.0x the benched forward" (the
    forward benched at tens of ms). The step contains the forward: no ratio, the reason."""
    line = bench.profiler_line(174e-6, 45e-3, on_gpu=False, forward="benched forward")
    assert line.startswith(
        "profiler: a profiled step took 174.0 us, less than the benched forward (45.0 ms)"
    )
    assert "busy" in line and "0.0" not in line.split("(45.0 ms)")[1]
    quiet = bench.profiler_line(224.2e-6, 48e-6, on_gpu=False, forward="benched forward")
    assert quiet == "profiler: a profiled step took 224.2 us, 4.67x the benched forward"
    # on a GPU the one-call forward runs after an L2 flush: a warm step may be shorter
    gpu = bench.profiler_line(5e-6, 2e-3, on_gpu=True, forward="forward")
    assert gpu == "profiler: a profiled step took 5.0 us, 0.00250x the forward"


def test_profiled_gpu_work_is_counted_once_not_the_annotations_over_it():
    from types import SimpleNamespace

    import torch

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [
        SimpleNamespace(name="sweep_fwd", device_type=cuda, is_user_annotation=True),
        SimpleNamespace(name="nvjet_gemm", device_type=cuda, is_user_annotation=False),
        SimpleNamespace(name="Memset (Device)", device_type=cuda, is_user_annotation=False),
        SimpleNamespace(name="aten::mm", device_type=cpu, is_user_annotation=False),
    ]
    assert [e.name for e in timing.gpu_work(events)] == ["nvjet_gemm", "Memset (Device)"]


def test_the_tuners_compute_floor_is_beaten_by_no_gemm_timed_beside_it():
    """The fused MLP's floor takes the best rate of the passes (here the down GEMM's, as in the
    H100 trace: 750 TFLOP/s against 660 for the 8192^3 matmul), not the square's."""
    from tests.test_fused_mlp import load_tuner

    m, dim, hidden = 8192, 768, 3072
    gate_up, down = 2 * m * dim * 2 * hidden, 2 * m * hidden * dim
    flops = {"8192^3": 2 * 8192**3, "gate+up": gate_up, "fused": gate_up, "down": down}
    median_us = {"8192^3": 1666.0, "gate+up": 117.3, "fused": 106.3, "down": 51.5}
    floor_us, lines = load_tuner().compute_floor(gate_up + down, flops, median_us, H100, "bf16")
    for what, n in flops.items():  # each GEMM's time >= its FLOPs at the floor's rate
        assert median_us[what] >= n / (gate_up + down) * floor_us * (1 - 1e-12)
    assert "the best rate measured (down)" in lines[-1]
    assert "(67% of H100 SXM's datasheet bf16 peak)" in lines[0]
