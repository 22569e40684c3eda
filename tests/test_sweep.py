"""The shape sweep's bookkeeping: recompile counts read from Dynamo, for real, on the CPU; its
GPU-only variants refused on a CPU; each forward's kernels and launches read from fake profiler
events; its table and a stopped sweep's rows."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.measuring import timing
from tests.helpers import load_script, run_script

SWEEP = ["--dim", "8", "--hidden", "16", "--hidden-change", "32"]


def read_rows(folder: Path) -> list[dict]:
    (path,) = folder.glob("shape_sweep/*.csv")
    return list(csv.DictReader(path.open()))


@pytest.mark.slow
def test_sweep_counts_recompiles_from_dynamo(tmp_path, capsys):
    rc = run_script(
        "tools.shape_sweep",
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
    png = next((tmp_path / "shape_sweep").glob("*.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_sweep_flags_rows_that_fell_back_to_eager_at_the_recompile_limit(tmp_path, capsys):
    rc = run_script(
        "tools.shape_sweep",
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
        # the lessons' own flags, refused as the lessons refuse them
        (["--seed", "-1"], "must be at least 0"),
        (["--seed", str(2**70)], "the range torch.manual_seed takes"),
    ],
)
def test_sweep_bad_input(argv, message, tmp_path, capsys):
    assert run_script("tools.shape_sweep", *argv, "--traces-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_sweep_refuses_an_empty_traces_folder(capsys):
    assert run_script("tools.shape_sweep", "--traces-dir", "") == 2
    assert "--traces_dir: is empty" in capsys.readouterr().err


def test_sweep_on_a_gpu_runs_the_fused_and_cuda_graph_variants_by_default():
    sweep = load_script("tools.shape_sweep")
    assert sweep.parse_variants("eager, fused,cuda-graph") == ["eager", "fused", "cuda-graph"]
    gpu_only = {"fused", "cuda-graph", "fused-graph"}
    assert gpu_only <= set(sweep.choose_variants(None, on_gpu=True))
    assert sweep.choose_variants(["fused"], on_gpu=True) == ["fused"]  # as asked, nothing more


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ("liger", "the liger variant needs a CUDA GPU (Liger's kernel is Triton)"),
        ("fused", "the fused variant needs a CUDA GPU (03_fused_mlp.py's kernel is Triton)"),
        ("cuda-graph", "the cuda-graph variant needs a CUDA GPU (CUDA graphs record"),
        ("eager,fused,cuda-graph", "the fused and cuda-graph variants need a CUDA GPU"),
        ("fused-graph", "the fused-graph variant needs a CUDA GPU (03_fused_mlp.py's kernel is"),
    ],
)
def test_sweep_gpu_only_variants_are_refused_on_a_cpu(variants, message, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    argv = ["--variants", variants, "--traces-dir", str(tmp_path)]
    assert run_script("tools.shape_sweep", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.rglob("*"))  # not even the folder


@pytest.mark.slow
def test_sweep_default_variants_on_a_cpu_skip_the_gpu_only_ones(tmp_path, capsys):
    argv = ["--shapes", "2x4", "--dim", "8", "--hidden", "16", "--hidden-change", "0"]
    assert run_script("tools.shape_sweep", *argv, "--traces-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert (
        "note: no CUDA GPU: the liger, fused, cuda-graph, fused-graph, fused-gluon and quack "
        "variants are skipped" in out
    )
    rows = read_rows(tmp_path)
    assert [r["variant"] for r in rows] == [
        "eager",
        "compile",
        "compile-static",
        "compile-dynamic",
        "mark-dynamic",
    ]
    # the GPU columns stay empty on a CPU
    assert all(r["launches"] == r["gate_up_geglu_us"] == r["replayed"] == "" for r in rows)


@pytest.mark.slow  # torch.compile's wrapper imports Dynamo: ~5-9 s on two busy cores
def test_sweep_builds_the_fused_variant_from_the_same_weights():
    """fused packs the weights that eager gets for the same seed, and is checked against the
    plain module built from them (FusedGeGLUMLP builds on a CPU; only its kernel needs Triton
    on a GPU or the interpreter, and nothing here runs it)."""
    import torch

    from common import cli
    from modules.geglu import fused as fused_geglu
    from modules.geglu import shared as geglu_shared

    sweep = load_script("tools.shape_sweep")
    for dtype, config in (("bf16", "plain"), ("fp32", "plain-fp32")):
        run = cli.Run(torch.device("cpu"), cli.DTYPES[dtype], dtype)
        eager, eager_ref = sweep.build("eager", 16, 40, run, seed=7)
        torch.randn(100)  # the global generator moves on; build() seeds it again
        fused, fused_ref = sweep.build("fused", 16, 40, run, seed=7)
        assert eager_ref is eager and fused_ref is not fused and fused.config == config
        for name in ("gate_proj", "up_proj", "down_proj"):
            mine, theirs = getattr(fused_ref, name).weight, getattr(eager, name).weight
            assert torch.equal(mine, theirs) and mine.dtype == run.dtype
        half = fused_geglu.CONFIGS[config].block_n // 2
        packed = geglu_shared.pack_gate_up(eager.gate_proj.weight, eager.up_proj.weight, half)
        assert torch.equal(fused.gate_up, packed)
        assert torch.equal(fused.down_proj.weight, eager.down_proj.weight)
        assert sweep.make_forward("fused", fused) is fused  # run as it is, no compile
        graphed, graphed_ref = sweep.build("fused-graph", 16, 40, run, seed=7)
        assert torch.equal(graphed.gate_up, packed) and graphed_ref is not graphed
        compiled = sweep.make_forward("fused-graph", graphed)
        assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)
        assert compiled._orig_mod is graphed  # the fused module itself, compiled


def fake_events(per_call, calls=2, launches=(), start=0.0):
    """Profiler events of `calls` forwards: GPU items (name, us) back to back, and per call the
    host's runtime calls (names)."""

    import torch

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events, now = [], start
    for _ in range(calls):
        for name in launches:
            events.append(SimpleNamespace(name=name, device_type=cpu, is_user_annotation=False))
        for name, us in per_call:
            span = SimpleNamespace(start=now, elapsed_us=lambda us=us: us)
            events.append(
                SimpleNamespace(
                    name=name, device_type=cuda, is_user_annotation=False, time_range=span
                )
            )
            now += us + 1.0
    events.reverse()  # the reader orders GPU work by its start, not by the list
    return events


GEMM = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopB_TNT"
SPLIT_K = "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(float const*)"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int)"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int)"
INDUCTOR = "triton_poi_fused__unsafe_view_gelu_mul_0"
GRAPH_INPUT_COPY = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "CopyFunctor<c10::BFloat16, c10::BFloat16, 2, 1, 1>, std::identity>(int)"
)


def test_sweep_reads_each_forward_eager_with_split_k_gemms():
    sweep = load_script("tools.shape_sweep")
    # gate; up and its split-K reduce; GeLU, mul; down and its reduce; a cuBLAS memset
    per_call = [(GEMM, 50), (GEMM, 40), (SPLIT_K, 5), (GELU, 30), (MUL, 20), (GEMM, 45)]
    per_call += [(SPLIT_K, 4), ("Memset (Device)", 1)]
    launches = ["cudaLaunchKernel"] * 2 + ["cuLaunchKernelEx"] * 5 + ["cudaMemsetAsync"]
    seen = sweep.read_forward(fake_events(per_call, launches=[*launches, "aten::mm"]), calls=2)
    assert seen.kernels == 8 and seen.launches == 8 and seen.graph_launches == 0
    assert seen.gpu_us == pytest.approx(195)
    assert (seen.geglu_us, seen.geglu_kernels) == (50, 2)
    assert seen.gate_up_geglu_us == 145  # gate, up (+ its reduce), GeLU, mul; not down's reduce


def test_sweep_reads_each_forward_replayed_from_a_cuda_graph():
    sweep = load_script("tools.shape_sweep")
    # reduce-overhead: the copy of x into the graph's static input, then compile's 4 kernels
    per_call = [(GRAPH_INPUT_COPY, 3), (GEMM, 50), (GEMM, 40), (INDUCTOR, 35), (GEMM, 45)]
    events = fake_events(per_call, calls=5, launches=["cudaLaunchKernel", "cudaGraphLaunch"])
    seen = sweep.read_forward(events, calls=5)
    assert (seen.kernels, seen.launches, seen.graph_launches) == (5, 2, 1)
    assert (seen.geglu_us, seen.geglu_kernels) == (35, 1)  # the copy is not GeGLU work
    assert seen.gate_up_geglu_us == 125 and seen.gpu_us == pytest.approx(173)


@pytest.mark.parametrize("kernel", ["fused_gate_up_geglu_tma_kernel", "fused_gate_up_geglu_kernel"])
def test_sweep_reads_the_fused_kernel_as_gate_up_and_geglu_in_one(kernel):
    sweep = load_script("tools.shape_sweep")
    assert sweep.role(kernel) == "fused"  # a GEMM by what it does, whatever its class says
    per_call = [(kernel, 120), (GEMM, 45)]
    events = fake_events(per_call, calls=5, launches=["cuLaunchKernelEx", "cuLaunchKernelEx"])
    seen = sweep.read_forward(events, calls=5)
    assert (seen.kernels, seen.launches, seen.graph_launches) == (2, 2, 0)
    assert seen.geglu_us is None and seen.geglu_kernels == 0  # no GeGLU kernel of its own
    assert seen.gate_up_geglu_us == 120  # the fused kernel's whole time


def test_sweep_reads_forwards_it_cannot_split_into_calls():
    sweep = load_script("tools.shape_sweep")
    # 4 GEMMs over 3 calls: which is whose down GEMM is unknown; the GeGLU by class only
    events = fake_events([(GEMM, 10), (GELU, 7)], calls=2) + fake_events([(GEMM, 10)], calls=2)
    seen = sweep.read_forward(events, calls=3)
    assert seen.gate_up_geglu_us is None
    assert seen.geglu_us == pytest.approx(14 / 3) and seen.kernels == 2


def sweep_row(variant, **fields):
    sweep = load_script("tools.shape_sweep")
    values = dict(
        variant=variant, batch=8, seq=128, hidden=3072, compiles=0, compile_s=0.0,
        limit_hit=False, ran_compiled=None, queued_us=80.0, p20_us=79.0, p80_us=81.0,
        host_us=70.0, gpu_us=40.0, kernels=5, launches=5, replayed=None, geglu_us=12.0,
        geglu_kernels=2, gate_up_geglu_us=30.0, rel_err=1e-3,
    )  # fmt: skip
    return sweep.Row(**{**values, **fields})


def test_sweep_table_reads_fused_and_cuda_graph_rows():
    from common.measuring import sweep_report

    fused = sweep_row("fused", kernels=2, launches=2, geglu_us=None, geglu_kernels=0)
    graph = sweep_row("cuda-graph", ran_compiled=True, compiles=1, launches=2, replayed=True)
    skipped = sweep_row("cuda-graph", batch=16, ran_compiled=True, replayed=False)
    table = sweep_report.table([fused, graph, skipped], limit=8, device="GPU X")
    fused_line, graph_line = table.splitlines()[3:5]
    # kernels, launches, gate/up+GeGLU us, GeGLU us
    assert fused_line.split()[-5:] == ["2", "2", "30.0", "in", "GEMM"]
    assert graph_line.split()[-5:] == ["5", "2", "(graph)", "30.0", "12.0"]
    assert "its GeGLU is the gate/up GEMM's epilogue" in table
    assert "WARNING: 1 CUDA-graph row(s) launched no CUDA graph" in table
    assert "GeGLU in the GEMM's epilogue" in sweep_report.progress(fused)
    assert "2 launches, replayed from a CUDA graph" in sweep_report.progress(graph)
    assert "NO CUDA GRAPH LAUNCHED" in sweep_report.progress(skipped)


def test_a_stopped_sweep_keeps_the_rows_it_measured(tmp_path, monkeypatch, capsys):
    real, calls = timing.time_cpu, []
    repeats = load_script("tools.shape_sweep").REPEATS

    def interrupt_the_second_row(fn, **kwargs):
        calls.append(1)
        if len(calls) == repeats + 1:  # the second row's first repeat
            raise KeyboardInterrupt
        return real(fn, **kwargs)

    monkeypatch.setattr(timing, "time_cpu", interrupt_the_second_row)
    argv = ["--shapes", "2x4,3x4", *SWEEP, "--variants", "eager", "--traces-dir", str(tmp_path)]
    assert run_script("tools.shape_sweep", *argv) == 130
    rows = read_rows(tmp_path)
    assert [(r["variant"], r["batch"]) for r in rows] == [("eager", "2")]
    (table,) = (tmp_path / "shape_sweep").glob("*.txt")
    assert "STOPPED after 1 of 3 rows" in table.read_text()
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"


def test_two_busy_repeats_do_not_set_a_row_but_mark_it_noisy():
    """Two repeats of 45 ms among 100 us ones (a burst of load on a shared CPU) set the
    row's time when it was one timing; the median of the repeats is the 100 us, and the row
    is marked noisy in the table, with one line saying why."""
    sweep = load_script("tools.shape_sweep")
    times = iter([100e-6, 45e-3, 100e-6, 45e-3, 99e-6])
    found, noisy = sweep.row_timing(lambda: timing.summarize([next(times)], "injected"))
    assert found.median_s == 100e-6 and noisy
    quiet, calm = sweep.row_timing(lambda: timing.summarize([100e-6], "injected"))
    assert quiet.median_s == 100e-6 and not calm
    from common.measuring import sweep_report

    rows = [sweep_row("eager", queued_us=100.0, noisy=True), sweep_row("compile", queued_us=90.0)]
    table = sweep.mark_noisy(sweep_report.table(rows, limit=8, device="CPU"), rows)
    lines = table.splitlines()
    assert lines[3].startswith("eager") and lines[3].endswith("NOISY")
    assert lines[4].startswith("compile") and not lines[4].endswith("NOISY")
    (said,) = [x for x in lines if x.startswith("NOISY: 1 row(s)")]
    assert "the machine was busy" in said and "noisy" in said
    assert sweep.mark_noisy("title", [rows[1]]) == "title"  # nothing noisy: nothing said


@pytest.mark.slow  # a real sweep of two rows, 5 repeats each: ~1-4 s on two busy cores
def test_a_sweep_row_on_the_cpu_is_the_median_of_its_repeats(tmp_path, capsys):
    argv = ["--shapes", "2x4", *SWEEP, "--variants", "eager", "--traces-dir", str(tmp_path)]
    assert run_script("tools.shape_sweep", *argv) == 0
    rows = read_rows(tmp_path)
    assert [(r["batch"], r["hidden"]) for r in rows] == [("2", "16"), ("2", "32")]
    for r in rows:
        assert r["noisy"] in ("True", "False")
        assert float(r["p20_us"]) <= float(r["queued_us"]) <= float(r["p80_us"])
    out = capsys.readouterr().out
    noisy = [r for r in rows if r["noisy"] == "True"]
    assert ("NOISY: " in out) == bool(noisy)


def test_the_plot_rings_a_noisy_rows_time_and_says_why():
    """The table marks a noisy row; the plot, read on its own, must too (issue 43): its time
    ringed in a hollow marker, with a legend entry saying what the ring means."""
    import matplotlib.pyplot as plt

    from common.measuring import sweep_report

    rows = [
        sweep_row("eager", queued_us=100.0),
        sweep_row("eager", batch=16, queued_us=4500.0, noisy=True),
        sweep_row("compile", queued_us=90.0),
        sweep_row("compile", batch=16, queued_us=95.0),
    ]
    fig = sweep_report.figure(rows)
    try:
        ax_time = fig.axes[0]
        (ring,) = [x for x in ax_time.get_lines() if x.get_label() == sweep_report.NOISY_LABEL]
        assert ring.get_markerfacecolor() == "none" and ring.get_linestyle() == "None"
        assert list(ring.get_xdata()) == ["16x128"] and list(ring.get_ydata()) == [4500.0]
        legend = [t.get_text() for t in ax_time.get_legend().get_texts()]
        assert legend == ["eager", "compile", sweep_report.NOISY_LABEL]
        others = [x for x in ax_time.get_lines() if x is not ring]
        assert all(x.get_markerfacecolor() != "none" for x in others)  # the rest filled
    finally:
        plt.close(fig)
    quiet = sweep_report.figure([r for r in rows if not r.noisy])
    try:  # nothing noisy: no ring, no legend entry for one
        labels = [t.get_text() for t in quiet.axes[0].get_legend().get_texts()]
        assert sweep_report.NOISY_LABEL not in labels
    finally:
        plt.close(quiet)
