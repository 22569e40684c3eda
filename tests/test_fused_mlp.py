"""03_fused_mlp.py on a CPU: its Triton kernels for real, through Triton's interpreter (odd shapes,
every dtype, both paths, against the float32 reference at the project's tolerances); the custom
op under torch.compile with no graph break; the lesson end to end; the packing, the traffic
model, the declared expectation; bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from common import fused_kernel
from common.measuring import traffic
from modules import triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import hopper, hopper_epi, plain
from modules.geglu import shared as geglu_shared
from modules.models import GeGLUMLP
from tests.helpers import ROOT, inside, load_script, read_trace, run_script, steps
from tracereader.analyses import bench as profiled
from tracereader.analyses import diff
from tracereader.judge import expectations, findings
from tracereader.names.kernel_names import classify
from tracereader.render import compare as compare_text
from tracereader.trace import load as trace_reader

SCRIPT = "03_fused_mlp"
OP = fused_geglu.OP
H100 = ROOT / "tests" / "fixtures" / "h100"
POSTS = "b64_s128_d768_h3072_bf16"  # M = 8192, dim 768, hidden 3072
FUSED_EAGER = H100 / SCRIPT / f"{POSTS}_hopper_eager.json.gz"
FUSED_COMPILED = H100 / SCRIPT / f"{POSTS}_hopper_compile.json.gz"
FUSED_FP32 = H100 / SCRIPT / "b3_s37_d200_h300_fp32_plain_eager.json.gz"


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """One interpreter process for every check that runs a kernel (tests/interpret_fused_mlp.py)."""
    traces = tmp_path_factory.mktemp("interpreted")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.interpret_fused_mlp", str(traces)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("JSON "))
    return json.loads(line.removeprefix("JSON ")), traces, proc.stdout


@pytest.mark.slow
def test_kernels_match_the_float32_reference_on_odd_shapes_in_every_dtype(interpreted):
    report, _, _ = interpreted
    cases = report["kernels"]
    # bf16 and fp16 on both paths, fp32 on the plain one; M = 37 and M = 1; default and small
    # tiles (several row blocks, column blocks and K steps; a persistent grid that loops).
    assert len(cases) == 16
    for case in cases:
        assert case["shape_ok"], case
        assert case["error"] <= case["tolerance"], case
    fp32 = [c for c in cases if " fp32 " in c["case"]]
    assert fp32 and all(c["error"] < 1e-5 for c in fp32)  # IEEE float32 dot, not tf32


@pytest.mark.slow
def test_opt_in_hopper_epi_path_matches_the_float32_reference(interpreted):
    """Its split store, tiles grouped along N and two programs per SM, through the interpreter
    (there tanh comes from exp2: tanh.approx is inline assembly, which only a GPU runs)."""
    report, _, _ = interpreted
    cases = report["hopper_epi"]
    assert len(cases) == 12
    for case in cases:
        assert case["shape_ok"], case
        assert case["error"] <= case["tolerance"], case
    assert any("along-n split2 tanh.approx" in c["case"] and "2/SM" in c["case"] for c in cases)


@pytest.mark.slow
def test_module_under_torch_compile_has_no_graph_break(interpreted):
    report, _, _ = interpreted
    for case in report["modules"]:
        assert case["eager_error"] <= case["tolerance"], case
        assert case["compiled_error"] <= case["tolerance"], case
        assert case["graph_breaks"] == 0 and case["graphs"] == 1, case
        # Dynamo recorded the custom op itself (a call, not a break), then down as F.linear.
        assert "profiling_pytorch.fused_gate_up_geglu" in case["ops"], case["ops"]
        # forward-only: a backward through it fails by name, never a silent missing gradient
        assert "autograd" in case["backward"] and not case["x_grad"], case


def test_tracers_see_the_custom_op_not_the_launch():
    """make_fx with fake tensors (what torch.export and AOT tracing build on) records the op;
    launching the kernel on a fake tensor would fail (no data pointer)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    fused = fused_geglu.FusedGeGLUMLP(GeGLUMLP(16, 40), "plain").eval()

    def call(x, gate_up):  # what the module's forward calls
        return fused_geglu.gate_up_geglu(x, gate_up, 40, "plain")

    with torch.no_grad():
        graph = make_fx(call, tracing_mode="fake")(torch.randn(6, 16), fused.gate_up)
    targets = [str(n.target) for n in graph.graph.nodes]
    assert "profiling_pytorch.fused_gate_up_geglu.default" in targets, targets


@pytest.mark.slow
def test_lesson_runs_end_to_end_under_the_interpreter(interpreted):
    report, traces, stdout = interpreted
    assert [run["rc"] for run in report["lesson_runs"]] == [0, 0]
    folder = traces / SCRIPT
    for kernel in ("plain", "hopper"):
        trace = folder / f"b2_s3_d16_h32_bf16_{kernel}_eager_cpu.json"
        assert trace.is_file() and trace.with_suffix(".txt").is_file()
        events = read_trace(trace)
        recorded = steps(events)
        assert [s["name"] for s in recorded] == [f"ProfilerStep#{i}" for i in (2, 3, 4)]
        for step in recorded:
            names = [e["name"] for e in inside(step, events)]
            assert "fused_mlp_fwd" in names and "aten::mm" in names
            assert OP not in names  # eager launches the kernel itself, not through the op
            assert "aten::gelu" not in names and "aten::mul" not in names
    assert "correctness: relative error" in stdout and "all as expected" in stdout
    assert "(interpreted)" in stdout


def test_kernel_names_are_classed_as_hand_written_triton():
    kernels = plain.fused_gate_up_geglu_kernel, hopper.fused_gate_up_geglu_tma_kernel
    for kernel in kernels:
        name = kernel.__name__ if hasattr(kernel, "__name__") else kernel.fn.__name__
        assert classify(name).cls == "triton"
        assert classify(f"{name}_0").cls == "triton"  # as Inductor's wrapper names its call


def test_the_opt_in_kernel_name_is_classed_as_hand_written_triton():
    name = hopper_epi.fused_gate_up_geglu_tma_epi_kernel.fn.__name__
    assert classify(name).cls == "triton" and classify(f"{name}_0").cls == "triton"


# --- real H100 traces (tests/fixtures/h100/03_fused_mlp) -------------------------------------


@pytest.mark.parametrize(
    "path, mode",
    [(FUSED_EAGER, "eager"), (FUSED_COMPILED, "compile"), (FUSED_FP32, "eager")],
    ids=["eager", "compile", "fp32-split-k"],
)
def test_the_declared_expectation_holds_on_real_h100_traces(path, mode):
    trace = trace_reader.load(path)
    verdict = expectations.check(trace, load_script(SCRIPT).EXPECT[mode])
    assert verdict.ok, verdict.mismatches
    for step in trace.steps:
        names = [i.name for i in step.gpu if i.kind == "kernel"]
        kernel = (
            "fused_gate_up_geglu_kernel"
            if path == FUSED_FP32
            else ("fused_gate_up_geglu_tma_kernel")
        )
        assert names[0] == kernel  # gate, up and the GeGLU first, then the down GEMM
        assert step.count("triton") == 1 and step.count("gemm") == 1


def test_fp32_down_gemm_split_in_two_cublas_kernels_counts_once():
    """cuBLAS ran the small fp32 down GEMM as sm80_xmma ..._execute_kernel, grid z = 5 slices of
    K, then ..._execute_split_k_kernel adding them: one GEMM."""
    trace = trace_reader.load(FUSED_FP32)
    for step in trace.steps:
        _, product, reduce = step.gpu
        assert product.name.endswith("execute_kernel__5x_cublas")
        assert reduce.klass.joins_previous and reduce.klass.detail == "split-K reduce"
    (split,) = [f for f in findings.read(trace) if f.topic == "split-K"]
    assert "4x7x5" in split.message


def test_compare_against_the_compiled_mlp_shows_g_and_u_gone_from_hbm():
    tokens, dim, hidden, bf16 = 64 * 128, 768, 3072, 2
    simple = trace_reader.load(H100 / "03_simple_mlp" / f"{POSTS}_compile.json.gz")
    result = diff.compare(simple, trace_reader.load(FUSED_COMPILED))
    assert [e["class"] for e in result["only_in_a"]] == ["gemm", "gemm", "inductor"]
    assert [e["class"] for e in result["only_in_b"]] == ["triton"]
    # gate and up: x and a weight read, g (or u) written; the GeGLU reads g, u, writes m
    gemm = (tokens * dim + hidden * dim + tokens * hidden) * bf16
    assert [e["bytes"] for e in result["only_in_a"]] == [gemm, gemm, 3 * tokens * hidden * bf16]
    # the fused kernel: x once, the packed weight once, m written; g and u never
    fused_model, down = load_script(SCRIPT).traffic_model(tokens, dim, hidden, bf16)
    assert result["only_in_b"][0]["bytes"] == fused_model.bytes
    saved = result["extra_bytes_a"] - result["extra_bytes_b"]
    assert saved == (4 * tokens * hidden + tokens * dim) * bf16  # as the traffic model says
    simple_model = load_script("03_simple_mlp").traffic_model(tokens, dim, hidden, bf16, fused=True)
    assert traffic.total(simple_model)[0] == traffic.total([fused_model, down])[0]  # same FLOPs
    assert result["extra_bytes_unknown"] == {"a": [], "b": []}
    assert "(difference 213.9 MB)" in compare_text.text(result)


def test_compare_says_which_kernel_it_cannot_count():
    """Eagerly the kernel is launched straight from Python: no op records its shapes, so the
    comparison names it instead of counting it as zero."""
    simple = trace_reader.load(H100 / "03_simple_mlp" / f"{POSTS}_compile.json.gz")
    result = diff.compare(simple, trace_reader.load(FUSED_EAGER))
    assert result["extra_bytes_unknown"]["b"] == ["fused_gate_up_geglu_tma_kernel"]
    text = compare_text.text(result)
    assert "difference" not in text
    assert "not counted in B (no byte estimate: no recorded shapes" in text
    assert (
        text.endswith("fused_gate_up_geglu_tma_kernel")
        or "fused_gate_up_geglu_tma_kernel\n" in text
    )


def test_bench_matches_the_model_to_the_real_kernels():
    trace = trace_reader.load(FUSED_EAGER)
    model = load_script(SCRIPT).traffic_model(64 * 128, 768, 3072, 2)
    times = profiled.kernel_times(trace, model)
    assert not isinstance(times, str), times
    fused_us, down_us = (t * 1e6 for t in times)
    kernels = [(i.name, i.dur) for i in trace.steps[1].gpu if i.kind == "kernel"]
    assert 100 < fused_us < 140 and 40 < down_us < 70, kernels


def test_packing_pairs_gate_and_up_rows_per_tile_and_pads_with_zeros():
    hidden, dim, half = 5, 3, 2
    gate = torch.arange(hidden * dim, dtype=torch.float32).view(hidden, dim) + 1
    up = -gate
    packed = geglu_shared.pack_gate_up(gate, up, half)
    assert packed.shape == (2 * 6, dim) and packed.is_contiguous()  # hidden padded to 6
    blocks = packed.view(3, 2, half, dim)  # [tile, gate|up, row, dim]
    assert torch.equal(blocks[:, 0].reshape(6, dim)[:hidden], gate)
    assert torch.equal(blocks[:, 1].reshape(6, dim)[:hidden], up)
    assert not blocks[-1, :, -1].any()  # the padding row, in both halves


def test_zero_size_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    rc = run_script(SCRIPT, "--hidden", "0", "--traces-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert rc == 2 and "--hidden: must be greater than 0" in err
    assert len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_cpu_without_the_interpreter_says_it_needs_a_gpu(tmp_path, capsys):
    if triton_support.INTERPRETING:
        pytest.skip("TRITON_INTERPRET=1 is set for the whole test run")
    assert run_script(SCRIPT, "--traces-dir", str(tmp_path)) == 2
    captured = capsys.readouterr()
    assert "needs a CUDA GPU" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert captured.out == ""
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compile"], "--compile needs a GPU here"),
        (["--kernel", "hopper", "--dtype", "fp32"], "fp32 takes the plain path"),
        (["--kernel", "hopper", "--dim", "12"], "multiples of 8 in bf16"),
    ],
)
def test_refusals_under_the_interpreter(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fused_kernel, "INTERPRETING", True)  # no kernel runs here
    assert run_script(SCRIPT, *argv, "--traces-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def load_tuner():
    from tools import tune_fused_mlp

    return tune_fused_mlp


def load_candidates():
    from tools import fused_mlp_candidates

    return fused_mlp_candidates


def test_tuner_candidates_are_distinct_and_print_as_pasteable_code():
    lists = load_candidates()
    for quick in (False, True):
        candidates = lists.hopper_candidates(quick) + lists.plain_candidates(quick)
        assert len(set(candidates)) == len(candidates)
        for cfg in candidates:
            assert cfg.path in ("hopper", "plain") and cfg.block_n % 32 == 0
            assert eval(lists.as_code(cfg), {"Config": lists.Config}) == cfg
    for shipped in fused_geglu.CONFIGS.values():  # what the tuner prints pastes back as is
        assert eval(lists.as_code(shipped), {"Config": lists.Config}) == shipped


def test_tuner_lists_the_opt_in_path_with_distinct_pasteable_candidates():
    lists = load_candidates()
    assert "hopper-epi" in lists.PATHS
    for quick in (False, True):
        candidates = lists.hopper_epi_candidates(quick)
        assert len(set(candidates)) == len(candidates)
        assert fused_geglu.CONFIGS["hopper-epi"] in candidates  # the committed one is timed
        for cfg in candidates:
            assert cfg.path == "hopper-epi" and cfg.block_n % 32 == 0
            assert eval(lists.as_code(cfg), {"Config": lists.Config}) == cfg


def as_command(monkeypatch, capsys, tool, runner, *argv: str) -> tuple[int, str, str]:
    """A tool's main as its `python -m` would run it (sys.argv, then its runner), in this
    process: (exit code, stdout, stderr). tests/test_bad_input.py runs the runner in a real
    process; importing torch again per refusal would cost seconds each."""
    monkeypatch.setattr(sys, "argv", [tool.__name__, *argv])
    code = runner(tool.main)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tuner_refuses_an_unknown_path_in_one_line(monkeypatch, capsys):
    from tools import tune_fused_mlp as tuner
    from tracereader import run

    code, out, err = as_command(monkeypatch, capsys, tuner, run, "--paths", "hopper,hoper")
    assert code == 2 and out == ""
    assert err.startswith("error: --paths takes hopper, hopper-epi, gluon, plain; got")
    assert err.count("\n") == 1


@pytest.mark.slow
def test_sm90_compile_of_the_opt_in_path_uses_hardware_tanh_and_fits_shared_memory():
    """tools/dev/kernel_lab/fused_geglu_sass.py compiles both committed Hopper configurations for
    sm_90 with Triton's own ptxas (no GPU): hopper-epi's GeGLU is one MUFU.TANH per element where
    the hopper path spends an exp2 and a reciprocal, its two stores per tile are two TMA stores,
    and its 4 stages fit in Hopper's 227 KB."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.dev.kernel_lab.fused_geglu_sass"],
        cwd=ROOT,
        env={**env, "TRITON_DEFAULT_FP_FUSION": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("configuration"))
    columns = header.split()[3:]
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith("hopper"):
            fields = line.split()
            kb = next(f for f in fields if f.endswith("KB"))
            counts = fields[fields.index(kb) + 2 :]
            rows[fields[0]] = (float(kb[:-2]), dict(zip(columns, map(int, counts), strict=True)))
    shared, epi = rows["hopper-epi"]
    _, hopper = rows["hopper"]
    assert epi["MUFU.TANH"] >= 64 and epi["MUFU.EX2"] == 0
    assert hopper["MUFU.TANH"] == 0 and hopper["MUFU.EX2"] >= 64 and hopper["MUFU.RCP"] >= 64
    assert epi["UTMASTG"] == 2 * hopper["UTMASTG"]
    assert shared <= 227


def test_ncu_driver_refuses_an_unknown_config_before_looking_for_a_gpu(monkeypatch, capsys):
    from tools.dev.kernel_lab import gluon_bench, ncu_fused_mlp

    code, out, err = as_command(
        monkeypatch, capsys, ncu_fused_mlp, gluon_bench.run, "--configs", "hopper,hoper"
    )
    assert code == 2 and out == ""
    assert err.startswith("error: --configs takes hopper,") and "'hopper,hoper'" in err


def test_tuner_on_a_cpu_says_it_needs_a_gpu(monkeypatch, capsys):
    from tools import tune_fused_mlp as tuner
    from tracereader import run

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = as_command(monkeypatch, capsys, tuner, run, "--quick")
    assert code == 2 and err == "error: needs a CUDA GPU\n"
