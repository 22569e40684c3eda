"""The trace reader, findings, expectations, explain and compare, on real H200 traces recorded by
the scripts (tests/fixtures/h200, see its README) and on CPU traces made here."""

from __future__ import annotations

import copy
import gzip
import json
import math
from pathlib import Path

import pytest

from tests.helpers import load_script, run_script
from tracereader.analyses import diff
from tracereader.commands import compare, explain
from tracereader.judge import expectations, findings
from tracereader.names.kernel_names import classify, decode_fused_ops, labels
from tracereader.reading import Reading
from tracereader.render import trace as render
from tracereader.trace import load as trace_reader

H200 = Path(__file__).parent / "fixtures" / "h200"
H100 = Path(__file__).parent / "fixtures" / "h100"
POSTS_MLP = "b64_s128_d768_h3072_bf16"
# The lessons' traces (a folder per lesson); h100/models/ holds other models' steps.
# The lessons' traces whose EXPECT is per mode (eager, compile, a backend); 08's is per phase
# (prefill, decode), held on its traces by tests/test_generate_h200.py.
FIXTURES = sorted(
    p
    for p in [*H200.rglob("*.json.gz"), *H100.rglob("*.json.gz")]
    if p.parent.name[:2].isdigit() and p.parent.name != "08_generate"
)


def fixture(script: str, tag: str) -> trace_reader.Trace:
    return trace_reader.load(H200 / script / f"{tag}.json.gz")


def rewrite(tmp_path: Path, source: Path, change) -> Path:
    """A copy of a real trace with `change(events)` applied: to stage a broken profile."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    data["traceEvents"] = change(copy.deepcopy(data["traceEvents"]))
    out = tmp_path / source.name.replace(".gz", "")
    out.write_text(json.dumps(data))
    return out


def declared_mode(script, path: Path) -> str:
    """The EXPECT a lesson checked its trace against: 04_c's traces end in their backend's
    name (its EXPECT is per backend), the others say eager or compile (04_d's end in its
    variant, fa2 or fa3, and are eager)."""
    last = path.name.removesuffix(".json.gz").rsplit("_", 1)[-1]
    if last in script.EXPECT:
        return last
    return "compile" if "_compile" in path.name else "eager"


# The scripts' own declared expectations hold on every real GPU trace.
@pytest.mark.parametrize(
    "path", FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}"
)
def test_declared_expectations_hold_on_real_gpu_traces(path):
    script = load_script(path.parent.name)
    expect = script.EXPECT[declared_mode(script, path)]
    sibling = None
    if expect.gemms_as_in:
        sibling = trace_reader.load(path.with_name(path.name.replace("_compile", "_eager")))
    verdict = expectations.check(trace_reader.load(path), expect, sibling=sibling)
    assert verdict.ok, verdict.mismatches


def test_a_wrong_guess_is_reported_as_a_mismatch():
    trace = fixture("03_simple_mlp", f"{POSTS_MLP}_eager")
    wrong = expectations.Expect(gpu={"gemm": 3, "inductor": 1}, cpu_absent=("aten::gelu",))
    verdict = expectations.check(trace, wrong)
    assert verdict.mismatches == [
        "1 inductor per step: seen 0",
        "no CPU op aten::gelu: seen present in ProfilerStep#2, ProfilerStep#3, ProfilerStep#4",
    ]


def test_linear_one_gemm_with_bias_epilogue_launched_by_addmm():
    trace = fixture("02_linear", "b1024_in32_out64_bf16_eager")
    assert trace.device == "NVIDIA H200"
    assert [s.name for s in trace.steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    for step in trace.steps:
        (gemm,) = step.gpu
        assert gemm.klass.cls == "gemm" and gemm.launched_by == "aten::addmm"
        assert gemm.klass.facts["epilogue"].startswith("bias")
        assert trace_reader.silent_ops(step) == ["aten::t", "aten::transpose", "aten::as_strided"]
        linear = next(op for op in step.cpu_ops if op.name == "aten::linear")
        chain = [op.name for op in trace_reader.subtree(step, linear)]
        assert chain == [
            "aten::linear",
            "aten::t",
            "aten::transpose",
            "aten::as_strided",
            "aten::addmm",
        ]


def test_mlp_eager_gpu_work_in_launch_order_with_launchers():
    step = fixture("03_simple_mlp", f"{POSTS_MLP}_eager").steps[0]
    kernels = [
        (i.klass.cls, i.klass.detail.split(",")[0], i.launched_by)
        for i in step.gpu
        if i.kind == "kernel"
    ]
    assert kernels == [
        ("gemm", "tile 256x128", "aten::mm"),
        ("gemm", "tile 256x128", "aten::mm"),
        ("elementwise", "gelu", "aten::gelu"),
        ("elementwise", "mul", "aten::mul"),
        ("gemm", "tile 192x128", "aten::mm"),
    ]
    assert set(trace_reader.silent_ops(step)) == {
        "aten::t",
        "aten::transpose",
        "aten::as_strided",
        "aten::reshape",
        "aten::view",
        "aten::_unsafe_view",
    }


def test_compiled_matmul_add_shows_the_hidden_memcpy_and_cache_hits():
    trace = fixture("01_matmul_add", "64_bf16_warm_compile")
    step = trace.steps[0]
    assert [(i.kind, i.klass.detail.split(",")[-1].strip(), i.launched_by) for i in step.gpu] == [
        ("memcpy", "DtoD", "aten::addmm"),
        ("kernel", "epilogue beta*C", "aten::addmm"),
    ]
    topics = {f.topic: f for f in findings.read(trace)}
    assert "Memcpy DtoD" in topics["memcpy"].message
    assert "the same in every step (cache hits)" in topics["compile"].message
    assert topics["bound"].message.startswith("overhead-bound")
    assert "no occupancy queries" in topics["launch"].message
    assert "cudaDeviceSynchronize after the last step" in topics["profiler"].message


def test_liger_kernel_is_classed_as_hand_written_triton():
    step = fixture("03_kernels_mlp", f"{POSTS_MLP}_eager").steps[0]
    (liger,) = [i for i in step.gpu if i.klass.cls == "triton"]
    assert liger.name == "_geglu_tanh_forward_kernel"
    assert liger.launched_by == "LigerGELUMulFunction"


@pytest.mark.parametrize(
    ("name", "cls", "facts"),
    [
        # The posts' A100 names and Hopper's: classes by pattern, never by one architecture.
        (
            "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8",
            "gemm",
            {"tile": "32x32", "layout": "tn"},
        ),
        (
            "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
            "gemm",
            {"tile": "128x256", "layout": "tn", "k_tile_x_stages": "64x3"},
        ),
        ("nvjet_sm90_tst_64x8_64x16_1x4_h_badd_NNT", "gemm", {"tile": "64x8", "layout": "NNT"}),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
            "gemm",
            {"layout": "tn"},
        ),
        ("triton_red_fused_sum_1", "inductor", {"kind": "reduction", "fused_ops": ["sum"]}),
        ("triton_per_fused__softmax_0", "inductor", {"fused_ops": ["_softmax"]}),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy", {}),
        ("_geglu_tanh_forward_kernel", "triton", {}),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "collective", {}),
    ],
)
def test_classification_by_pattern(name, cls, facts):
    klass = classify(name)
    assert klass.cls == cls
    assert facts.items() <= klass.facts.items()


def test_inductor_names_decode_into_their_fused_ops():
    assert decode_fused_ops("_unsafe_view_gelu_mul") == ["_unsafe_view", "gelu", "mul"]
    assert classify("triton_poi_fused__unsafe_view_gelu_mul_0").detail == (
        "pointwise: _unsafe_view + gelu + mul"
    )
    assert classify("triton_tem_fused_mm_t_view_0").facts["fused_ops"] == ["mm", "t", "view"]
    # a combo kernel's name holds its number only (H200 and H100, torch 2.11, 08_generate
    # --gemv): no op called "2"
    combo = classify("triton_poi_fused_2")
    assert (combo.cls, combo.facts["fused_ops"]) == ("inductor", [])
    assert combo.detail == "pointwise, ops not in its name (as Inductor names its combo kernels)"
    assert classify("triton_red_fused_10").facts == {"kind": "reduction", "fused_ops": []}
    # FlexAttention's template is attention (H200, torch 2.11); its combining reduction is not
    flex = "triton_tem_fused__to_copy__unsafe_view_add_cat_flex_attention_index_mul_neg_0"
    assert classify(flex).cls == "attention"
    assert classify(flex.replace("_tem_", "_per_")).cls == "inductor"
    # max-autotune's GEMM template (H100, torch 2.11), its epilogue fused or not, is a GEMM
    assert classify("triton_tem_fused__unsafe_view_mm_mul_silu_split_t_view_9").cls == "gemm"
    assert classify("triton_tem_fused_mm_t_view_0").cls == "gemm"
    # at one row max-autotune lowers a GEMV as a reduction over the weight's transpose, the
    # norm before it fused in (H200 and H100, torch 2.11, 08_generate's decode): a GEMM; a
    # reduction reading an mm's result (the head's argmax) and the rotary embedding after the
    # qkv GEMV (pointwise) are not
    assert classify("triton_red_fused__fused_rms_norm_mm_t_view_8").cls == "gemm"
    assert classify("triton_red_fused__unsafe_view_mm_mul_silu_split_t_view_11").cls == "gemm"
    assert classify("triton_red_fused_argmax_copy_mm_select_16").cls == "inductor"
    rope = "triton_poi_fused__unsafe_view_add_cat_index_index_put_mm_mul_neg_split_t_view_2"
    assert classify(rope).cls == "inductor"


def test_compare_eager_and_compiled_mlp():
    eager = fixture("03_simple_mlp", f"{POSTS_MLP}_eager")
    compiled = fixture("03_simple_mlp", f"{POSTS_MLP}_compile")
    result = diff.compare(eager, compiled)
    assert result["gemms_identical"] and not result["gpu_identical"]
    assert [e["class"] for e in result["only_in_a"]] == ["elementwise", "elementwise"]
    assert [e["class"] for e in result["only_in_b"]] == ["inductor"]
    # Fusion saves one write and one read of the [8192, 3072] bf16 intermediate.
    assert result["extra_bytes_a"] - result["extra_bytes_b"] == 2 * 8192 * 3072 * 2
    assert "aten::gelu" in result["cpu_ops_gone"] and "aten::linear" in result["cpu_ops_gone"]
    assert any(n.startswith("Torch-Compiled Region") for n in result["cpu_ops_new"])


M, K, N, B = 8, 4, 6, 3


@pytest.mark.parametrize(
    ("shapes", "written"),
    [
        ([(M, K), (K, N)], M * N),  # aten::mm: the product is written
        ([(M, K), (K, N), (M, N)], 0),  # aten::mm.out, as compiled code calls it
        ([(N,), (M, K), (K, N)], M * N),  # aten::addmm with a bias row
        ([(M, N), (M, K), (K, N)], M * N),  # a full [M, N] bias is read, not the output
        ([(B, M, K), (B, K, N)], B * M * N),  # aten::bmm
        ([(B, M, N), (B, M, K), (B, K, N)], B * M * N),  # aten::baddbmm
    ],
)
def test_compare_counts_a_gemms_operands_and_its_product(shapes, written):
    inputs = sum(math.prod(s) for s in shapes) * 2
    assert diff._gemm_bytes(shapes, 2, inputs) == inputs + written * 2


@pytest.mark.parametrize("shapes", [[(M, K), (K,)], [(M, K), (N, K)], [(K,)]])
def test_compare_has_no_gemm_estimate_without_two_contracting_matrices(shapes):
    assert diff._gemm_bytes(shapes, 2, 100) is None  # mv, a mismatch, a vector


def test_compare_linear_eager_and_compiled_same_kernel():
    result = diff.compare(
        fixture("02_linear", "b1024_in32_out64_bf16_eager"),
        fixture("02_linear", "b1024_in32_out64_bf16_compile"),
    )
    assert result["gpu_identical"] and result["gemms_identical"]
    assert sorted(set(result["cpu_ops_gone"])) == [
        "aten::as_strided",
        "aten::linear",
        "aten::t",
        "aten::transpose",
    ]


def test_explain_and_compare_commands_text_and_json(capsys):
    path = str(H200 / "03_simple_mlp" / f"{POSTS_MLP}_compile.json.gz")
    assert explain.main([path]) == 0
    out = capsys.readouterr().out
    assert "pointwise: _unsafe_view + gelu + mul" in out and "findings:" in out
    assert explain.main([path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (read,) = data["traces"]
    assert data["schema_version"] == 2 and read["unit"] == "step"
    assert len(read["steps"]) == 3 and read["device"]["name"] == "NVIDIA H200"
    assert [i["class"] for i in read["steps"][0]["gpu"] if i["kind"] == "kernel"] == [
        "gemm",
        "gemm",
        "inductor",
        "gemm",
    ]
    eager = path.replace("_compile", "_eager")
    assert compare.main([eager, path]) == 0
    assert "GEMM kernels: byte-for-byte identical" in capsys.readouterr().out
    assert compare.main([eager, path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gemms_identical"] is True


def test_no_recorded_steps_reads_the_window_and_says_so(tmp_path):
    source = H200 / "02_linear" / "b8_in4_out6_bf16_eager.json.gz"
    path = rewrite(
        tmp_path,
        source,
        lambda ev: [e for e in ev if not str(e.get("name", "")).startswith("Profiler")],
    )
    found = findings.read(trace_reader.load(path))
    assert not [f for f in found if f.problem]
    (unit,) = [f for f in found if f.topic == "unit"]
    assert "the whole recorded window is read as one unit" in unit.message


def test_gpu_run_without_kernels_points_at_cupti(tmp_path):
    source = H200 / "02_linear" / "b8_in4_out6_bf16_eager.json.gz"
    path = rewrite(tmp_path, source, lambda ev: [e for e in ev if e.get("cat") != "kernel"])
    problems = [f for f in findings.read(trace_reader.load(path)) if f.problem]
    assert len(problems) == 1 and "CUPTI" in problems[0].message


def test_recompile_inside_the_recorded_steps_is_a_health_problem(tmp_path):
    source = H200 / "02_linear" / "b8_in4_out6_bf16_compile.json.gz"

    def recompile_last_step(ev):
        regions = [e for e in ev if str(e.get("name", "")).startswith("Torch-Compiled Region")]
        max(regions, key=lambda e: e["ts"])["name"] = "Torch-Compiled Region: 0/1"
        return ev

    path = rewrite(tmp_path, source, recompile_last_step)
    problems = [f for f in findings.read(trace_reader.load(path)) if f.problem]
    assert problems and "recompile" in problems[0].message


def test_two_compiled_frames_are_not_a_recompile(tmp_path):
    """A prefill and a decode step compiled apart run regions 0/0 and 1/0: two frames, each
    compiled once. Only a frame's second compilation (0/1) is a recompile."""
    source = H200 / "02_linear" / "b8_in4_out6_bf16_compile.json.gz"

    def second_frame(ev, name):
        regions = [e for e in ev if str(e.get("name", "")).startswith("Torch-Compiled Region")]
        max(regions, key=lambda e: e["ts"])["name"] = name
        return ev

    for name, flagged in (
        ("Torch-Compiled Region: 1/0", False),
        ("Torch-Compiled Region: 0/1", True),
    ):
        path = rewrite(tmp_path, source, lambda ev, name=name: second_frame(ev, name))
        problems = [f for f in findings.read(trace_reader.load(path)) if f.problem]
        assert bool([p for p in problems if "recompile" in p.message]) == flagged, name


def test_step_to_step_variation_of_one_kernel_is_pointed_out(tmp_path):
    source = H200 / "03_simple_mlp" / f"{POSTS_MLP}_eager.json.gz"

    def slow_first_gelu(ev):
        gelus = sorted(
            (e for e in ev if "GeluCUDAKernelImpl" in str(e.get("name"))), key=lambda e: e["ts"]
        )
        gelus[0]["dur"] *= 1.5
        return ev

    found = findings.read(trace_reader.load(rewrite(tmp_path, source, slow_first_gelu)))
    variation = [f for f in found if f.topic == "variation"]
    assert len(variation) == 1
    assert variation[0].message.startswith("elementwise gelu (by aten::gelu) took 31.4 to 47.8 us")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"   \n",
        b'{"traceEvents": [{"ph": "X", "name": "a"',
        b'{"hello": "world"}',
        b"\x1f\x8b\x08\x00garbage",
        b"[1, 2, 3]",
    ],
)
def test_bad_trace_files_are_one_line_and_exit_2(content, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    for command in (
        lambda: explain.main([str(path)]),
        lambda: compare.main([str(path), str(path)]),
    ):
        with pytest.raises(SystemExit) as exit_:
            command()
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.splitlines()) == 1


def test_truncated_real_trace_is_refused(tmp_path, capsys):
    whole = gzip.decompress((H200 / "02_linear" / "b8_in4_out6_bf16_eager.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SystemExit):
        explain.main([str(path)])
    assert "not valid JSON (truncated?)" in capsys.readouterr().err


def test_cpu_trace_made_here_reads_as_cpu_only(tmp_path, capsys):
    assert run_script("02_linear", "--batch", "8", "--traces-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "expected vs seen" in out and "all as expected" in out
    trace = trace_reader.load(tmp_path / "02_linear" / "b8_in32_out64_bf16_eager_cpu.json")
    assert trace.device is None and trace.gpu_items == 0 and len(trace.steps) == 3
    assert findings.read(trace)[0].message.startswith("CPU-only trace")
    text = render.text(Reading(trace))
    assert "aten::linear" in text and "launched no GPU work" not in text  # nothing could


def test_strict_turns_a_mismatch_into_exit_3(tmp_path, monkeypatch, capsys):
    script = load_script("02_linear")
    wrong = dict(script.EXPECT, eager=expectations.Expect(cpu_present=("aten::add",)))
    monkeypatch.setattr(script, "EXPECT", wrong)
    assert run_script("02_linear", "--batch", "8", "--traces-dir", str(tmp_path)) == 0
    assert "MISMATCH  CPU op aten::add" in capsys.readouterr().out
    assert run_script("02_linear", "--batch", "8", "--traces-dir", str(tmp_path), "--strict") == 3
    assert "does not match the declared expectation" in capsys.readouterr().err


def test_compare_charges_a_memcpy_its_own_bytes_twice():
    """addmm's Memcpy DtoD copies b (4096 x 4096 bf16) into the output: it reads and writes
    those bytes, not the addmm's three inputs plus an output."""
    result = diff.compare(
        fixture("01_matmul_add", "4096_bf16_warm_eager"),
        fixture("01_matmul_add", "4096_bf16_warm_compile"),
    )
    (memcpy,) = [e for e in result["only_in_b"] if e["class"] == "memcpy"]
    assert memcpy["bytes"] == 2 * 4096 * 4096 * 2
    memset = next(
        i
        for i in fixture("01_matmul_add", "4096_bf16_warm_compile").steps[0].gpu
        if i.kind == "memset"
    )
    assert diff.item_bytes(memset) == memset.args["bytes"] == 4  # written once


def test_compare_labels_keep_what_tells_the_gemms_apart(capsys):
    for size in ("64", "4096"):
        eager = str(H200 / "01_matmul_add" / f"{size}_bf16_warm_eager.json.gz")
        compiled = eager.replace("_eager", "_compile")
        assert compare.main([eager, compiled]) == 0
        table = capsys.readouterr().out.split("average GPU time per kernel")[1].splitlines()[1:]
        rows = [line.split()[0] for line in table if line.strip().startswith("nvjet")]
        assert len(rows) == 2 and len(set(rows)) == 2
        assert any("_bz_" in r for r in rows) and any("_badd_" in r for r in rows)
    names = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()",
        "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>>()",
    ]
    assert len(set(labels(names, 32).values())) == 2  # both read "elementwise add" alone


def test_compare_two_cpu_only_traces_says_there_is_no_gpu_work(tmp_path, capsys):
    def cpu_only(source: Path) -> Path:
        data = json.loads(gzip.decompress(source.read_bytes()))
        del data["deviceProperties"]
        keep = ("cpu_op", "user_annotation")
        data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") in keep]
        out = tmp_path / source.name.replace(".gz", "")
        out.write_text(json.dumps(data))
        return out

    a = cpu_only(H200 / "02_linear" / "b8_in4_out6_bf16_eager.json.gz")
    b = cpu_only(H200 / "02_linear" / "b8_in4_out6_bf16_compile.json.gz")
    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "GPU work: none in either trace (CPU-only traces)" in out
    assert "identical" not in out and "GPU time per step" not in out
    assert compare.main([str(a), str(a), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cpu_only"] is True
    assert result["gpu_identical"] is None and result["gemms_identical"] is None


def test_allocator_calls_inside_the_recorded_steps_are_pointed_out():
    for mode in ("eager", "compile"):
        trace = fixture("01_matmul_add", f"4096_bf16_warm_{mode}")
        (found,) = [f for f in findings.read(trace) if f.topic == "allocator"]
        assert found.message.startswith("3 allocator calls (cudaMalloc x3, ")
        assert all(f"ProfilerStep#{n} (" in found.message for n in (2, 3, 4))
        assert "not steady state" in found.message
    quiet = [
        fixture("01_matmul_add", "64_bf16_warm_eager"),
        *(trace_reader.load(p) for p in sorted((H200 / "02_linear").glob("*.json.gz"))),
    ]
    for trace in quiet:
        assert not [f for f in findings.read(trace) if f.topic == "allocator"], trace.path


def test_a_compiled_run_is_not_checked_against_another_machines_eager_trace(tmp_path, capsys):
    """An H100 eager trace beside an H200 compiled run (or another torch) must not turn
    different kernel libraries into a MISMATCH: look says why it does not compare them."""
    import shutil

    from common import outputs, profiling

    lesson = load_script("02_linear")
    folder = tmp_path / "02_linear"
    folder.mkdir()
    compiled = folder / "b8_in4_out6_bf16_compile.json.gz"
    shutil.copy(H200 / "02_linear" / compiled.name, compiled)
    eager = folder / "b8_in4_out6_bf16_eager.json.gz"
    shutil.copy(H200.parent / "h100" / "02_linear" / eager.name, eager)
    seen = profiling.look(
        outputs.Outputs(compiled, compiled.with_suffix(".txt")), lesson.EXPECT["compile"]
    )
    out = capsys.readouterr().out
    assert "came from NVIDIA H100 80GB HBM3" in out and "this one from NVIDIA H200" in out
    assert "GEMM names not compared" in out and "MISMATCH" not in out
    assert seen.as_expected
    # Recorded on one machine, the names are compared again.
    shutil.copy(H200 / "02_linear" / eager.name, eager)
    profiling.look(
        outputs.Outputs(compiled, compiled.with_suffix(".txt")), lesson.EXPECT["compile"]
    )
    assert "GEMM names equal eager's" in capsys.readouterr().out


def test_a_reduction_named_like_a_gemv_with_a_small_grid_is_not_one(tmp_path):
    """Inductor's GEMV reductions spread over hundreds of blocks (256-6144 at 8B); a reduction
    that only reads a GEMV's output can carry its mm and t in its name (a per-head norm after
    the qkv GEMV) and launches tens of blocks or one: read as Inductor's, not a GEMM."""
    import json

    from tracereader.trace import load as trace_load

    name = "triton_red_fused__fused_rms_norm_mm_t_view_8"
    events = []
    for i, grid in enumerate(([768, 1, 1], [40, 1, 1])):
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 100 * i, "dur": 3, "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 100 * i + 10,
             "dur": 5, "args": {"correlation": i + 1, "stream": 7, "device": 0, "grid": grid,
                                "block": [128, 1, 1]}},
        ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    items = trace_load.load(path).gpu_all
    assert [i.klass.cls for i in items] == ["gemm", "inductor"]
    assert items[1].klass.detail == "reduction: _fused_rms_norm + mm + t + view"
