"""Kernel classes on real names: every library's and architecture's GEMMs, convolutions,
attention and communication kernels read as such, whatever GPU recorded them.

The names are real kernel names, taken from other projects' traces (../shared/external-traces:
HTA's test data, kineto's 2021 ResNet-50 samples, DeepSeek-V3's training step, an AMD MI250)
and from public profiles of Blackwell and CuTe DSL kernels. Tests that read the traces
themselves skip where the folder is absent.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from functools import cache

import pytest

from tests.helpers import EXTERNAL_TRACES, ROOT, read_trace
from tracereader.names.kernel_classes import (
    CLASSES,
    CUDA_CORES,
    FP8,
    GROUPS,
    TENSOR_CORES,
    TF32,
    group,
)
from tracereader.names.kernel_names import (
    classify,
    collective_kind,
    gemm_precision,
    is_collective,
    readable,
)
from tracereader.names.name_parts import split_name

needs_traces = pytest.mark.skipif(
    not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces"
)
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}  # 2021: Kernel...


@cache
def gpu_time(relative: str) -> Counter:
    """Total GPU time by kernel name in one external trace (both trace formats)."""
    events = read_trace(EXTERNAL_TRACES / relative)
    time: Counter = Counter()
    for event in events:
        if event.get("ph") == "X" and str(event.get("cat", "")).lower() in GPU_CATEGORIES:
            time[event["name"]] += event.get("dur", 0)
    return time


def time_by_group(relative: str) -> Counter:
    out: Counter = Counter()
    for name, us in gpu_time(relative).items():
        out[group(classify(name).cls)] += us
    return out


RESNET_2021 = (
    "kineto/resnet50_w0_run1.pt.trace.json.gz",
    "kineto/resnet50_w0_run2.pt.trace.json.gz",
    "kineto/resnet50_w4.pt.trace.json.gz",
    "kineto/resnet50_autograd_w0.pt.trace.json.gz",
)


# --- GEMMs of every library, and the kernels that join them ----------------------------------

GEMVX = (
    "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, "
    "float, false, true, false, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float "
    "const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
    "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)"
)
MANGLED_CONV = (
    "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock"
    "22ImplicitGemmMultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgradOutput"
    "GradientTileAccessIteratorOptimizedINS_11MatrixShapeILi128ELi32EEENS_10bfloat16_tEEEEEEEE"
)
GEMMS = [
    # cuBLAS on a V100 and an A100 (2021 ResNet-50, HTA's traces)
    "volta_sgemm_128x64_nn",
    "volta_cgemm_32x32_tn",
    "ampere_sgemm_32x32_sliced1x4_tn",
    "void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*, float const*, "
    "int, int, int, int, int, int, float const*, float const*, float, float, int, int, int*, int*)",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
    "cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched"
    "<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<"
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float>, float>, float, float)",
    GEMVX,
    "void gemmSN_TN_kernel_64addr<float, 128, 16, 2, 4, 8, 9, false, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >"
    "(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
    # MAGMA's GEMM inside cuBLASLt: its cublasLtEpilogue_t parameter makes it no epilogue kernel
    "void magma_sgemmEx_kernel<float, float, float, false, false, 6, 3, 5, 3, 3>(int, int, int, "
    "Tensor, int, Tensor, int, Tensor, int, Tensor, int, int, int, float const*, float const*, "
    "float, float, int, cublasLtEpilogue_t, int, void const*, long)",
    # rocBLAS/Tensile on an MI250 (HTA's amd_mi250)
    "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1"
    "_CLR1_CADS0_EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0_LPA0_LPB0_LPM0",
    # DeepSeek-V3's fp8 grouped GEMM, a CUTLASS device kernel
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>"
    "(dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel::Params)",
    # Blackwell: cuBLAS's nvjet with a 2-CTA MMA and in-kernel split-K, CUTLASS 3
    "nvjet_sm100_tst_128x256_64x6_2x1_2cta_v_bz_TNT",
    "nvjet_sm100_tst_32x64_64x16_4x2_2cta_h_bz_splitK_bias_TNN",
    "cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_128x128x16_1x1x1_3_tnn_align1_bias_f32_relu",
    # CuTe DSL: QuACK's gated GEMM, a CUTLASS example
    "kernel_cutlass_kernel_quackepiloguefrontendGemmMod_linear_act_epi_object_at__tensor_sm90_0",
    "kernel_cutlass_kernel___main__PersistentDenseGemmKernel_object_at__TiledMMA_ThrLayoutVMNK1"
    "1110000_PermutationMNK____MMAAtom_ThrID10_ShapeMNK1281288_TVLayoutA112881281128_0",
]


@pytest.mark.parametrize("name", GEMMS)
def test_gemms_of_every_library_and_architecture_are_gemms(name):
    klass = classify(name)
    assert (klass.cls, klass.joins_previous) == ("gemm", False)
    assert group(klass.cls) == "GEMM"


# The second kernel of one GEMM (or one cuDNN convolution): counted with the kernel before it.
SECOND_KERNELS = [
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, "
        "false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float "
        "const*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
        "gemm",
    ),
    # older cuBLAS: the same reduce without its namespace
    (
        "void splitKreduce_kernel<float, float, float, float>(cublasSplitKParams<float>, float "
        "const*, float const*, float*, float const*, float const*, float const*)",
        "gemm",
    ),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
        "alignc4_execute_split_k_kernel__5x_cublas",
        "gemm",
    ),
    # cuBLASLt's epilogue (bias, GELU) as a kernel of its own
    (
        "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, "
        "float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, "
        "int*)",
        "gemm",
    ),
    (
        "void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, true, 1>"
        "(int, int, long, float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, "
        "float*, long, int*)",
        "gemm",
    ),
    # cuDNN's weight-gradient convolutions split K too
    (
        "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16"
        "_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_split_k_kernel_cudnn_train",
        "conv",
    ),
    (
        "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<"
        "cutlass_cudnn_train::MatrixShape<4, 128>, cutlass_cudnn_train::epilogue::thread::"
        "LinearCombination<float, 4, float, float>, cutlass_cudnn_train::reduction::thread::"
        "ReduceAdd<float, float, 4>, 4> >(cutlass_cudnn_train::reduction::kernel::ReduceSplitK<"
        "cutlass_cudnn_train::MatrixShape<4, 128> >::Params)",
        "conv",
    ),
]


@pytest.mark.parametrize(("name", "cls"), SECOND_KERNELS)
def test_split_k_reduces_and_epilogue_kernels_join_the_kernel_before_them(name, cls):
    klass = classify(name)
    assert (klass.cls, klass.joins_previous) == (cls, True)


# --- convolutions ----------------------------------------------------------------------------

CONVS = [
    # cuDNN on a V100 (2021 ResNet-50): implicit GEMM, Winograd, FFT, the gradients, helpers
    "volta_scudnn_128x64_relu_interior_nn_v1",
    "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, "
    "int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, "
    "int, float, float, int, float const*, float const*, bool, int, int)",
    "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, "
    "int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
    "void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, "
    "float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, "
    "int, int, int, int)",
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused"
    "::WinogradDataParams<float, float>)",
    "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)",
    "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, "
    "int, int, float const*, float*, float, float)",
    # cuDNN on an A100 (HTA's traces): xmma fprop/dgrad/wgrad, CUTLASS inside cuDNN, mangled
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_"
    "stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn_infer",
    "void cutlass_cudnn_train::Kernel<cutlass_tensorop_s1688wgrad_optimized_tf32_256x64_16x4_nhwc"
    "_align4>(cutlass_tensorop_s1688wgrad_optimized_tf32_256x64_16x4_nhwc_align4::Params)",
    MANGLED_CONV,
    # cuDNN's workspace set-up before a weight gradient on an H100
    # (tools/dev/reader_validation/kernel_classes_gpu.py)
    "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::"
    "implicit_gemm::wgrad_indexed::Warp_specialized_params>(int)",
    # ATen's own depthwise convolution
    "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<1, float, int>("
    "at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, int>)",
]


@pytest.mark.parametrize("name", CONVS)
def test_convolutions_are_conv_not_gemm_or_other(name):
    klass = classify(name)
    assert (klass.cls, klass.joins_previous) == ("conv", False)


@pytest.mark.slow  # other projects' ResNet-50 traces
@needs_traces
@pytest.mark.parametrize("relative", RESNET_2021)
def test_resnet_2021_reads_as_convolutions_first_with_no_triton(relative):
    """A 2021 ResNet-50 step: its time by class puts convolutions first (they were "other" and
    "gemm" before), and nothing in it is Triton; what stays "other" is cuBLAS's complex
    transpose of cuDNN's FFT path."""
    by_group = time_by_group(relative)
    assert by_group.most_common(1)[0][0] == "conv"
    classes = {name: classify(name).cls for name in gpu_time(relative)}
    assert "triton" not in classes.values()
    others = {split_name(n).function for n, cls in classes.items() if cls == "other"}
    assert others <= {"transpose_readWrite_alignment_kernel"}


# --- precision -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        # float inputs on the 16x8x8 Tensor core MMA: TF32, never bf16/fp16
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>("
            "cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)",
            TF32,
        ),
        ("nvjet_sss_tf32_128x256_TNT", TF32),
        (
            "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_"
            "stage5_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer",
            TF32,
        ),
        ("cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_32x1_tn_align2", TENSOR_CORES),
        ("volta_scudnn_128x64_relu_interior_nn_v1", CUDA_CORES),
        (
            "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>"
            "(dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel::Params)",
            FP8,
        ),
        (
            "cutlass3x_sm100_bstensorop_s256x128x32gemm_block_scaled_ue4m3xf4_ue4m3xf4_f32_bf16_"
            "bf16_256x128x256_2x1x1_0_tnt_align32_q_2sm",
            FP8,
        ),
        # a gemv's parameters name __half operands; its own name says nothing of its math
        (
            "void gemmk1_kernel<float, 256, 5, false, false, false, false, "
            "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half "
            "const>, cublasGemvTensorStridedBatched<__half>, float, 0>(cublasGemmk1Params<float, "
            "cublasGemvTensorStridedBatched<__half const>>)",
            "",
        ),
    ],
)
def test_precision_is_what_the_kernels_own_name_says(name, precision):
    assert gemm_precision(name) == precision
    assert classify(name).facts.get("precision", "") == precision


# --- attention -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (
            "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at_"
            "_tensor0000o11101213_tensor0000o11101213_0",
            "FlashAttention-4",
        ),
        (
            "flash_fwd_sm100_bf16_head_dim128_tile128x128_threads384_causal_pv_mma_rs_intra_wg_"
            "overlap_kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100"
            "_object_at__tensor0000o11101213_0",
            "FlashAttention-4",
        ),
        # FlashAttention-3 in DeepSeek-V3's step: forward, backward and its pre/post kernels
        (
            "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, "
            "cutlass::bfloat16_t, 128>, true, flash::SingleTileScheduler, flash::SeqLenTraits<true>"
            " >(flash::CollectiveMainloopFwd<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, "
            "1, cutlass::bfloat16_t, 128>, true, flash::SeqLenTraits<true> >::Params)",
            "FlashAttention-3",
        ),
        (
            "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, "
            "cute::C<192> >, cute::tuple<cute::C<64>, cute::C<128> >, cutlass::bfloat16_t, float, "
            "cutlass::arch::Sm90, true, true> >(flash::FlashAttnBwdPreprocess<>::Params)",
            "FlashAttention-3",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm100_flash_fprop_f16_knob_7_128x128x128_4x1x1_"
            "cga1x1x1_kernel0_0",
            "cuDNN",
        ),
        ("cudnn::fusion::compute_dot_do_o_specialized<true, 128>", "cuDNN"),
        # the backward's dQ from its fp32 accumulator (seen on an H100, torch 2.11, cuDNN SDPA)
        (
            "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, "
            "unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int)",
            "cuDNN",
        ),
        ("sdpa_sm100_flash_bprop_f16_knob_3_128x128x128", "SDPA"),
        # the combine of cuDNN SDPA's split decode, after each layer's fprop kernel (H200,
        # torch 2.11, transformers' compiled generate: tests/fixtures/h200/08_generate)
        (
            "void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*, float*, float*, "
            "float*, float*, float const*, float*, float*, float*, float*, float*, unsigned int, "
            "unsigned int, unsigned int, unsigned int, bool)",
            "cuDNN",
        ),
    ],
)
def test_attention_kernels_of_every_generation_are_attention(name, family):
    klass = classify(name)
    assert klass.cls == "attention" and family in klass.detail


def test_flash_attention_4_names_spell_their_shape():
    name = (
        "flash_fwd_sm100_bf16_head_dim128_tile128x128_threads384_causal_pv_mma_rs_intra_wg_overlap"
        "_kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at_"
        "_tensor0000o11101213_0"
    )
    facts = classify(name).facts
    assert (facts["head_dim"], facts["tile"], facts["arch"]) == (128, "128x128", "sm100")


# --- communication ---------------------------------------------------------------------------

ALL_RED = "all-reduce"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", ALL_RED),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", "broadcast"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "send/recv"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ALL_RED),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all-gather"),
        (
            "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "reduce-scatter",
        ),
        ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", ""),
        # RCCL's all-to-all
        ("ncclKernel_AllToAllPivot_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "all-to-all"),
        # DeepEP's expert-parallel dispatch and combine (DeepSeek-V3's step)
        (
            "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, "
            "float*, bool const*, int4 const*, float const*, int4 const*, int4 const*, int const*)",
            "all-to-all",
        ),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", "all-to-all"),
        (
            "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(c10::"
            "BFloat16**, unsigned long, unsigned long, c10::BFloat16*, unsigned long)",
            "all-reduce",
        ),
    ],
)
def test_communication_kernels_say_their_kind(name, kind):
    klass = classify(name)
    assert klass.cls == "collective" and is_collective(name)
    assert collective_kind(name) == kind == klass.facts.get("kind", "")


def test_deep_ep_layout_is_computation_not_communication():
    name = "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*)"
    assert classify(name).cls != "collective" and not is_collective(name)


@needs_traces
def test_deepseek_step_reads_as_communication_then_gemms():
    """DeepSeek-V3's training step on H800s: DeepEP's all-to-all kernels took the most GPU
    time, then the fp8 grouped GEMMs; they were all "other" before."""
    ranked = [g for g, _ in time_by_group("deepseek/train.json.gz").most_common(2)]
    assert ranked == ["collective", "GEMM"]
    kinds = {
        collective_kind(name)
        for name in gpu_time("deepseek/train.json.gz")
        if classify(name).cls == "collective"
    }
    assert kinds == {"all-to-all"}


@needs_traces
def test_rocm_trace_has_gemms_and_no_triton():
    classes = {name: classify(name) for name in gpu_time("hta/amd_mi250.json.gz")}
    tensile = [k for n, k in classes.items() if n.startswith("Cijk_")]
    assert len(tensile) == 2 and {k.cls for k in tensile} == {"gemm"}
    assert "triton" not in {k.cls for k in classes.values()}


@pytest.mark.slow
@needs_traces
def test_no_library_kernel_of_the_external_traces_is_left_other():
    """What stays "other" is other projects' own kernels (FBGEMM, DeepSeek's, apex): no
    cuDNN, cuBLAS, CUTLASS, NCCL or ATen kernel, and nothing is taken for Triton that is not."""
    library = re.compile(r"cudnn|cublas|cutlass|nccl|nvjet|xmma|(?<!fb)gemm|^at::", re.IGNORECASE)
    triton = set()
    for path in sorted(EXTERNAL_TRACES.rglob("*.json*")):
        for name in gpu_time(str(path.relative_to(EXTERNAL_TRACES))):
            klass = classify(name)
            function = split_name(name).function
            if klass.cls == "other" and library.search(function):
                assert function.startswith("dpsk::grouped_gemm::cuda::utils::"), name
            if klass.cls == "triton":
                triton.add(name)
    assert triton == {"rotary_kernel", "_copy_tensor_kernel"}  # DeepSeek's Triton kernels


# --- names for people, and the summary's groups ----------------------------------------------


def test_mangled_names_read_through_their_identifiers():
    assert readable(MANGLED_CONV, 200).startswith(
        "cutlass_cudnn_train::Kernel<conv::kernel::ImplicitGemmConvolution"
    )
    aten = (
        "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_17e44f7d43distribution_"
        "elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffLm4E"
    )
    klass = classify(aten)
    assert (klass.cls, klass.detail) == ("aten", "distribution_elementwise_grid_stride_kernel")


def test_readable_drops_a_return_type():
    assert readable(GEMVX) == "internal::gemvx::kernel"


def test_every_class_lands_in_one_summary_group():
    assert {group(cls) for cls in CLASSES} == set(GROUPS)


# --- Inductor names, without torch -----------------------------------------------------------


@pytest.mark.slow
def test_inductor_names_decode_without_importing_torch():
    code = (
        "import sys\n"
        "from tracereader.names.kernel_names import classify\n"
        "k = classify('triton_per_fused__softmax_exp_masked_fill_mul_prepare_softmax_online_"
        "sub_view_0')\n"
        "print(k.facts['fused_ops'], 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    ops = ["_softmax", "exp", "masked_fill", "mul", "prepare_softmax_online", "sub", "view"]
    assert out.strip() == f"{ops} False"


@pytest.mark.slow
def test_op_names_are_the_installed_torchs():
    """tracereader/names/op_names.py is torch's list as tools/dev/reader_validation/op_names.py
    writes it (in a fresh interpreter: imports register higher-order ops); rerun the tool when torch
    adds ops."""
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools/dev/reader_validation/op_names.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
