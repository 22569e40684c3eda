"""Part 3's lessons end to end on the CPU at small shapes: real torch, real profiler, real
torch.compile. The files appear under the right names, hold exactly the recorded steps, and
show the dispatch chains the lessons promise; refusals are one line, exit 2, nothing written.
Plus the pieces a GPU run relies on that a CPU can still check: the traffic models, the memory
estimate, and the comparison table read from kernel events."""

from __future__ import annotations

import gzip
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from common import cli, shapes
from common import sdpa as sdpa_plumbing
from common.measuring import traffic
from tests.helpers import inside, load_script, read_trace, run_script, steps
from tracereader.analyses import sdpa as sdpa_reading
from tracereader.judge import expectations, findings
from tracereader.render import sdpa as sdpa_table
from tracereader.trace.load import load as load_trace

SMALL = ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"]
TAG = "b1_h2_s16_d8_bf16"
RECORDED = ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]


def run_ok(script, tmp_path, *extra):
    assert run_script(script, *SMALL, "--traces-dir", str(tmp_path), *extra) == 0


def recorded_steps(trace, annotation="attn_fwd"):
    """The trace's steps, each as (step event, its events), checked to be exactly #2..#4 with
    the lesson's annotation in each."""
    events = read_trace(trace)
    found = steps(events)
    assert [s["name"] for s in found] == RECORDED
    out = []
    for step in found:
        within = inside(step, events)
        assert annotation in [e["name"] for e in within]
        out.append((step, within))
    return events, out


def nested(outer, name, events):
    return [e for e in inside(outer, events) if e["name"] == name]


def files_in(tmp_path):
    return sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())


# --- 04_a and 04_b: the naive attention, out of place and in place --------------------------


# compiled: Inductor's first compile in the process, ~10 s on two busy cores: slow
@pytest.mark.parametrize("mode", ["eager", pytest.param("compile", marks=pytest.mark.slow)])
@pytest.mark.parametrize("script", ["04_a_naive_attention", "04_b_inplace_ops_attention"])
def test_naive_lessons_write_the_recorded_steps(script, mode, tmp_path, capsys):
    run_ok(script, tmp_path, *(["--compile"] if mode == "compile" else []))
    stem = f"{script}/{TAG}_{mode}_cpu"
    assert files_in(tmp_path) == [f"{stem}.json", f"{stem}.txt"]
    events, recorded = recorded_steps(tmp_path / f"{stem}.json")
    for _, within in recorded:
        names = [e["name"] for e in within]
        if mode == "compile":
            assert any(n.startswith("Torch-Compiled Region") for n in names)
            assert names.count("aten::bmm") == 2  # the GEMMs stay ATen calls
            for gone in ("aten::masked_fill", "aten::masked_fill_", "aten::clone", "aten::softmax"):
                assert gone not in names
        else:
            assert names.count("aten::matmul") == 2 and names.count("aten::bmm") == 2
            assert "aten::mul" in names and "aten::softmax" in names
    out = capsys.readouterr().out
    assert "relative error" in out and "all as expected" in out
    assert "attn_fwd" in (tmp_path / f"{stem}.txt").read_text()


def test_naive_masked_fill_clones_the_scores_in_every_step(tmp_path):
    run_ok("04_a_naive_attention", tmp_path)
    events, recorded = recorded_steps(tmp_path / f"04_a_naive_attention/{TAG}_eager_cpu.json")
    for _, within in recorded:
        (fill,) = [e for e in within if e["name"] == "aten::masked_fill"]
        chain = [e["name"] for e in inside(fill, events)]
        # out of place: clone (empty_like + copy_) first, then the in-place fill on the copy
        assert chain.index("aten::clone") < chain.index("aten::masked_fill_")
        assert nested(fill, "aten::copy_", events)


def test_inplace_masked_fill_has_no_clone_in_any_step(tmp_path):
    run_ok("04_b_inplace_ops_attention", tmp_path)
    path = tmp_path / f"04_b_inplace_ops_attention/{TAG}_eager_cpu.json"
    events, recorded = recorded_steps(path)
    for _, within in recorded:
        names = [e["name"] for e in within]
        assert "aten::masked_fill_" in names
        assert "aten::masked_fill" not in names and "aten::clone" not in names
        (fill,) = [e for e in within if e["name"] == "aten::masked_fill_"]
        assert not nested(fill, "aten::copy_", events)


# --- 04_c: SDPA with a pinned backend -------------------------------------------------------


def sdpa(tmp_path, backend, *extra):
    return run_script(
        "04_c_sdpa_attention", *SMALL, "--backend", backend, "--traces-dir", str(tmp_path), *extra
    )


def test_sdpa_math_rebuilds_the_mask_and_uses_safe_softmax_every_step(tmp_path):
    assert sdpa(tmp_path, "math") == 0
    stem = f"04_c_sdpa_attention/{TAG}_eager_cpu_math"
    assert files_in(tmp_path) == [f"{stem}.json", f"{stem}.txt"]
    events, recorded = recorded_steps(tmp_path / f"{stem}.json")
    for _, within in recorded:
        (math,) = [e for e in within if e["name"] == "aten::_scaled_dot_product_attention_math"]
        chain = [e["name"] for e in inside(math, events)]
        assert "aten::tril" in chain or "aten::triu" in chain  # the causal mask, built again
        assert "aten::_safe_softmax" in chain
        assert chain.count("aten::bmm") == 2


@pytest.mark.parametrize("backend", ["flash", "auto"])
def test_sdpa_flash_on_a_cpu_is_the_cpu_flash_kernel(backend, tmp_path, capsys):
    assert sdpa(tmp_path, backend) == 0
    stem = f"04_c_sdpa_attention/{TAG}_eager_cpu_{backend}"
    assert files_in(tmp_path) == [f"{stem}.json", f"{stem}.txt"]
    events, recorded = recorded_steps(tmp_path / f"{stem}.json")
    for _, within in recorded:
        names = [e["name"] for e in within]
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
        assert "aten::_safe_softmax" not in names and "aten::bmm" not in names
    out = capsys.readouterr().out
    assert "all as expected" in out
    assert ("auto: ran (SDPA chose flash)" in out) == (backend == "auto")


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_sdpa_backend_without_a_cpu_kernel_is_one_line(backend, tmp_path, capsys):
    assert sdpa(tmp_path, backend) == 2  # tests pin --device cpu, also on a GPU machine
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: --backend {backend} cannot run here: {backend} has no CPU kernel "
        "(on a CPU, SDPA runs math and flash)"
    ]
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("backend", ["fa4", "fa4-sdpa"])
def test_flashattention_4_on_a_cpu_is_one_line_and_writes_nothing(backend, tmp_path, capsys):
    assert sdpa(tmp_path, backend) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --backend {backend} cannot run here: FlashAttention-4 is CUDA code "
        "(CuTe DSL kernels) with no CPU build"
    ]
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("backend", ["fa4", "fa4-sdpa"])
def test_flashattention_4_refuses_fp32_before_it_runs(backend, monkeypatch):
    """FA4 asserts bf16/fp16 inputs: on a GPU with flash-attn-4 installed, --dtype fp32 is a
    reason given up front (one line, or left out of --backend all), not a traceback."""
    cute = types.ModuleType("flash_attn.cute")
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    lesson = load_script("04_c_sdpa_attention")
    run = cli.Run(torch.device("cuda"), torch.float32, "fp32")  # never touches the device
    assert lesson.fa4_unavailable(backend, run) == (
        "FlashAttention-4 takes bf16 or fp16 inputs, not fp32"
    )


def test_host_time_splits_the_forward_into_its_ops_self_times(tmp_path):
    # a shape where the kernel's work outweighs the dispatch around it, even on a busy CPU
    assert sdpa(tmp_path, "flash", "--seq", "256", "--head_dim", "64") == 0
    trace = load_trace(tmp_path / "04_c_sdpa_attention/b1_h2_s256_d64_bf16_eager_cpu_flash.json")
    lines = sdpa_reading.host_time(trace, "attn_fwd", top=20).splitlines()
    total = float(lines[0].split()[4])
    assert lines[0].startswith("host time per forward: ") and total > 0
    parts = {line.split(None, 2)[2]: float(line.split()[0]) for line in lines[1:]}
    # the CPU kernel does the work: its self time leads; the parts account for the whole region
    assert max(parts, key=parts.get) == "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert "aten::scaled_dot_product_attention" in parts
    assert sum(parts.values()) == pytest.approx(total, rel=0.02, abs=0.3)


def test_sdpa_all_profiles_each_backend_and_prints_one_comparison(tmp_path, capsys):
    assert sdpa(tmp_path, "all") == 0
    stem = f"04_c_sdpa_attention/{TAG}_eager_cpu"
    assert files_in(tmp_path) == [
        f"{stem}_flash.json",
        f"{stem}_flash.txt",
        f"{stem}_math.json",
        f"{stem}_math.txt",
    ]
    for backend in ("math", "flash"):
        recorded_steps(tmp_path / f"{stem}_{backend}.json")
    out = capsys.readouterr().out
    table = out[out.index("backends compared") :].splitlines()
    assert table[0].startswith("backends compared (b1_h2_s16_d8, bf16, CPU;")
    assert table[1].split() == ["backend", "CPU", "us", "status"]
    rows = {line.split()[0]: line for line in table[2:6]}
    assert list(rows) == ["math", "efficient", "flash", "cudnn"]
    for ran in ("math", "flash"):
        assert rows[ran].split()[-1] == "ran" and float(rows[ran].split()[1]) > 0
    for refused in ("efficient", "cudnn"):
        assert f"cannot run: {refused} has no CPU kernel" in rows[refused]
    assert "need a CUDA GPU" in table[6]
    assert out.count("=== backend:") == 4


SDPA_H100 = Path(__file__).parent / "fixtures/h100/04_c_sdpa_attention"
TAG_H100 = "b8_h16_s1024_d64_bf16"
FOUR = ("math", "efficient", "flash", "cudnn")  # the recorded backends, in the table's order


def h100_sdpa(backend):
    return load_trace(SDPA_H100 / f"b8_h16_s1024_d64_bf16_eager_{backend}.json.gz")


def test_comparison_on_real_h100_traces_reads_kernels_and_flags_unmeasured_occupancy():
    """The H100 fixtures of every backend at the post's shape: kernels per step, GPU and CPU
    time, the longest kernel's occupancy from its event's args; cuDNN's kernel is launched with
    cuLaunchKernelEx, whose 0% the profiler cannot measure: footnoted, not believed."""
    rows = {b: sdpa_reading.summarize(b, h100_sdpa(b), "attn_fwd") for b in FOUR}
    auto = sdpa_reading.summarize("auto", h100_sdpa("auto"), "attn_fwd")
    assert auto.status == "ran (SDPA chose cudnn)"  # read from the dispatched op, as on a GPU
    assert rows["math"].kernels.isdigit() and int(rows["math"].kernels) > 10  # unfused
    for fused in ("efficient", "flash"):
        assert rows[fused].kernels == "1" and not rows[fused].occupancy_unmeasured
        assert rows[fused].occupancy.endswith("%") and rows[fused].occupancy != "0%"
    assert rows["cudnn"].kernels == "1 +1 memset"  # the memset counted apart from the kernel
    assert rows["cudnn"].occupancy == "0%" and rows["cudnn"].occupancy_unmeasured
    assert "flash_fwd" in rows["flash"].main_kernel and "cudnn" in rows["cudnn"].main_kernel
    gpu = {b: float(r.gpu_us) for b, r in rows.items()}
    # the post's point, on real kernels: each fused backend beats math's scores round trips
    assert max(gpu["efficient"], gpu["flash"], gpu["cudnn"]) < gpu["math"] / 5
    assert all(float(r.cpu_us) > 0 for r in rows.values())

    refused = sdpa_reading.Row("cudnn", "cannot run: a reason")
    table = sdpa_table.comparison([*rows.values(), refused], "title", on_gpu=True)
    lines = table.splitlines()
    assert lines[1].split()[:5] == ["backend", "kernels", "GPU", "us", "CPU"]
    by_backend = [line.split()[0] for line in lines[2:7]]
    assert by_backend == [*rows, "cudnn"]
    assert "0%*" in lines[5] and "cannot run: a reason" in lines[6]
    assert lines[-1].startswith("  * launched with cuLaunchKernelEx")


@pytest.mark.parametrize("backend", ["fa4", "fa4-sdpa"])
def test_fa4_on_a_real_h100_trace_meets_the_guess_and_takes_its_row(backend):
    """FlashAttention-4 at the post's shape on an H100 (fixtures recorded with flash-attn-4
    4.0.0b18, tests/fixtures/README.md): its CuTe-DSL kernel is read as attention, so the
    lesson's EXPECT holds with no GEMM; routed through SDPA it adds two small fill kernels
    (the flash op's philox seed and offset) and SDPA's ops on the host."""
    lesson = load_script("04_c_sdpa_attention")
    trace = h100_sdpa(backend)
    verdict = expectations.check(trace, lesson.EXPECT[backend])
    assert verdict.ok, verdict.text
    row = sdpa_reading.summarize(backend, trace, "attn_fwd")
    assert "flash_att" in row.main_kernel and row.occupancy_unmeasured
    assert row.kernels == ("1" if backend == "fa4" else "3")
    main = max(trace.steps[-1].gpu, key=lambda item: item.dur)
    assert main.klass.cls == "attention"
    others = [item.klass.cls for item in trace.steps[-1].gpu if item is not main]
    assert others == ([] if backend == "fa4" else ["elementwise", "elementwise"])
    # where the routed call's extra host time goes: the reader names the op that holds it
    (library,) = [f for f in findings.read(trace) if f.topic == "library"]
    op = "FlashAttnFunc" if backend == "fa4" else "aten::_scaled_dot_product_flash_attention"
    assert library.message.startswith(f"{op} spends ") and library.us > 50


def test_04d_guess_holds_on_its_real_h100_run_with_fa4_as_the_source():
    """04_d ran on an H100 with no Hub and no cache: FlashAttention-4 answered (fixture)."""
    lesson = load_script("04_d_kernels_attention")
    path = SDPA_H100.parent / f"04_d_kernels_attention/{TAG_H100}_eager_fa4.json.gz"
    verdict = expectations.check(load_trace(path), lesson.EXPECT["eager"])
    assert verdict.ok, verdict.text


def test_comparison_of_a_trace_without_occupancy_leaves_the_column_empty(tmp_path):
    """A profiler that records no occupancy in the kernel's args (older torch, other tools):
    the row says "-", and no footnote."""
    with gzip.open(SDPA_H100 / "b8_h16_s1024_d64_bf16_eager_cudnn.json.gz", "rt") as f:
        data = json.load(f)
    for event in data["traceEvents"]:
        event.get("args", {}).pop("est. achieved occupancy %", None)
    path = tmp_path / "cudnn.json"
    path.write_text(json.dumps(data))
    row = sdpa_reading.summarize("cudnn", load_trace(path), "attn_fwd")
    assert row.occupancy == "-" and not row.occupancy_unmeasured and row.kernels != "-"
    table = sdpa_table.comparison([row], "title", on_gpu=True)
    assert "cuLaunchKernelEx" not in table


def test_refusal_reason_is_the_pinned_backends_own():
    """A refused call on a GPU warns a heading per fused kernel, each followed by its reasons
    (these are an H100's, torch 2.11, flash pinned with fp32 inputs): the line must carry the
    pinned backend's reason, without the C++ source location."""
    at = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/x.cpp:1.)"
    warned = [
        "Memory efficient kernel not used because:" + at,
        "Memory Efficient attention has been runtime disabled." + at,
        "Flash attention kernel not used because:" + at,
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: "
        "float, Key dtype: float, and Value dtype: float instead." + at,
        "cuDNN attention kernel not used because:" + at,
        "cuDNN attention has been runtime disabled." + at,
    ]
    caught = [SimpleNamespace(message=text) for text in warned]
    gpu = cli.Run(device=torch.device("cuda"), dtype=torch.float32, dtype_name="fp32")
    error = RuntimeError("No available kernel. Aborting execution.")
    assert sdpa_plumbing.why_not("flash", gpu, caught, error) == (
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: "
        "float, Key dtype: float, and Value dtype: float instead."
    )
    assert (
        sdpa_plumbing.why_not("cudnn", gpu, caught, error)
        == "cuDNN attention has been runtime disabled."
    )
    assert (
        sdpa_plumbing.why_not("flash", gpu, [], error)
        == "RuntimeError: No available kernel. Aborting execution."
    )


# --- 04_d: FlashAttention from the kernels Hub ----------------------------------------------


def test_hub_flash_attention_on_a_cpu_says_so_and_writes_nothing(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert run_script("04_d_kernels_attention", "--traces-dir", str(tmp_path), device="auto") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "needs a CUDA GPU" in captured.err
    assert not list(tmp_path.rglob("*"))


# --- bad input ------------------------------------------------------------------------------

BAD = [
    ("04_a_naive_attention", ["--seq", "0"], "--seq: must be greater than 0"),
    ("04_a_naive_attention", ["--heads", "-2"], "--heads: must be greater than 0"),
    ("04_b_inplace_ops_attention", ["--head-dim", "0"], "--head_dim/--head-dim: must be greater"),
    ("04_b_inplace_ops_attention", ["--batch", "two"], "--batch: expected a whole number"),
    ("04_a_naive_attention", ["--seq", "1000000"], "choose smaller sizes"),
    ("04_c_sdpa_attention", ["--backend", "xformers"], "invalid choice: 'xformers'"),
    ("04_c_sdpa_attention", ["--compile"], "does not take --compile"),
    ("04_d_kernels_attention", ["--variant", "fa4"], "invalid choice: 'fa4'"),
    ("04_d_kernels_attention", ["--compile"], "does not take --compile"),
]


@pytest.mark.parametrize(("script", "argv", "message"), BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(script, argv, message, tmp_path, capsys):
    rc = run_script(script, *argv, "--traces-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*"))


def test_help_explains_the_shape_flags_and_the_refused_compile(capsys):
    for script in ("04_c_sdpa_attention", "04_d_kernels_attention"):
        assert run_script(script, "--help") == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "--head_dim HEAD_DIM, --head-dim HEAD_DIM" in text
        assert "(default: " in text and "not offered here (refused)" in text


# --- the models beside EXPECT, and the memory estimate --------------------------------------


def test_traffic_models_count_the_scores_round_trips():
    args = SimpleNamespace(batch=2, heads=4, seq=128, head_dim=64)
    sizes, elt = shapes.attention_sizes(args), 2
    scores = sizes.scores * elt
    naive = load_script("04_a_naive_attention").traffic_model(sizes, elt, fused=False)
    inplace = load_script("04_b_inplace_ops_attention").traffic_model(sizes, elt, fused=False)
    fused = load_script("04_a_naive_attention").traffic_model(sizes, elt, fused=True)
    total = lambda model: (sum(k.flops for k in model), sum(k.bytes for k in model))  # noqa: E731
    # the in-place forward moves exactly one copy (a read and a write of the scores) less
    assert total(naive)[1] - total(inplace)[1] == 2 * scores
    # fusing scale, mask and softmax saves two of the three read+write passes
    assert total(inplace)[1] - total(fused)[1] == 2 * 2 * scores
    gemm_flops = 4 * sizes.batch_heads * sizes.seq**2 * sizes.head_dim
    assert total(naive)[0] == total(fused)[0] == gemm_flops  # the masked half is computed
    (flash,) = load_script("04_c_sdpa_attention").traffic_model(sizes, elt, "flash")
    assert flash.cls == "attention" and flash.flops == gemm_flops // 2
    assert flash.bytes == 4 * sizes.qkv * elt  # q, k, v in, out out: no scores at all
    hub = load_script("04_d_kernels_attention").traffic_model(sizes, elt, "fa2")
    assert hub == [
        traffic.Kernel("FlashAttention-2 fwd", "attention", flash.flops, flash.bytes, elt)
    ]
    math = load_script("04_c_sdpa_attention").traffic_model(sizes, elt, "math")
    assert sum(k.flops for k in math) == gemm_flops and len(math) > 10


def test_memory_estimate_orders_the_forwards_by_what_they_hold():
    """What ensure_fits relies on: the naive bf16 forward's two score buffers stay under the
    float32 reference's peak (the larger counts, not the sum), SDPA's math backend needs more,
    and the scores make the estimate grow with the square of the sequence."""
    run = cli.Run(device=torch.device("cpu"), dtype=torch.bfloat16, dtype_name="bf16")

    def needed(seq, **forward):
        args = SimpleNamespace(batch=1, heads=2, seq=seq, head_dim=64)
        return shapes.attention_bytes_needed(args, run, **forward)

    fused = needed(1024, score_bytes=0)
    assert needed(1024, score_bytes=4) == fused  # naive: under the reference's peak
    assert needed(1024, score_bytes=9, fp32_copies=6) > fused  # math
    assert needed(2048, score_bytes=0) > 3.5 * fused
