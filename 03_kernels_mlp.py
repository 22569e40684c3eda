"""Part 2, third rung: the same GeGLU MLP as a hand-tuned LigerGEGLUMLP from the kernels Hub.

You will learn: how to pull a pre-built, version-pinned kernel with the `kernels` library, and
what a hand-written fused kernel looks like in a trace next to Inductor's generated one.

Guess first. Per recorded step, on a GPU:
  three GEMM kernels (gate, up, down; the same cuBLAS kernels as the eager MLP) and one Triton
  kernel, `_geglu_tanh_forward_kernel`, computing gelu(gate) * up in one pass: four kernels,
  the fusion of the compiled MLP without the compiler (no TorchDynamo rows on the CPU lane).
Liger's kernel is Triton, so this script needs a CUDA GPU.

Where the kernel comes from: the Hub (as in the post); with HF_HUB_OFFLINE=1, your Hub cache;
with LOCAL_KERNELS="kernels-community/liger-kernels=/path/to/repo", a local checkout; and if
none of these answers, the same class from the liger-kernel package on PyPI. The run says which.

    uv run 03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
"""

import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from kernels import get_kernel

from common import bench, check, cli, kernel_source, mlp_flags, outputs, profiling, traffic
from common.expectations import Expect

SCRIPT = "03_kernels_mlp"
ANNOTATION = "kernels_mlp_fwd"
REPO_ID = "kernels-community/liger-kernels"


@dataclass
class GeGLUConfig:
    """The slice of a transformers config that LigerGEGLUMLP reads."""

    hidden_size: int
    intermediate_size: int
    hidden_act: str = "gelu_pytorch_tanh"  # Liger implements the tanh GeLU only


# Guess first: what each recorded step must hold, in kernel classes (names differ per GPU).
EXPECT = {
    "eager": Expect(
        gpu={"gemm": 3, "triton": 1, "elementwise": 0, "inductor": 0},
        cpu_absent=("TorchDynamo Cache Lookup", "aten::gelu", "aten::mul"),
        why="the compiled MLP's fusion, written by hand: no compiler rows",
    ),
    "compile": Expect(
        gpu={"gemm": 3, "triton": 1, "elementwise": 0},
        cpu_present=("Torch-Compiled Region*",),
        gemms_as_in="eager",
        why="Dynamo wraps Liger's Triton kernel as it is; nothing left to fuse",
    ),
}


def fetch_liger_layers():
    # The post's line: a pre-built kernel package, pinned to version 1 (whose LigerGEGLUMLP
    # takes a config, as here), downloaded once and cached.
    return get_kernel(REPO_ID, version=1).layers


def geglu_reference(x, gate_w, up_w, down_w):
    """The plain-PyTorch function LigerGEGLUMLP must compute."""
    return F.linear(F.gelu(F.linear(x, gate_w), approximate="tanh") * F.linear(x, up_w), down_w)


def parse(argv):
    parser = cli.make_parser(__doc__, prog=f"{SCRIPT}.py")
    mlp_flags.add_shape_flags(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.device == "cpu" or not torch.cuda.is_available():
        raise cli.UsageError(
            "03_kernels_mlp.py needs a CUDA GPU: Liger's GeGLU is a Triton "
            "kernel and Triton has no CPU backend here (03_simple_mlp.py runs "
            "on a CPU)"
        )
    run = cli.resolve(args)
    cli.ensure_fits(mlp_flags.bytes_needed(args, run), run)
    out_paths = outputs.prepare(
        args.traces_dir,
        SCRIPT,
        outputs.run_tag(mlp_flags.shape_tag(args), args, run),
        gzip=args.gzip,
    )

    layers, source = kernel_source.liger_layers(fetch_liger_layers, REPO_ID)
    print(f"kernels: {source}")
    config = GeGLUConfig(hidden_size=args.dim, intermediate_size=args.hidden)
    mlp = layers.LigerGEGLUMLP(config).to(run.device, run.dtype).eval()
    forward = torch.compile(mlp) if args.compile else mlp
    x = torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)

    with torch.no_grad():
        try:
            out = profiling.warm_up(lambda: forward(x), run, compiling=args.compile)
        except Exception as err:
            if not args.compile:
                raise
            raise cli.UsageError(
                f"torch.compile could not compile LigerGEGLUMLP ({cli.one_line(err)}); "
                "its GeGLU is already fused by hand, run without --compile"
            ) from None
        weights = [
            p.float() for p in (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
        ]
        check.against_reference(out, geglu_reference(x.float(), *weights), run.dtype)
        profiling.profile_and_save(
            lambda: forward(x), annotation=ANNOTATION, run=run, args=args, outputs=out_paths
        )
    seen = profiling.look(out_paths, EXPECT["compile" if args.compile else "eager"])
    if args.bench:
        tokens, elt = args.batch * args.seq, x.element_size()
        model = traffic.geglu_mlp(tokens, args.dim, args.hidden, elt, fused=True)
        with torch.no_grad():
            bench.report(lambda: forward(x), run=run, model=model, trace=seen.trace, args=args)
    return profiling.finish(args, out_paths, seen.as_expected)


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
