"""Check the trace reader's kernel classes on the kernels this GPU really runs.

Profiles small workloads whose kernels the reader must class right (GEMMs in bf16, TF32 and
strict fp32, a gemv, a split-K GEMM, cuBLASLt's bias+GELU epilogue, cuDNN convolutions forward
and backward, a depthwise convolution, batch norm, SDPA's flash, memory-efficient and cuDNN
backends, CUB sorts and scans, an Inductor kernel), prints every kernel name with its class,
detail and precision, and checks each workload against what it must show. Kernel names differ by
architecture: this is how a new GPU's names are checked.

    uv run python -m tools.dev.reader_validation.kernel_classes_gpu OUT_DIR     (needs a CUDA GPU)

Writes OUT_DIR/kernel_classes.json (device, versions, date, every name read); exits 1 when a
workload's kernels are not what it must show.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tracereader import CUDA_CORES, TENSOR_CORES, TF32, Parser, classify, run


@dataclass
class Workload:
    name: str
    run: object  # () -> None, on the GPU
    must: dict  # class -> the precision it must show ("" for any), all must be seen
    allowed_other: bool = False  # may a kernel of it be "other" or "triton"


def _tensors(*shape, dtype=torch.float32, grad=False):
    return torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=grad)


def workloads() -> list[Workload]:
    a16, b16 = (
        _tensors(4096, 4096, dtype=torch.bfloat16),
        _tensors(4096, 4096, dtype=torch.bfloat16),
    )
    a32, b32 = _tensors(4096, 4096), _tensors(4096, 4096)
    x_split, w_split = _tensors(33, 8192), _tensors(8192, 33)
    vec = _tensors(1, 4096)
    bias = _tensors(4096)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    conv16 = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().to(torch.bfloat16)
    conv16 = conv16.to(memory_format=torch.channels_last)
    depthwise = torch.nn.Conv2d(64, 64, 3, padding=1, groups=64).cuda()
    norm = torch.nn.BatchNorm2d(64).cuda()
    image = _tensors(8, 64, 56, 56, grad=True)
    image16 = _tensors(8, 64, 56, 56, dtype=torch.bfloat16, grad=True)
    image16 = image16.detach().to(memory_format=torch.channels_last).requires_grad_()
    q, k, v = (_tensors(8, 16, 1024, 64, dtype=torch.bfloat16, grad=True) for _ in range(3))
    keys = _tensors(1 << 20)
    pointwise = torch.compile(lambda t: (t * 2).sin() + 1)

    def tf32(allow: bool, fn):
        def run():
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = allow
            try:
                fn()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before

        return run

    def sdpa(backend):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run():
            with sdpa_kernel(getattr(SDPBackend, backend)):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

        return run

    return [
        Workload("mm bf16", lambda: a16 @ b16, {"gemm": TENSOR_CORES}),
        Workload("mm fp32, TF32 allowed", tf32(True, lambda: a32 @ b32), {"gemm": TF32}),
        Workload("mm fp32, TF32 off", tf32(False, lambda: a32 @ b32), {"gemm": CUDA_CORES}),
        Workload("gemv fp32", tf32(False, lambda: vec @ b32), {"gemm": ""}),
        Workload(
            "split-K fp32 (33 x 8192 x 33)", tf32(False, lambda: x_split @ w_split), {"gemm": ""}
        ),
        Workload(
            "addmm + GELU epilogue fp32",
            tf32(False, lambda: torch._addmm_activation(bias, a32, b32, use_gelu=True)),
            {"gemm": ""},
        ),
        Workload("conv2d fp32 fwd+bwd", lambda: conv(image).sum().backward(), {"conv": ""}),
        Workload(
            "conv2d bf16 channels_last fwd+bwd",
            lambda: conv16(image16).sum().backward(),
            {"conv": ""},
        ),
        Workload(
            "depthwise conv2d fp32 fwd+bwd", lambda: depthwise(image).sum().backward(), {"conv": ""}
        ),
        Workload("batch norm fp32 fwd+bwd", lambda: norm(image).sum().backward(), {"aten": ""}),
        Workload("SDPA flash bf16 fwd+bwd", sdpa("FLASH_ATTENTION"), {"attention": ""}),
        Workload("SDPA efficient bf16 fwd+bwd", sdpa("EFFICIENT_ATTENTION"), {"attention": ""}),
        Workload("SDPA cuDNN bf16 fwd+bwd", sdpa("CUDNN_ATTENTION"), {"attention": ""}),
        Workload("sort + cumsum", lambda: (keys.sort(), keys.cumsum(0)), {"aten": ""}),
        Workload("compiled pointwise", lambda: pointwise(a32), {"inductor": ""}),
    ]


def kernel_names(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm: cuBLAS/cuDNN plans, compilation
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return list(dict.fromkeys(kernels))


def check(work: Workload, names: list[str]) -> list[str]:
    """What the workload's kernels fail to show: missing classes or precisions, "other"."""
    problems = []
    classes = [classify(n) for n in names]
    for cls, precision in work.must.items():
        seen = [k for k in classes if k.cls == cls and not k.joins_previous]
        if not seen:
            problems.append(f"no {cls} kernel")
        elif precision and not any(k.facts.get("precision") == precision for k in seen):
            got = sorted({k.facts.get("precision") or "not named" for k in seen})
            problems.append(f"{cls} precision {got}, not {precision}")
    if not work.allowed_other:
        for name, klass in zip(names, classes, strict=True):
            if klass.cls in ("other", "triton"):
                problems.append(f"{klass.cls}: {name[:90]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for kernel_classes.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    device = torch.cuda.get_device_name()
    header = {
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.date.today().isoformat(),
    }
    print(", ".join(f"{k} {v}" for k, v in header.items()))
    rows, failed = [], 0
    for work in workloads():
        try:
            names = kernel_names(work.run)
        except Exception as error:  # a backend this GPU or build lacks: say so, go on
            print(f"\n{work.name}: not run ({type(error).__name__}: {str(error)[:120]})")
            rows.append({"workload": work.name, "skipped": str(error)[:300]})
            continue
        problems = check(work, names)
        failed += bool(problems)
        print(f"\n{work.name}: {'ok' if not problems else 'MISMATCH: ' + '; '.join(problems)}")
        for name in names:
            klass = classify(name)
            extra = " (joins the kernel before)" if klass.joins_previous else ""
            print(f"  {klass.cls:<11} {klass.detail[:50]:<50}{extra} | {name[:140]}")
            rows.append(
                {
                    "workload": work.name,
                    "name": name,
                    "class": klass.cls,
                    "detail": klass.detail,
                    "facts": klass.facts,
                    "joins_previous": klass.joins_previous,
                }
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel_classes.json").write_text(json.dumps({**header, "kernels": rows}, indent=1))
    print(f"\n{failed} workload(s) with a mismatch; wrote {args.out / 'kernel_classes.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
