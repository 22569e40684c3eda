"""What modules/geglu/fused.py's Hopper kernels and modules/geglu/gluon.py's compile to for SM90,
on any machine
with Triton (no GPU).

Per configuration: the shared memory it asks for (a launch fails above the GPU's 227 KB; two
programs per SM need at most half of 228 KB each), registers per thread, and counts of the
SASS instructions that show the kernel's shape: the epilogue's special-function ops
(MUFU.TANH: tanh.approx; MUFU.EX2 + MUFU.RCP: gelu_tanh's exp2 and division), tensor-core
MMAs (HGMMA), TMA loads and stores (UTMALDG, UTMASTG), stores to shared memory by stmatrix
(STSM), register reallocation between warp roles (PTX's setmaxnreg, which SASS spells
USETMAXREG: present only where warp specialization split the kernel into producer and consumer
warps), and stores to local memory (STL: spilled registers; 0 where the accumulators fit).
Static counts in the code, not executions. Triton compiles with its own ptxas and reads the
cubin with its own cuobjdump.

    uv run python -m tools.dev.kernel_lab.fused_geglu_sass          (the committed Hopper configs)
    uv run python -m tools.dev.kernel_lab.fused_geglu_sass --candidates hopper-epi  (the tuner's)
    uv run python -m tools.dev.kernel_lab.fused_geglu_sass --candidates gluon
    (modules/geglu/gluon.py's)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from common import cli
from modules import triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import hopper, hopper_epi
from modules.geglu import shared as geglu_shared
from tracereader import Parser, one_line, run

ROOT = Path(__file__).resolve().parents[3]

OPS = (
    "MUFU.TANH", "MUFU.EX2", "MUFU.RCP", "HGMMA", "HGMMA0", "UTMALDG", "UTMASTG", "STSM",
    "SETMAXNREG", "STL",
)  # fmt: skip
# The column's name -> what the SASS says: setmaxnreg.{inc,dec} is USETMAXREG in sm_90's SASS.
SASS_SPELLING = {"SETMAXNREG": "USETMAXREG"}
# HGMMA0: an HGMMA told by a predicate whether to read its accumulator (use_acc / scale-d), as a
# tile's first K step is where the accumulator is not zeroed first (gluon; QuACK's !UPT).
SASS_PATTERNS = {"HGMMA0": re.compile(r"HGMMA\.[^;]*, !?UP(?:T|\d)")}
KERNELS = {
    "hopper": hopper.fused_gate_up_geglu_tma_kernel,
    "hopper-epi": hopper_epi.fused_gate_up_geglu_tma_epi_kernel,
    "gluon": None,  # gluon_geglu.compile_sm90 builds its own signature
}


def compile_sm90(cfg: geglu_shared.Config, dtype: str):
    import triton

    if cfg.path == geglu_shared.GLUON:
        return fused_geglu.gluon().compile_sm90(cfg, cli.DTYPES[dtype])
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = KERNELS[cfg.path]
    fixed = fused_geglu.constexprs(cfg)
    if "PROTON" in kernel.arg_names:  # the hopper kernel as it runs: without Proton's scopes
        fixed["PROTON"] = False
    signature = {
        name: "constexpr" if name in fixed else (f"*{dtype}" if name.endswith("_ptr") else "i32")
        for name in kernel.arg_names
    }
    source = ASTSource(kernel, signature, constexprs=fixed)
    options = {"num_warps": cfg.warps, "num_stages": cfg.stages}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def sass_counts(cubin: bytes) -> tuple[int | None, dict[str, int]]:
    """(registers per thread, {instruction: static count}) from Triton's own cuobjdump."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        usage = subprocess.run(
            [str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
        sass = subprocess.run(
            [str(tool), "--dump-sass", f.name], capture_output=True, text=True
        ).stdout
    finally:
        os.unlink(f.name)
    regs = re.search(r"REG:(\d+)", usage)
    return (int(regs.group(1)) if regs else None), {
        op: len(SASS_PATTERNS[op].findall(sass))
        if op in SASS_PATTERNS
        else sass.count(SASS_SPELLING.get(op, op))
        for op in OPS
    }


def load_candidates():
    from tools import fused_mlp_candidates  # the tuner's lists

    return fused_mlp_candidates


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--candidates",
        choices=list(KERNELS),
        help="the tuner's full candidate list for this path instead of the committed configs",
    )
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    args = parser.parse_args()
    if triton_support.INTERPRETING:
        print("error: unset TRITON_INTERPRET: the interpreter compiles nothing", file=sys.stderr)
        return 2
    if args.candidates == "hopper":
        configs = load_candidates().hopper_candidates(False)
    elif args.candidates == "hopper-epi":
        configs = load_candidates().hopper_epi_candidates(False)
    elif args.candidates == "gluon":
        configs = load_candidates().gluon_candidates(False)
    else:
        configs = [c for c in fused_geglu.CONFIGS.values() if c.path in KERNELS]
    import triton

    print(f"Triton {triton.__version__}, compiled for sm_90 ({args.dtype}); static SASS counts")
    print(f"{'configuration':<78} {'shared':>7} {'regs':>4}  " + " ".join(OPS))
    failed = 0
    for cfg in configs:
        try:
            compiled = compile_sm90(cfg, args.dtype)
        except Exception as err:  # one configuration failing must not hide the others
            failed += 1
            print(f"{cfg.describe():<78} FAILED {one_line(err, 140)}")
            continue
        regs, counts = sass_counts(compiled.asm["cubin"])
        shared_kb = compiled.metadata.shared / 1024
        print(
            f"{cfg.describe():<78} {shared_kb:5.1f}KB {regs if regs else '?':>4}  "
            + " ".join(f"{counts[op]:>{len(op)}}" for op in OPS)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
