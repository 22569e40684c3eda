"""The reader grown for Part 3 (attention): attention kernel classes, GEMM precision read from
names, split-K GEMMs counted once, each kernel's footprint and the occupancy worked out from
it, and the findings for the lessons' surprises. On real H100 traces (tests/fixtures/h100),
and on real traces rewritten to stage what a fixture lacks."""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import shapes
from tests.helpers import load_script
from tracereader.analyses import bench as profiled
from tracereader.commands import explain
from tracereader.judge import expectations, findings
from tracereader.names import footprint
from tracereader.names.kernel_classes import CUDA_CORES, TENSOR_CORES, TF32
from tracereader.names.kernel_names import classify, gemm_precision
from tracereader.trace import load as trace_reader

FIXTURES = Path(__file__).parent / "fixtures"
H100 = FIXTURES / "h100"
SPLIT_K = H100 / "01_matmul_add" / "33_fp32_warm_eager.json.gz"
NVJET = H100 / "01_matmul_add" / "4096_bf16_warm_eager.json.gz"
SHAPE = "b8_h16_s1024_d64_bf16"
NAIVE = H100 / "04_a_naive_attention"
INPLACE = H100 / "04_b_inplace_ops_attention"
SDPA = H100 / "04_c_sdpa_attention"

FA2 = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
CUDNN = (
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0"
)
FMHA = (
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
    "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
)
FA3 = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
    "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
    "cute::tuple<cute::C<128>, cute::C<128>, cute::C<64> >, 64, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, true, false> > > >(flash::FlashAttnFwdSm90<...>::Params)"
)
HUB_FA2 = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, false, true, false, false>(flash::Flash_fwd_params)"
)
SOFTMAX_WARP = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, "
    "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
CUNN_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, "
    "c10::BFloat16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, "
    "c10::BFloat16 const*, int)"
)
MATH_GEMM = (
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x2x1_ffma_aligna4_"
    "alignc4_execute_kernel_trt"
)


def staged(tmp_path: Path, source: Path, change) -> trace_reader.Trace:
    """A real trace with `change(events)` applied, read back."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    data["traceEvents"] = change(copy.deepcopy(data["traceEvents"]))
    out = tmp_path / source.name.replace(".gz", "")
    out.write_text(json.dumps(data))
    return trace_reader.load(out)


def kernels_named(events: list[dict], prefix: str) -> list[dict]:
    return [e for e in events if e.get("cat") == "kernel" and e["name"].startswith(prefix)]


def as_kernel(name: str, **args):
    """A change that renames the nvjet GEMM of 01's 4096 trace (and gives it another
    footprint): a kernel no fixture holds, on a real trace's skeleton."""

    def change(events):
        for event in kernels_named(events, "nvjet"):
            event["name"] = name
            event["args"].update(args)
        return events

    return change


# --- classes: attention families, ATen's softmax ---------------------------------------------


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (FA2, "FlashAttention-2 (vendored in PyTorch)"),
        (HUB_FA2, "FlashAttention (flash-attn / kernels Hub)"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Flash_fwd_params)", "FlashAttention"),
        (FA3, "FlashAttention-3 (flash-attn / kernels Hub, Hopper)"),
        (FMHA, "CUTLASS fmha (memory-efficient, xformers)"),
        (CUDNN, "cuDNN generated SDPA"),
        ("_attn_fwd", "Triton attention kernel"),
        ("_fused_attention_kernel", "Triton attention kernel"),
    ],
)
def test_fused_attention_kernels_are_class_attention_with_their_family(name, family):
    klass = classify(name)
    assert klass.cls == "attention"
    assert klass.detail.startswith(family) and klass.facts["family"] == klass.detail


def test_attention_names_say_more_in_their_facts():
    assert {"head_dim": 64, "tile": "128x128", "warps": 4}.items() <= classify(FA2).facts.items()
    assert classify(FMHA).facts["tile"] == "64x64" and classify(FMHA).facts["arch"] == "sm80"
    assert classify(CUDNN).facts["arch"] == "sm90"


def test_flash_attention_3_is_not_taken_for_a_cutlass_gemm():
    assert classify(FA3).cls == "attention"
    assert classify("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>()").cls == (
        "gemm"
    )


@pytest.mark.parametrize("name", [SOFTMAX_WARP, CUNN_SOFTMAX])
def test_aten_softmax_kernels_are_aten_softmax(name):
    klass = classify(name)
    assert (klass.cls, klass.detail) == ("aten", "softmax")


def test_other_aten_kernels_read_as_their_own_name():
    name = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, ...> >(...)"
    assert (classify(name).cls, classify(name).detail) == ("aten", "reduce_kernel")
    assert classify("_geglu_tanh_forward_kernel").cls == "triton"  # no attn: plain Triton


# --- GEMM precision, from the name -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", TENSOR_CORES),
        ("ampere_fp16_h16816gemm_fp16_128x128_ldg8_stages_32x5_nn", TENSOR_CORES),
        ("cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8", TENSOR_CORES),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", TENSOR_CORES),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
            (TENSOR_CORES),
        ),
        ("sm90_gemm_f16_wgmma_tile128x128", TENSOR_CORES),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>()", CUDA_CORES),
        ("ampere_sgemm_128x64_tn", CUDA_CORES),
        (MATH_GEMM, CUDA_CORES),
        ("sm80_xmma_gemm_tf32f32_tf32f32_f32_tn_n_tilesize128x128x16", TF32),
        ("ampere_tf32_s1688gemm_tf32_128x128_ldg8_stages_32x3_nn", TF32),
        ("gemmSN_TN_kernel", ""),
    ],
)
def test_gemm_precision_is_read_from_the_name(name, precision):
    assert gemm_precision(name) == precision
    klass = classify(name)
    assert klass.cls == "gemm"
    assert klass.facts.get("precision", "") == precision
    if precision:
        assert precision in klass.detail  # explain shows it


def test_real_gemms_read_their_precision():
    step = trace_reader.load(SPLIT_K).steps[0]
    sgemm, reduce, _ = step.gpu
    assert sgemm.klass.facts["precision"] == CUDA_CORES
    assert "precision" not in reduce.klass.facts  # the reduce adds; it is no GEMM of its own
    for item in trace_reader.load(NVJET).steps[0].gpu:
        if item.klass.cls == "gemm":
            assert item.klass.facts["precision"] == TENSOR_CORES


# --- split-K: one GEMM, two kernels ----------------------------------------------------------


def test_split_k_gemm_counts_once_and_01s_expectation_holds():
    trace = trace_reader.load(SPLIT_K)
    for step in trace.steps:
        classes = [(i.klass.cls, i.klass.detail) for i in step.gpu]
        assert classes[1] == ("gemm", "split-K reduce")
        assert [i.klass.joins_previous for i in step.gpu] == [False, True, False]
        assert step.count("gemm") == 1
    expect = load_script("01_matmul_add").EXPECT["eager"]
    verdict = expectations.check(trace, expect)
    assert verdict.ok, verdict.mismatches
    (split,) = [f for f in findings.read(trace) if f.topic == "split-K"]
    assert split.message.startswith(
        "aten::mm's GEMM ran as two kernels, cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn"
    )
    assert "cublasLt::splitKreduce_kernel" in split.message
    assert (
        "K dimension" in split.message and "grid of 3 blocks, 1x1x3, for 132 SMs" in split.message
    )


@pytest.mark.slow  # real traces read whole: ~2 s on two busy cores
def test_split_k_finding_only_where_there_is_a_reduce():
    # 03_fused_mlp's fp32 trace has the other split-K pair (tests/test_fused_mlp.py)
    split_k = {SPLIT_K, H100 / "03_fused_mlp" / "b3_s37_d200_h300_fp32_plain_eager.json.gz"}
    for path in sorted(H100.rglob("*.json.gz")):
        if path not in split_k:
            assert not [f for f in findings.read(trace_reader.load(path)) if f.topic == "split-K"]


def test_bench_times_a_split_k_gemm_as_one_kernel():
    trace = trace_reader.load(SPLIT_K)
    model = load_script("01_matmul_add").traffic_model(33, 4, compiled=False)
    times = profiled.kernel_times(trace, model)
    assert not isinstance(times, str), times
    sgemm = sorted(s.gpu[0].dur + s.gpu[1].dur for s in trace.steps)[1]
    add = sorted(s.gpu[2].dur for s in trace.steps)[1]
    assert times == pytest.approx([sgemm / 1e6, add / 1e6])
    assert [cls for cls, _ in profiled.operations(trace.steps[0])] == ["gemm", "elementwise"]


# --- footprint and the occupancy worked out from it ------------------------------------------

H100_PROPS = {
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


def test_occupancy_from_the_footprint_reference_numbers():
    cudnn = {
        "grid": (8, 16, 8),
        "block": (384, 1, 1),
        "registers per thread": 168,
        "shared memory": 134144,
    }
    occ = footprint.occupancy(cudnn, H100_PROPS)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.max_warps) == (1, 12, 64)
    assert footprint.rounded(occ.theoretical_pct) == 19 and occ.estimated_pct == 19
    assert occ.limited_by == "registers and shared memory"
    fa2 = {"grid": (8, 16, 8), "block": (128, 1, 1), "registers per thread": 255}
    occ = footprint.occupancy({**fa2, "shared memory": 49152}, H100_PROPS)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limited_by) == (2, 8, "registers")
    assert occ.theoretical_pct == 12.5 and occ.estimated_pct == 13  # the profiler's 13%


def test_occupancy_of_the_posts_a100_cudnn_kernel():
    """The post's A100 figure: 240 registers x 256 threads leave room for one block, 8 of 64
    warps, 12.5%."""
    a100 = {**H100_PROPS, "computeMajor": 8, "numSms": 108, "sharedMemPerMultiprocessor": 167936}
    kernel = {"grid": (108,), "block": (256,), "registers per thread": 240, "shared memory": 0}
    occ = footprint.occupancy(kernel, a100)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.theoretical_pct) == (1, 8, 12.5)


@pytest.mark.slow  # real traces read whole: ~1.5 s on two busy cores
def test_computed_occupancy_equals_the_profilers_where_it_measured():
    """Every kernel of the H100 fixtures with a non-zero estimate: the same number."""
    checked = 0
    for path in sorted(H100.rglob("*.json.gz")):
        trace = trace_reader.load(path)
        for item in trace.steps[-1].gpu:
            reported = item.args.get("est. achieved occupancy %")
            if item.kind == "kernel" and reported:
                props = trace.device_properties(item.args["device"])
                assert footprint.occupancy(item.args, props).estimated_pct == reported, item.name
                checked += 1
    assert checked >= 5


def test_occupancy_needs_the_fields_it_uses():
    assert footprint.occupancy({"block": (128, 1, 1)}, H100_PROPS) is None
    assert footprint.occupancy({"grid": (1,), "block": (32,), "registers per thread": 8}, {}) is (
        None
    )


def test_explain_marks_the_split_k_reduce_in_the_dispatch_chain(capsys):
    assert explain.main([str(SPLIT_K)]) == 0
    out = capsys.readouterr().out
    assert "aten::mm  -> gemm, gemm (split-K reduce)" in out
    assert "(split-K reduce)" in out.split("CPU dispatch chain")[0]


def test_explain_shows_each_kernels_footprint_text_and_json(capsys):
    assert explain.main([str(NVJET)]) == 0
    out = capsys.readouterr().out.splitlines()
    listing = next(i for i, line in enumerate(out) if "GPU work, in launch order" in line)
    at = next(i for i, line in enumerate(out) if i > listing and "nvjet_sm90_tst_256x128" in line)
    below = " ".join(" ".join(out[at + 1 : at + 6]).split())  # wrapped under the kernel's row
    assert (
        "grid 2x66, block 384, 168 regs/thread, 208.2 KB shared, grid over all waves: 1 "
        "blocks, 12 warps per SM, est. occupancy 0% | footprint: 1 block/SM (registers and "
        "shared memory), 12/64 warps = 19%, 19% with this grid"
    ) in below
    assert explain.main([str(NVJET), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (gemm,) = [i for i in data["traces"][0]["steps"][0]["gpu"] if i["class"] == "gemm"]
    assert {k: gemm["footprint"][k] for k in footprint.FIELDS} == {
        "grid": [2, 66, 1],
        "block": [384, 1, 1],
        "registers per thread": 168,
        "shared memory": 213188,
        "blocks per SM": 1.0,
        "warps per SM": 12.0,
        "est. achieved occupancy %": 0,
    }
    assert gemm["footprint"]["from_footprint"]["theoretical_pct"] == 18.75
    assert gemm["counted_with_previous"] is False
    memset = next(i for i in data["traces"][0]["steps"][0]["gpu"] if i["kind"] == "memset")
    assert memset["footprint"] is None


def test_cudnn_zero_occupancy_is_a_measurement_gap_worked_out_from_its_footprint():
    trace = trace_reader.load(SDPA / f"{SHAPE}_eager_cudnn.json.gz")
    (kernel,) = [i for i in trace.steps[-1].gpu if i.kind == "kernel"]
    assert kernel.klass.detail == "cuDNN generated SDPA" and kernel.runtime == "cuLaunchKernelEx"
    assert kernel.args["est. achieved occupancy %"] == 0
    assert (kernel.args["registers per thread"], kernel.args["shared memory"]) == (168, 134144)
    occ = footprint.occupancy(kernel.args, trace.device_properties(kernel.args["device"]))
    assert (occ.blocks_per_sm, occ.warps_per_sm, footprint.rounded(occ.theoretical_pct)) == (
        1,
        12,
        19,
    )
    (gap,) = [f for f in findings.read(trace) if f.topic == "occupancy"]
    assert gap.message.startswith("cudnn_generated_fort_native_s")
    assert "reads 0% est. achieved occupancy (launched with cuLaunchKernelEx)" in gap.message
    assert "not an idle GPU" in gap.message
    assert "168 registers x 384 threads and 131 KB of shared memory per block" in gap.message
    assert "fits 1 block per SM" in gap.message and "12 of 64 warps = 19%" in gap.message
    assert "above the 48 KB a block gets by default" in gap.message


def test_flash_low_occupancy_is_by_design_and_the_footprint_agrees_with_the_profiler():
    trace = trace_reader.load(SDPA / f"{SHAPE}_eager_flash.json.gz")
    (kernel,) = [i for i in trace.steps[-1].gpu if i.kind == "kernel"]
    assert kernel.klass.detail == "FlashAttention-2 (vendored in PyTorch)"
    assert kernel.args["est. achieved occupancy %"] == 13
    occ = footprint.occupancy(kernel.args, trace.device_properties(kernel.args["device"]))
    assert (occ.blocks_per_sm, occ.limited_by, occ.estimated_pct) == (2, "registers", 13)
    (design,) = [f for f in findings.read(trace) if f.topic == "occupancy"]
    assert design.message.startswith(
        "pytorch_flash::flash_fwd_kernel runs at 13% est. achieved occupancy by design: 255 "
        "registers per thread and 48 KB of shared memory per block leave room for 2 blocks, 8 "
        "of 64 warps per SM (limit: registers)"
    )
    assert "q, k and v and the running softmax on chip" in design.message
    assert "not by its occupancy" in design.message


def test_a_hub_flash_attention_3_kernel_reads_as_attention_in_a_trace(tmp_path):
    """A staged trace: FlashAttention-3's kernel (a cutlass::device_kernel) where a GEMM was."""
    trace = staged(tmp_path, NVJET, as_kernel(FA3))
    (kernel,) = [i for i in trace.steps[0].gpu if i.kind == "kernel" and i.name == FA3]
    assert kernel.klass.cls == "attention" and trace.steps[0].count("gemm") == 0


def test_kernels_that_are_small_or_grid_bound_get_no_occupancy_finding():
    """The H100 fixtures' small kernels read 0% because their grid cannot fill the GPU, which
    the footprint confirms: no finding for those."""
    trace = trace_reader.load(SPLIT_K)
    assert not [f for f in findings.read(trace) if f.topic == "occupancy"]


# --- the attention fixtures: classes, and each finding where it belongs and nowhere else ------


def test_attention_traces_read_as_the_lessons_say():
    for path in (NAIVE / f"{SHAPE}_eager.json.gz", INPLACE / f"{SHAPE}_eager.json.gz"):
        step = trace_reader.load(path).steps[-1]
        (softmax,) = [i for i in step.gpu if i.klass.cls == "aten"]
        assert softmax.name.startswith("void (anonymous namespace)::softmax_warp_forward<")
        assert (softmax.klass.detail, softmax.launched_by) == ("softmax", "aten::_softmax")
        assert step.count("gemm") == 2 and step.count("attention") == 0
    naive = trace_reader.load(NAIVE / f"{SHAPE}_eager.json.gz").steps[-1]
    readings = [(i.klass.detail, i.launched_by) for i in naive.gpu if i.klass.cls == "elementwise"]
    assert readings == [("mul", "aten::mul"), ("masked_fill", "aten::masked_fill_")]
    families = {
        "efficient": "CUTLASS fmha (memory-efficient, xformers)",
        "flash": "FlashAttention-2 (vendored in PyTorch)",
        "cudnn": "cuDNN generated SDPA",
        "auto": "cuDNN generated SDPA",  # SDPA's own pick on this H100
    }
    for backend, family in families.items():
        step = trace_reader.load(SDPA / f"{SHAPE}_eager_{backend}.json.gz").steps[-1]
        (kernel,) = [i for i in step.gpu if i.kind == "kernel"]
        assert (kernel.klass.cls, kernel.klass.detail) == ("attention", family)
    math = trace_reader.load(SDPA / f"{SHAPE}_eager_math.json.gz").steps[-1]
    gemms = [i for i in math.gpu if i.klass.cls == "gemm"]
    assert [g.klass.facts["precision"] for g in gemms] == [CUDA_CORES, CUDA_CORES]
    assert all("ffma" in g.name for g in gemms)
    assert {i.klass.detail for i in math.gpu if i.klass.cls == "elementwise"} == {
        "direct_copy",
        "mul",
        "fill",
        "where",
        "add",
        "isneginf",
        "bfloat16_copy",
    }
    assert {i.klass.detail for i in math.gpu if i.klass.cls == "aten"} == {
        "softmax",
        "triu_tril_kernel",
        "reduce_kernel",
    }


def test_bench_matches_the_fused_attention_kernel_to_its_model():
    sizes = shapes.attention_sizes(SimpleNamespace(batch=8, heads=16, seq=1024, head_dim=64))
    for backend in ("efficient", "flash", "cudnn"):
        trace = trace_reader.load(SDPA / f"{SHAPE}_eager_{backend}.json.gz")
        model = load_script("04_c_sdpa_attention").traffic_model(sizes, 2, backend)
        (seconds,) = profiled.kernel_times(trace, model)
        kernels = sorted(
            next(i.dur for i in s.gpu if i.klass.cls == "attention") for s in trace.steps
        )
        assert seconds == pytest.approx(kernels[1] / 1e6)


def fired(path: Path) -> set[str]:
    """The Part 3 findings a trace gets, by a short name."""
    names = set()
    for f in findings.read(trace_reader.load(path)):
        if f.topic == "memcpy" and "copied its input first" in f.message:
            names.add("copy from clone")
        elif f.topic == "occupancy":
            names.add("by design" if "by design" in f.message else "occupancy gap")
        elif f.topic in ("mask", "precision", "library", "split-K"):
            names.add(f.topic)
    return names


# the lessons' and models' traces; the labelled set (planted causes) is scored on its own
ALL = sorted(p for p in FIXTURES.rglob("*.json.gz") if "labelled" not in p.parts)


@functools.cache
def seen() -> dict[str, set[str]]:
    """Every fixture's findings, read once when a test asks (not at collection: ~15 s)."""
    return {path.relative_to(FIXTURES).as_posix(): fired(path) for path in ALL}


H100_04C = f"h100/04_c_sdpa_attention/{SHAPE}_eager"


@pytest.mark.parametrize(
    ("finding", "where"),
    [
        ("copy from clone", {f"h100/04_a_naive_attention/{SHAPE}_eager.json.gz"}),
        ("mask", {f"{H100_04C}_math.json.gz"}),
        (
            "precision",
            {
                f"{H100_04C}_math.json.gz",
                # fp32 GEMMs beside bf16 ones: the experts' weights that autocast missed
                "h200/models/mixtral_train_l4_h1024_e8k2_b4_s1024_bf16.json.gz",
            },
        ),
        (
            "split-K",
            {
                "h100/01_matmul_add/33_fp32_warm_eager.json.gz",
                "h100/03_fused_mlp/b3_s37_d200_h300_fp32_plain_eager.json.gz",  # fp32 down GEMM
            },
        ),
        ("by design", {f"{H100_04C}_flash.json.gz", f"{H100_04C}_efficient.json.gz"}),
        (
            "library",
            {
                f"{H100_04C}_cudnn.json.gz",
                f"{H100_04C}_auto.json.gz",  # SDPA picked cuDNN
                # FlashAttention-4: FA4's Python interface, then one CuTe-DSL launch, directly,
                # from SDPA's flash op and as 04_d's source
                f"{H100_04C}_fa4.json.gz",
                f"{H100_04C}_fa4-sdpa.json.gz",
                f"h100/04_d_kernels_attention/{SHAPE}_eager_fa4.json.gz",
                # Liger's Triton kernel, launched from Python inside its autograd Function
                *(
                    f"{gpu}/03_kernels_mlp/{shape}_bf16_eager.json.gz"
                    for gpu in ("h100", "h200")
                    for shape in ("b2_s8_d64_h128", "b64_s128_d768_h3072")
                ),
            },
        ),
    ],
)
@pytest.mark.slow  # every fixture read whole
def test_each_part3_finding_fires_where_it_should_and_nowhere_else(finding, where):
    assert {path for path, names in seen().items() if finding in names} == where


@pytest.mark.slow  # every fixture read whole
def test_the_occupancy_gap_is_every_nvjet_or_cudnn_kernel_that_fills_sms():
    gaps = {path for path, names in seen().items() if "occupancy gap" in names}
    assert f"{H100_04C}_cudnn.json.gz" in gaps and f"{H100_04C}_auto.json.gz" in gaps
    for backend in ("math", "efficient", "flash"):  # measured, or nvjet-free
        assert f"{H100_04C}_{backend}.json.gz" not in gaps
    assert f"h100/04_a_naive_attention/{SHAPE}_eager.json.gz" in gaps  # its nvjet GEMMs
    assert "h100/01_matmul_add/33_fp32_warm_eager.json.gz" not in gaps  # grid-bound, truly ~0


def test_findings_for_the_naive_lessons_in_words():
    (copy_,) = [
        f
        for f in findings.read(trace_reader.load(NAIVE / f"{SHAPE}_eager.json.gz"))
        if "copied its input first" in f.message
    ]
    assert copy_.message.startswith(
        "aten::masked_fill copied its input first: a 268.4 MB Memcpy DtoD under "
        "aten::masked_fill > aten::clone in every recorded step"
    )
    assert "the in-place variant (aten::masked_fill_) writes into its input" in copy_.message
    math = {
        f.topic: f for f in findings.read(trace_reader.load(SDPA / f"{SHAPE}_eager_math.json.gz"))
    }
    assert math["mask"].message.startswith(
        "a [1024, 1024] mask is built again in every recorded step (aten::ones, then aten::tril "
        "under aten::scaled_dot_product_attention > aten::_scaled_dot_product_attention_math, 2 "
        "GPU operations for it)"
    )
    assert math["precision"].message.startswith(
        "float32 inside a bf16 run: 2 GEMMs compute in fp32 on CUDA cores, no Tensor cores"
    )
    assert "3 aten::_to_copy casts of bf16 tensors to float32" in math["precision"].message
    cudnn = {
        f.topic: f for f in findings.read(trace_reader.load(SDPA / f"{SHAPE}_eager_cudnn.json.gz"))
    }
    assert cudnn["library"].message.startswith("aten::_cudnn_attention_forward spends ")
    assert "launches one kernel, cudnn_generated_fort_native_s" in cudnn["library"].message
    assert "with cuLaunchKernelEx" in cudnn["library"].message


def test_gemm_precision_is_declared_and_checked_per_input_dtype():
    math = load_script("04_c_sdpa_attention").EXPECT["math"]
    assert math.gemm_precision == CUDA_CORES
    naive = load_script("04_a_naive_attention").EXPECT["eager"]
    assert naive.precision_for("bf16") == TENSOR_CORES and naive.precision_for("fp32") is None
    trace = trace_reader.load(SDPA / f"{SHAPE}_eager_math.json.gz")
    verdict = expectations.check(trace, math)
    assert (
        "  ok        GEMMs on fp32 CUDA cores               seen: 2 fp32 CUDA cores per step"
        in (verdict.lines)
    )
    wrong = expectations.Expect(gemm_precision={"bf16": TENSOR_CORES})
    assert expectations.check(trace, wrong).mismatches == [
        "GEMMs on bf16/fp16 Tensor cores: seen 2 fp32 CUDA cores per step"
    ]
    assert expectations.check(trace, expectations.Expect(gemm_precision={"fp16": TF32})).ok
    with pytest.raises(ValueError, match="gemm_precision"):
        expectations.Expect(gemm_precision="fp8 magic")
    with pytest.raises(ValueError, match="gemm_precision"):
        expectations.Expect(gemm_precision={"int8": CUDA_CORES})


def test_explain_reads_an_attention_trace_with_footprints(capsys):
    assert explain.main([str(SDPA / f"{SHAPE}_eager_flash.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "(FlashAttention-2 (vendored in PyTorch))" in out
    assert (
        "grid 8x8x16, block 128, 255 regs/thread, 48 KB shared, grid over all waves: 7.76 "
        "blocks, 31 warps per SM, "
        "est. occupancy 13% | footprint: 2 blocks/SM (registers), 8/64 warps = 13%, 13% with "
        "this grid"
    ) in " ".join(out.split())  # the footprint wraps at 100 characters
