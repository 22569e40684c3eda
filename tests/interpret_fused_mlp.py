"""Run 03_fused_mlp.py's kernels (modules/geglu/fused.py) through Triton's interpreter; print what
was
seen as JSON.

Started by tests/test_fused_mlp.py in a subprocess with TRITON_INTERPRET=1 (Triton reads it
when it is imported, so it cannot be switched on inside the test process). Everything that
needs the interpreter happens in this one process, because starting one costs seconds:

    TRITON_INTERPRET=1 python -m tests.interpret_fused_mlp TRACES_DIR

Without TRITON_INTERPRET, on a CUDA GPU, the same kernel and module checks run compiled, the
module under Inductor (torch.compile's default), and the JSON is printed the same way:

    python -m tests.interpret_fused_mlp
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import torch
import torch.nn.functional as F

from common import check, cli
from common.cli import DTYPES
from modules import triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import shared as geglu_shared
from modules.models import GeGLUMLP, geglu_reference
from tests.helpers import load_script

Config = geglu_shared.Config
DEVICE = "cpu" if triton_support.INTERPRETING else "cuda"

# Small tiles, so that odd shapes take several row blocks, column blocks and K steps, and the
# persistent grid (3 programs on the interpreter) loops over more tiles than it has programs.
SMALL = {
    "plain": Config("plain", 16, 64, 16, stages=2, warps=4),
    "hopper": Config("hopper", 16, 64, 16, stages=2, warps=4),
    "hopper-not-persistent": Config(
        "hopper", 16, 64, 16, stages=2, warps=4, persistent=False, flatten=False
    ),
}


def kernel_case(path: str, dtype: str, config: Config, m: int, dim: int, hidden: int) -> dict:
    torch.manual_seed(m * 1000 + dim + hidden)
    dt = DTYPES[dtype]
    x = torch.randn(m, dim).to(DEVICE, dt)
    gate = (torch.randn(hidden, dim) / dim**0.5).to(DEVICE, dt)
    up = torch.randn(hidden, dim).to(DEVICE, dt)
    packed = geglu_shared.pack_gate_up(gate, up, config.block_n // 2)
    out = fused_geglu.launch(x, packed, hidden, config)
    ref = F.gelu(x.float() @ gate.float().T, approximate="tanh") * (x.float() @ up.float().T)
    return {
        "case": f"{path} {dtype} M={m} dim={dim} hidden={hidden} {config.describe()}",
        "shape_ok": list(out.shape) == [m, hidden] and out.dtype == dt,
        "error": check.relative_error(out, ref),
        "tolerance": check.TOLERANCE[dt],
    }


def kernel_cases() -> list[dict]:
    results = []
    for dtype in ("bf16", "fp16", "fp32"):
        paths = ["plain"] if dtype == "fp32" else ["plain", "hopper"]
        for path in paths:
            name = "plain-fp32" if path == "plain" and dtype == "fp32" else path
            default = fused_geglu.CONFIGS[name]
            for m in (37, 1):
                results.append(kernel_case(path, dtype, default, m, 48, 80))
            results.append(kernel_case(path, dtype, SMALL[path], 37, 48, 80))
    results.append(kernel_case("hopper", "bf16", SMALL["hopper-not-persistent"], 37, 48, 80))
    return results


def hopper_epi_cases() -> list[dict]:
    """The opt-in hopper-epi path: its committed configuration, and small tiles with every
    option on (two stores per tile, tiles grouped along N, two programs per "SM"), in both
    tensor-core dtypes, M = 37 and M = 1; hidden 80 ends in half a tile and half a store."""
    small = Config(
        "hopper-epi", 16, 64, 16, stages=2, warps=4, along_n=True, epi_split=2, fast_tanh=True
    )
    configs = [fused_geglu.CONFIGS["hopper-epi"], small, replace(small, per_sm=2, group_m=2)]
    return [
        kernel_case("hopper-epi", dtype, config, m, 48, 80)
        for dtype in ("bf16", "fp16")
        for config in configs
        for m in (37, 1)
    ]


def module_cases() -> list[dict]:
    """The whole forward, eager (the direct launch) and under torch.compile (the custom op),
    against the float32 reference; and a forward that autograd records, whose
    backward must fail (the op has no backward) rather than leave x without a gradient.
    Interpreted, torch.compile runs Dynamo alone (backend="eager"): Inductor would trace into
    an interpreted kernel, which cannot run on the fake tensors that tracing uses. On a GPU it
    is torch.compile's default, Inductor."""
    backend = "eager" if triton_support.INTERPRETING else "inductor"
    results = []
    for dtype, config in (("bf16", "plain"), ("fp32", "plain-fp32"), ("fp16", "hopper")):
        dt = DTYPES[dtype]
        torch.manual_seed(0)
        mlp = GeGLUMLP(48, 80).to(DEVICE, dt).eval()
        fused = fused_geglu.FusedGeGLUMLP(mlp, config).eval()
        x = torch.randn(2, 5, 48, dtype=dt).to(DEVICE)
        ref = geglu_reference(x, mlp)
        torch._dynamo.reset()
        compiled = torch.compile(fused, fullgraph=True, backend=backend)
        with torch.no_grad():
            eager_err = check.relative_error(fused(x), ref)
            compiled_err = check.relative_error(compiled(x), ref)
            explained = torch._dynamo.explain(fused)(x)
        needs_grad = x.clone().requires_grad_()
        try:
            fused(needs_grad).float().sum().backward()
            backward = "no error"
        except RuntimeError as err:
            backward = str(err).splitlines()[0]
        results.append(
            {
                "case": f"module {dtype} {config} {backend}",
                "backward": backward,
                "x_grad": needs_grad.grad is not None,
                "eager_error": eager_err,
                "compiled_error": compiled_err,
                "tolerance": check.TOLERANCE[dt],
                "graph_breaks": explained.graph_break_count,
                "graphs": explained.graph_count,
                "ops": [str(n.target) for g in explained.graphs for n in g.graph.nodes],
            }
        )
    return results


def lesson_runs(traces_dir: str) -> list[dict]:
    runs = []
    small = ["--batch", "2", "--seq", "3", "--dim", "16", "--hidden", "32"]
    for extra in ([], ["--kernel", "hopper"]):
        argv = [*small, *extra, "--traces-dir", traces_dir, "--device", "cpu"]
        runs.append({"argv": argv, "rc": cli.run_main(load_script("03_fused_mlp").main, argv)})
    return runs


def main() -> int:
    if not triton_support.INTERPRETING and not torch.cuda.is_available():
        print("error: run with TRITON_INTERPRET=1, or on a CUDA GPU", file=sys.stderr)
        return 2
    report = {
        "kernels": kernel_cases(),
        "hopper_epi": hopper_epi_cases(),
        "modules": module_cases(),
    }
    if triton_support.INTERPRETING:
        report["lesson_runs"] = lesson_runs(sys.argv[1])
    print("JSON " + json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
