"""Classify a GPU item by its name, and decode what the name says.

Architectures and libraries name the same work differently (the posts' A100 shows `ampere_*`
and `cutlass_80_*` GEMMs, Hopper `nvjet_sm90_*`, Blackwell `nvjet_sm100_*` and
`cutlass3x_sm100_*`, ROCm Tensile's `Cijk_*`), so classes come from patterns over the parts of
a name (library prefix, namespace, function, the kernel a `cutlass::Kernel<...>` wraps), never
from one architecture's exact names. CLASS_MEANINGS says what each class holds; `group` maps a
class to the coarse groups a summary shows (GROUPS).

A name's facts say what it spells out: a GEMM's tile, layout, epilogue and the precision it
computes in (PRECISIONS), an attention kernel's family and head dim, a collective's kind
(COLLECTIVE_KINDS), an Inductor kernel's fused ops. Some operations take two kernels: cuBLAS's
split-K runs the product, then a reduce (cublasLt::splitKreduce_kernel, splitKreduce_kernel,
..._execute_split_k_kernel, CUTLASS's ReduceSplitK) that adds the partial sums, and cuBLASLt can
run its epilogue (bias, GELU) as a kernel of its own after the GEMM; that second kernel takes
the class of the first (a GEMM's, or a convolution's for cuDNN's) with `joins_previous` set, so
that it is counted with the kernel before it, not as another GEMM.

Itanium-mangled names (`_ZN2at6native...`, recorded where the demangler gave up) are read
through the identifiers they spell. Nothing here imports torch: Inductor's fused-op names are
split with a list of torch's op names written out once (op_names.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import cache

from tracereader.names.kernel_classes import (
    CUDA_CORES,
    FP8,
    TENSOR_CORES,
    TF32,
    KernelClass,
)
from tracereader.names.name_parts import WRAPPERS, Parts, short, split_name

# What a GEMM's name says about its math, tried in this order on the lower-cased name.
# tf32 where named, or CUTLASS's s1688gemm/s1684gemm with no 16-bit type (fp32 inputs on the
# 16x8x8 Tensor core MMA); fp8/fp4 by their element types; fp32 on CUDA cores: sgemm, ffma,
# simt, f32f32 (fp32 inputs), scudnn (cuDNN's fp32 convolutions); Tensor cores: the MMA shapes
# s16816/h16816 (16x8x16), s161616 (wmma), Volta's 884, h1688, tensorop, Hopper's
# wgmma/hgmma, nvjet (but for its fp32 `sss`), or a 16-bit type.
_SIXTEEN_BIT = re.compile(r"bf16|f16|half")
_PRECISION_RULES = (
    (TF32, re.compile(r"tf32")),
    (
        FP8,
        re.compile(r"(?<![a-z0-9])f8(?![0-9])|fp8|e4m3|e5m2|e2m1|e2m3|e3m2|ue8m0|nvf4|mxf[48]"),
    ),
    (CUDA_CORES, re.compile(r"sgemm|ffma|simt|f32f32|scudnn")),
    (
        TENSOR_CORES,
        re.compile(
            r"[sh]16816|[sh]161616|[sh]884|h1688|tensorop|wgmma|hgmma|hmma|wmma"
            r"|^nvjet(_sm\d+)?_(?!sss_)|bf16|f16|half"
        ),
    ),
)
_TF32_MMA = re.compile(r"s168[48]gemm")


# --- reading a name: its function, the kernel a wrapper holds, mangled names ----------------


# --- the rules -------------------------------------------------------------------------------

_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem)_(fused_)?(.*?)(_\d+)?$")
_INDUCTOR_KINDS = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent reduction",
    "tem": "template (a generated GEMM)",
}
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Plain names that are not Triton's: library kernels recorded without a signature.
_NOT_TRITON = re.compile(r"^(nccl|rccl|cudnn|cub|flash|fmha|cutlass|nvjet|cask)", re.IGNORECASE)
# CuTe DSL (CUTLASS's Python DSL) names its kernels after their module and class:
# kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__...,
# kernel_cutlass_kernel_quackepiloguefrontendGemmMod_..., possibly after a readable prefix.
_CUTE_DSL = re.compile(r"kernel_cutlass_kernel_")

# Communication: NCCL and RCCL (RCCL keeps NCCL's names), DeepEP's dispatch/combine kernels
# (deep_ep::, or dpsk::ep:: in DeepSeek's own traces), torch's symmetric-memory collectives,
# custom all-reduces (vLLM's cross_device_reduce), MSCCL++, TransformerEngine's userbuffers.
COLLECTIVE = re.compile(
    r"^(void\s+)?(nccl|rccl|msccl)|\b(deep_ep|dpsk::ep)::(intranode|internode\w*)::"
    r"|symmetric_memory::|cross_device_reduce|\buserbuffers",
    re.IGNORECASE,
)
COLLECTIVE_KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "broadcast",
    "reduce",
    "send/recv",
)
# On the name with separators dropped, lower-cased; first match wins (AllReduce before Reduce).
# DeepEP's dispatch and combine (and their notify kernels) move tokens between every pair of
# ranks: all-to-all communication.
_KIND_RULES = (
    ("all-reduce", re.compile(r"allreduce|crossdevicereduce")),
    ("reduce-scatter", re.compile(r"reducescatter")),
    ("all-gather", re.compile(r"allgather")),
    ("all-to-all", re.compile(r"alltoall|dispatch|combine|notify")),
    ("broadcast", re.compile(r"broadcast|bcast")),
    ("send/recv", re.compile(r"sendrecv|send|recv|p2p")),
    ("reduce", re.compile(r"reduce")),
)

# Fused attention, by family: (family, pattern), tried in order on the whole name.
_ATTENTION = (
    (
        "FlashAttention-4 (CuTe DSL, flash-attn-4)",
        re.compile(r"kernel_cutlass_kernel_flash_attn|FlashAttention(Forward|Backward)Sm\d+"),
    ),
    ("FlashAttention-2 (vendored in PyTorch)", re.compile(r"\bpytorch_flash::")),
    (
        "FlashAttention-3 (flash-attn / kernels Hub, Hopper)",
        re.compile(
            r"\bflash::\w*Sm90|FlashAttn\w*Sm90|flash_fwd\w*sm90|flash::compute_attn_ws"
            r"|\bflash::FlashAttn\w*<.*Sm90",
            re.IGNORECASE,
        ),
    ),
    (
        "FlashAttention (flash-attn / kernels Hub)",
        re.compile(r"\bflash::|^(void\s+)?flash_(fwd|bwd)"),
    ),
    (
        "cuDNN generated SDPA",
        re.compile(
            r"cudnn\w*(sdpa|fmha|mha|attn|attention|flash)"
            r"|cudnn::fusion::\w*(dot_do_o|dq|lean_reduction)"
        ),
    ),
    ("fused SDPA (cuDNN or vendor)", re.compile(r"(^|_)sdpa_sm\d+", re.IGNORECASE)),
    (
        "CUTLASS fmha (memory-efficient, xformers)",
        re.compile(r"\bfmha_cutlass|AttentionKernel<|attention_kernel_batched"),
    ),
    ("FlashInfer", re.compile(r"\bflashinfer::\w*(Prefill|Decode|Attention|MLA)")),
    ("paged attention (vLLM)", re.compile(r"\bpaged_attention")),
    (
        "fused MHA (CUTLASS / CK / TensorRT-LLM fmha)",
        re.compile(r"fmha|FusedMultiHeadAttention|MultiHeadAttention", re.IGNORECASE),
    ),
)
_TRITON_ATTENTION = re.compile(r"attn|attention", re.IGNORECASE)
_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)

# Convolutions, on the whole (demangled) name: cuDNN's scudnn/hcudnn kernels, xmma fprop
# (forward), dgrad (data gradient) and wgrad (weight gradient), implicit/explicit convolve,
# Winograd and FFT algorithms and their helpers, CUTLASS convolutions, MIOpen, ATen's own.
_CONV = re.compile(
    r"[sh]cudnn|_(fprop|dgrad|wgrad)_|(fprop|dgrad|wgrad)\w*(alg|engine|implicit|optimized)"
    r"|conv(?!ert)|winograd|im2col|col2im|vol2col|cudnn::(cnn|detail|ops|winograd)"
    r"|cask_cudnn|cask_plugin\w*cudnn|nchwToNhwc|nhwcToNchw|\bfft\dd_[rc]2[cr]_|\bflip_filter\b"
    r"|pointwise_mult_and_sum_complex|miopen|\bigemm_(fwd|bwd|wrw)_",
    re.IGNORECASE,
)
_CONV_DETAILS = (
    ("winograd", re.compile(r"winograd", re.IGNORECASE)),
    ("FFT", re.compile(r"fft|flip_filter|complex", re.IGNORECASE)),
    ("data gradient", re.compile(r"dgrad|bwd_data", re.IGNORECASE)),
    ("weight gradient", re.compile(r"wgrad|_wrw_|bwd_weight|grad_weight", re.IGNORECASE)),
    ("layout transform", re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)),
    ("offsets", re.compile(r"Offsets", re.IGNORECASE)),
    ("forward", re.compile(r"fprop|convolve|ImplicitGemm|conv|scudnn|hcudnn", re.IGNORECASE)),
)
_BATCH_NORM = re.compile(r"\bbn_(fw|bw)|BatchNorm", re.IGNORECASE)
_SPLIT_K_REDUCE = re.compile(
    r"split_?k\w*reduce|reduce\w*split_?k|execute_split_k_kernel", re.IGNORECASE
)
# cuBLASLt's epilogue run as a kernel of its own (by its function: cuBLASLt's GEMM kernels take
# a cublasLtEpilogue_t parameter too).
_EPILOGUE_KERNEL = re.compile(r"(^|::)epilogue::impl::")
# GEMMs, on the subject (the wrapped kernel or the function's own name).
_GEMM = re.compile(
    r"gemm|gemv|matmul|^nvjet|^(ampere|volta|turing|hopper|maxwell|kepler|blackwell)_"
    r"|^sm\d+_xmma|xmma_gemm|^cutlass|^Cijk_|wgmma|hgmma",
    re.IGNORECASE,
)
_MTIA_OP = re.compile(r"^([\w:.]+)-dtype_[\w-]+$")
_MTIA_GEMMS = {"fc", "mm", "bmm", "addmm", "baddbmm", "matmul", "linear"}
# ATen's kernels outside at::native: THCUNN's cunn_ kernels, CUB through at_cuda_detail,
# softmax in an anonymous namespace, CUB/Thrust as older torch built them in.
_ATEN_OUTSIDE_NATIVE = re.compile(r"^(cunn_|at_cuda_detail::|at::|cub::|thrust::)")


def classify(name: str) -> KernelClass:
    """The class of a GPU item (one of CLASSES) by its name, with what the name says. The
    order of the rules matters: a cuDNN SDPA kernel says "fprop" like a convolution, cuDNN's
    convolutions say "gemm", a cuBLASLt GEMM takes an epilogue parameter."""
    if name.startswith("Memcpy"):
        direction = re.search(r"Memcpy (\w+)", name)
        return KernelClass("memcpy", direction.group(1) if direction else "")
    if name.startswith("Memset"):
        return KernelClass("memset")
    if name == "dma_request":  # MTIA's copies
        return KernelClass("memcpy", "DMA")
    mtia = _MTIA_OP.match(name)
    if mtia:
        return _mtia(mtia.group(1))
    if name.startswith("triton_"):
        return _inductor(name)
    parts = split_name(name)
    text, function = parts.text, parts.function
    if COLLECTIVE.search(function):
        kind = collective_kind(name)
        facts = {"kind": kind} if kind else {}
        return KernelClass("collective", _collective_detail(parts), facts)
    if "at::native::" in text:
        if _CONV.search(function):
            return KernelClass("conv", f"ATen {parts.base}", {"library": "ATen"})
        if "elementwise_kernel" in function:
            return KernelClass("elementwise", _functor(text))
        return KernelClass("aten", _aten_detail(parts))
    for family, pattern in _ATTENTION:
        if pattern.search(text):
            return KernelClass("attention", family, _attention_facts(text, family))
    if _CUTE_DSL.search(text):
        return _cute_dsl(text)
    if _SOFTMAX.search(function) and not _PLAIN_NAME.match(name) and "cudnn" not in name:
        # ATen's softmax kernels outside at::native: (anonymous namespace)::softmax_warp_forward
        return KernelClass("aten", _aten_detail(parts))
    if _BATCH_NORM.search(function):
        return KernelClass("aten", "batch norm", {"library": _library(text)})
    if _SPLIT_K_REDUCE.search(text) or _EPILOGUE_KERNEL.search(function):
        return _second_kernel(text)
    if _CONV.search(text) or function.startswith("cudnn"):  # cuDNN's others: convs' helpers
        return _conv(parts)
    if _GEMM.search(parts.subject):
        return _gemm(text, parts.subject)
    if _ATEN_OUTSIDE_NATIVE.match(function):
        return KernelClass("aten", _aten_detail(parts))
    if _PLAIN_NAME.match(name) and not _NOT_TRITON.match(name) and name.lower() not in WRAPPERS:
        if _TRITON_ATTENTION.search(name):
            family = "Triton attention kernel"
            return KernelClass("attention", family, {"family": family})
        return KernelClass("triton", "hand-written Triton kernel")
    return KernelClass("other", function)


def _mtia(op: str) -> KernelClass:
    """MTIA names a kernel after the op it runs and its dtype: fc-dtype_Float,
    aten::mul.out-dtype_Float."""
    op = op.removeprefix("aten::").split(".")[0]
    facts = {"device": "MTIA", "op": op}
    if op in _MTIA_GEMMS:
        return KernelClass("gemm", f"MTIA {op}", facts)
    return KernelClass("conv" if "conv" in op else "aten", f"MTIA {op}", facts)


def is_collective(name: str) -> bool:
    """Whether a GPU kernel's name is a communication kernel's: the reader's one test."""
    return bool(COLLECTIVE.search(split_name(name).function))


def collective_kind(name: str) -> str:
    """What a communication kernel's name says it does (one of COLLECTIVE_KINDS), or "" where
    it does not say (NCCL's ncclDevKernel_Generic). NCCL runs all-to-all as grouped sends and
    receives: its kernel reads "send/recv"; the op that launched it says more."""
    parts = split_name(name)
    core = parts.function if parts.function.startswith(("nccl", "rccl")) else parts.text
    core = re.sub(r"[^a-z0-9]", "", core.split("(")[0].lower())
    if "nccl" in core or "rccl" in core:
        core = re.sub(r"^(nccl|rccl)(dev)?kernel", "", core)
    for kind, pattern in _KIND_RULES:
        if pattern.search(core):
            return kind
    return ""


def _collective_detail(parts: Parts) -> str:
    """`ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)` -> `AllReduce Sum bf16 RING LL`;
    DeepEP's `dpsk::ep::internode::dispatch<...>` -> `DeepEP internode dispatch`."""
    core = parts.function
    deep_ep = re.search(r"(deep_ep|ep)::(\w+)::(\w+)$", core)
    if deep_ep and "ep::" in core:
        return f"DeepEP {deep_ep.group(2)} {deep_ep.group(3).replace('_', ' ')}"
    core = core.rsplit("::", 1)[-1] if "::" in core else core
    for prefix in ("ncclDevKernel_", "ncclKernel_", "rcclKernel_"):
        core = core.removeprefix(prefix)
    return core.replace("_", " ") or "collective"


def _library(text: str) -> str:
    lowered = text.lower()
    for library in ("cudnn", "miopen", "cutlass", "cublas"):
        if library in lowered:
            return {"cudnn": "cuDNN", "miopen": "MIOpen", "cutlass": "CUTLASS"}.get(
                library, "cuBLAS"
            )
    return "ATen" if "at::" in text else ""


def _aten_detail(parts: Parts) -> str:
    """The kernel's own name without namespaces and template arguments: `reduce_kernel`,
    `softmax` for any of ATen's softmax kernels (`log_softmax` for the log variant)."""
    if _SOFTMAX.search(parts.function):
        log = re.search(r"log_?softmax", parts.text, re.IGNORECASE)
        return "log_softmax" if log else "softmax"
    if parts.function.startswith(("at_cuda_detail::cub::", "cub::")):
        return f"CUB {parts.base}"
    return parts.base or short(parts.text)


def _attention_facts(name: str, family: str) -> dict:
    """The family, and what else the name spells out: FlashAttention's kernel traits (head
    dim, block of queries x keys, warps), a tile, the architecture it was built for."""
    facts: dict = {"family": family}
    traits = re.search(r"kernel_traits<(\d+), (\d+), (\d+), (\d+)", name)
    head_dim = re.search(r"head_dim(\d+)", name)
    if traits:
        dim, rows, cols, warps = traits.groups()
        facts.update(head_dim=int(dim), tile=f"{rows}x{cols}", warps=int(warps))
    else:
        tile = re.search(r"(?:_|tile)(\d+x\d+(?:x\d+)?)_", name)
        if tile:
            facts["tile"] = tile.group(1)
        if head_dim:
            facts["head_dim"] = int(head_dim.group(1))
    arch = re.search(r"sm_?(\d{2,3})", name, re.IGNORECASE)
    if arch:
        facts["arch"] = f"sm{arch.group(1)}"
    return facts


def _cute_dsl(text: str) -> KernelClass:
    """A CuTe DSL kernel other than FlashAttention: a GEMM (QuACK's, CUTLASS's examples) by
    its class name, else named by its module."""
    module = re.search(r"kernel_cutlass_kernel_(.*?)(?:_object_at_|$)", text)
    what = module.group(1) if module else text
    if re.search(r"gemm|matmul|mma", what, re.IGNORECASE):
        klass = _gemm(text, what)
        facts = {**klass.facts, "library": "CuTe DSL"}
        return KernelClass("gemm", f"CuTe DSL {klass.detail}".strip(", "), facts)
    return KernelClass("other", f"CuTe DSL kernel {what}", {"library": "CuTe DSL"})


def gemm_precision(name: str) -> str:
    """What a GEMM kernel's name says it computes in (one of PRECISIONS), or "" when the
    name does not say. Read from the kernel's own name (or the one a cutlass::Kernel<...>
    wraps), not its parameters: gemmk1_kernel<float, ..., cublasGemvTensor<__half>> says
    nothing about its math."""
    lowered = (split_name(name).subject or name).lower()
    if _TF32_MMA.search(lowered) and not _SIXTEEN_BIT.search(lowered):
        return TF32
    for precision, pattern in _PRECISION_RULES:
        if pattern.search(lowered):
            return precision
    return ""


def _functor(name: str) -> str:
    """The op an ATen elementwise kernel runs, read from its functor's name."""
    for pattern in (r"(\w+?)CUDAKernelImpl", r"CUDAFunctor_(\w+?)\b"):
        found = re.search(pattern, name)
        if found:
            return found.group(1).lower()
    # BinaryFunctor<..., MulFunctor<float>>; AUnaryFunctor: a binary op with a scalar operand
    wrappers = {"Binary", "Unary", "CUDA", "Ternary", "AUnary", "BUnary"}
    for functor in re.findall(r"(\w+?)Functor", name):
        if functor not in wrappers:
            return functor.lower()
    # A lambda inside the op's own kernel function: masked_fill_kernel(...), where_kernel_impl,
    # direct_copy_kernel_cuda, isneginf_kernel_impl
    found = re.search(r"::(\w+?)_kernel(?:_impl|_cuda)*\(", name)
    if found:
        return found.group(1).lower()
    return short(name)


def _second_kernel(text: str) -> KernelClass:
    """A split-K reduce or a cuBLASLt epilogue kernel: part of the GEMM (or cuDNN's
    convolution) before it."""
    cls = "conv" if _CONV.search(text) or "cudnn" in text.lower() else "gemm"
    if _SPLIT_K_REDUCE.search(text):
        role = "split-K reduce: adds the partial sums of the GEMM before it"
        return KernelClass(cls, "split-K reduce", {"role": role}, joins_previous=True)
    role = "epilogue (bias, activation) of the GEMM before it, run as a kernel of its own"
    return KernelClass(cls, "epilogue", {"role": role}, joins_previous=True)


def _conv(parts: Parts) -> KernelClass:
    text = parts.text
    # Convolution kernels named by no library are cuDNN's (implicit_convolve_sgemm, fft2d_r2c,
    # nchwToNhwcKernel) unless the name is a plain one, as Triton's are.
    library = _library(text) or ("" if _PLAIN_NAME.match(text) else "cuDNN")
    facts: dict[str, str] = {"library": library} if library else {}
    for what, pattern in _CONV_DETAILS:
        if pattern.search(text):
            facts["pass"] = what
            break
    tile = re.search(r"(?:tilesize|_)(\d+x\d+)", text)
    if tile:
        facts["tile"] = tile.group(1)
    precision = gemm_precision(text)
    if precision:
        facts["precision"] = precision
    detail = ", ".join(v for k, v in facts.items() if k in ("library", "pass", "precision"))
    return KernelClass("conv", detail, facts)


def _gemm(name: str, subject: str = "") -> KernelClass:
    facts: dict[str, str] = {}
    if subject.startswith("Cijk_"):
        facts["library"] = "rocBLAS/Tensile"
        tile = re.search(r"_MT(\d+x\d+)", subject)
        if tile:
            facts["tile"] = tile.group(1)
    else:
        tiles = re.findall(r"(\d+x\d+)", name)
        if tiles:
            facts["tile"] = tiles[0]
        # K tile x stages: the second pair of its own (not CUTLASS 3's 1x1x1 cluster shape)
        pairs = re.findall(r"(?<![\dx])(\d+x\d+)(?![\dx])", name)
        if len(pairs) > 1 and pairs[0] == tiles[0]:
            facts["k_tile_x_stages"] = pairs[1]
    # Layout: nvjet ends in three letters (A, B, C: T or N); cuBLAS/CUTLASS carry _tn_/_nn_.
    nvjet_layout = re.search(r"_([TN]{3})$", name)
    legacy_layout = re.search(r"_(tn|nt|nn|tt|[tn]{3}(?=_align))(_|$)", name)
    if nvjet_layout:
        facts["layout"] = nvjet_layout.group(1)
    elif legacy_layout:
        facts["layout"] = legacy_layout.group(1)
    if re.search(r"_bias", name, re.IGNORECASE):
        facts["epilogue"] = "bias (added in the GEMM's writeback)"
    elif "_badd" in name:
        facts["epilogue"] = "beta*C (adds onto C, which was copied into the output first)"
    elif "_bz" in name:
        facts["epilogue"] = "none (beta = 0)"
    if re.search(r"_2cta_|_2sm\b|_2sm_", name):
        facts["cta_pair"] = "2-CTA MMA (Blackwell: two SMs share one tile)"
    precision = gemm_precision(name)
    if precision:
        facts["precision"] = precision
    detail = ", ".join(f"{k} {v}" for k, v in facts.items() if k in ("tile", "layout"))
    if "library" in facts:
        detail = f"{facts['library']}, {detail}"
    if precision:
        detail += f", {precision}"
    if "epilogue" in facts:
        detail += f", epilogue {facts['epilogue'].split(' (')[0]}"
    return KernelClass("gemm", detail.strip(", ") or subject, facts)


_INDUCTOR_GEMMS = frozenset({"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm"})
GEMV_REDUCTION = "Inductor reduction (a matrix-vector product)"
# A GEMV's reduction spreads its output rows over many blocks (256-6144 in 08_generate's
# decode at 8B); a reduction that merely reads the GEMV's output and carries its mm and t in
# its name (a per-head norm after the qkv GEMV: tens of blocks, or one) has fewer
GEMV_MIN_BLOCKS = 64


def _inductor_kernel(facts: dict) -> KernelClass:
    if not facts["fused_ops"]:  # triton_poi_fused_2: as Inductor names its combo kernels
        detail = f"{facts['kind']}, ops not in its name (as Inductor names its combo kernels)"
        return KernelClass("inductor", detail, facts)
    return KernelClass("inductor", f"{facts['kind']}: {' + '.join(facts['fused_ops'])}", facts)


def gemv_by_grid(klass: KernelClass, blocks: int | None) -> KernelClass:
    """A reduction named like a GEMV (GEMV_REDUCTION) read against its launch's grid: with
    fewer than GEMV_MIN_BLOCKS blocks it is Inductor's own kernel; without a grid, a GEMV."""
    if blocks is None or blocks >= GEMV_MIN_BLOCKS:
        return klass
    return _inductor_kernel(klass.facts)


def _inductor(name: str) -> KernelClass:
    found = _INDUCTOR.match(name)
    if not found:
        return KernelClass("inductor", "Inductor Triton kernel")
    # a combo kernel (several of Inductor's independent kernels in one launch) carries no op
    # names: triton_poi_fused_2, whose 2 is its number
    kind, joined = found.group(1), found.group(3)
    ops = [] if joined.isdigit() else decode_fused_ops(joined)
    facts = {"kind": _INDUCTOR_KINDS[kind], "fused_ops": ops}
    if kind == "tem" and _INDUCTOR_GEMMS.intersection(ops):
        # max-autotune's Triton GEMM templates (triton_tem_fused_mm_...): GEMMs, whatever
        # epilogue Inductor fused into them
        return KernelClass("gemm", "Inductor Triton GEMM template", facts)
    if kind in ("red", "per") and _INDUCTOR_GEMMS.intersection(ops) and "t" in ops:
        # a matrix-vector product lowered as a reduction over the weight's transpose (at one
        # row, as max-autotune's decode step does: x[1, K] * W^T summed over K), whatever
        # norm or activation Inductor fused in; a reduction that only reads an mm's result
        # (a norm's statistics, an argmax) has no t and stays Inductor's
        return KernelClass("gemm", GEMV_REDUCTION, facts)
    if kind == "tem" and ("flex_attention" in ops or "flex_decoding" in ops):
        # FlexAttention's kernel is an Inductor template; the reductions that combine its
        # split results (triton_per_..._flex_attention_...) stay Inductor's
        family = "FlexAttention (Inductor template)"
        return KernelClass("attention", family, {"family": family, **facts})
    return _inductor_kernel(facts)


@cache
def _op_names() -> frozenset[str]:
    """torch's op names that hold an underscore (a name without one is one token anyway)."""
    from tracereader.names.op_names import NAMES

    return frozenset(NAMES.split())


def decode_fused_ops(joined: str) -> list[str]:
    """`_unsafe_view_gelu_mul` -> ['_unsafe_view', 'gelu', 'mul'] by longest known op name.

    Inductor names a kernel after the sorted, underscore-joined names of the torch ops it
    fused; op names hold underscores too, so the split takes the longest known name first."""
    known, tokens, ops, i = _op_names(), joined.split("_"), [], 0
    while i < len(tokens):
        for j in range(len(tokens), i, -1):
            candidate = "_".join(tokens[i:j])
            if candidate in known or j == i + 1:
                if candidate:
                    ops.append(candidate)
                i = j
                break
    return ops


def _cut(name: str, width: int) -> str:
    """Head and tail of a name with '...' between: GEMM names differ at both ends (the tile
    up front, the epilogue and layout at the end: `..._h_bz_NNT` vs `..._h_badd_NNT`)."""
    if len(name) <= width:
        return name
    keep = max(width - 3, 2)
    head = (keep + 1) // 2
    return name[:head] + "..." + name[len(name) - (keep - head) :]


def readable(name: str, width: int = 60) -> str:
    """A kernel's name for a sentence: no return type, no parameter list, and no template
    arguments when they make it long (`cublasLt::splitKreduce_kernel`, a wrapper keeping what
    it wraps: `cutlass::Kernel<cutlass_80_tensorop_...>`); a mangled name read
    through its identifiers; what is still too long keeps its head and tail."""
    parts = split_name(name)
    bare = parts.text[parts.start : parts.end] or name
    if len(bare) > width and "<" in bare:
        # A wrapper keeps the kernel it wraps: cutlass::Kernel<cutlass_80_tensorop_...>
        bare = f"{parts.function}<{parts.wrapped}>" if parts.wrapped else parts.function
    return _cut(bare, width)


def label(name: str, width: int = 32) -> str:
    """A kernel name cut to width (head and tail kept); long ATen names become their class and
    op instead, other long ones lose their return type, parameters and, where still long,
    template arguments (`readable`). Two names can share a label: use `labels` for a table."""
    if len(name) <= width:
        return name
    klass = classify(name)
    if klass.cls in ("elementwise", "aten") and klass.detail:
        return f"{klass.cls} {klass.detail}"[:width]
    return readable(name, width)


def labels(names: Iterable[str], width: int = 32) -> dict[str, str]:
    """A label per distinct name, unique within the set: labels that clash grow (keeping more
    of the name's head and tail) until they differ; full names always do."""
    out = {name: label(name, width) for name in dict.fromkeys(names)}
    widths = dict.fromkeys(out, width)
    while True:
        seen = Counter(out.values())
        clashing = [n for n, text in out.items() if seen[text] > 1 and text != n]
        if not clashing:
            return out
        for name in clashing:
            widths[name] += 1
            out[name] = _cut(name, widths[name])
