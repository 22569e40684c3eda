"""Where the host's time goes when the fused MLP's gluon kernel is launched eagerly (issue 41).

Each piece of one forward is timed on its own with common/measuring/timing.time_host (a few
dozen calls back to back, far below the launch queue's depth, so the host never waits for the
GPU), then the whole forward is run under cProfile for the functions that cost the most:

    python -m tools.dev.kernel_lab.gluon_dispatch --m 8192 --dim 768 --hidden 3072

Needs an SM90 GPU (gluon's kernel is Hopper's).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys

import torch

from common.measuring import timing
from modules.geglu import fused
from modules.geglu import gluon as g
from modules.models import GeGLUMLP
from tracereader import Parser, UsageError, run


def parse(argv):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=8192)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--hidden", type=int, default=3072)
    p.add_argument("--config", default="gluon-coop", choices=sorted(fused.CONFIGS))
    p.add_argument("--profile-calls", type=int, default=400)
    p.add_argument(
        "--under-profiler",
        action="store_true",
        help="time each piece again inside an active torch.profiler (CPU and CUDA)",
    )
    return p.parse_args(argv)


def pieces(args) -> dict:
    """name -> a call of one piece of the forward, each on the same tensors."""
    cfg = fused.CONFIGS[args.config]
    mlp = GeGLUMLP(args.dim, args.hidden).cuda().bfloat16()
    module = fused.FusedGeGLUMLP(mlp, args.config).cuda()
    x = torch.randn(args.m, args.dim, device="cuda", dtype=torch.bfloat16)
    packed, hidden = module.gate_up, module.hidden
    out = torch.empty(args.m, hidden, device="cuda", dtype=torch.bfloat16)
    programs = cfg.per_sm * torch.cuda.get_device_properties(0).multi_processor_count
    descs = g.descriptors(x, packed, out, cfg)
    grid = (programs, 1, 1)
    kw = dict(g.constexprs(cfg), num_warps=cfg.warps, maxnreg=g.plan(cfg).maxnreg)
    jit = g.fused_gate_up_geglu_gluon_kernel
    compiled = jit[grid](*descs, args.m, hidden, args.dim, **kw)
    values = g._constexpr_values(cfg, False)
    module(x)
    ref = g.launch(x, packed, hidden, cfg, programs)
    jit[grid](*descs, args.m, hidden, args.dim, **kw)
    same = torch.equal(ref, out)
    out.zero_()
    compiled[grid](*descs, args.m, hidden, args.dim, *values)
    print(f"  the direct launch writes what the JIT's does: {same and torch.equal(ref, out)}")
    return {
        "module forward": lambda: module(x),
        "gate_up_geglu (fused.py)": lambda: fused.gate_up_geglu(x, packed, hidden, args.config),
        "fused.launch": lambda: fused.launch(x, packed, hidden, cfg),
        "gluon.launch": lambda: g.launch(x, packed, hidden, cfg, programs),
        "torch.empty of the output": lambda: torch.empty(args.m, hidden, device="cuda",
                                                         dtype=torch.bfloat16),
        "descriptors (5)": lambda: g.descriptors(x, packed, out, cfg),
        "JIT launch, descriptors prebuilt": lambda: jit[grid](
            *descs, args.m, hidden, args.dim, **kw),
        "compiled[grid], descriptors prebuilt": lambda: compiled[grid](
            *descs, args.m, hidden, args.dim, *values),
        "down_proj (cuBLAS)": lambda: module.down_proj(ref),
        "torch.mm alone, same shapes": lambda: torch.mm(ref, module.down_proj.weight.t()),
    }  # fmt: skip


def main(argv=None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        raise UsageError("gluon_dispatch: needs an SM90 GPU (gluon's kernel is Hopper's)")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; M {args.m} K {args.dim} "
          f"N {args.hidden}, {args.config}")  # fmt: skip
    with torch.no_grad():
        calls = pieces(args)
        times = {name: [] for name in calls}
        for _ in range(3):  # rounds: every piece timed in the same state of the host
            for name, fn in calls.items():
                times[name].append(timing.time_host(fn, calls=40, repeats=15).median_s)
    for name, ts in times.items():
        print(f"  {name:40s} {sorted(ts)[1] * 1e6:8.1f} us host per call (median of 3 rounds)")
    if args.under_profiler:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with torch.no_grad(), profile(activities=activities, record_shapes=True):
            for name, fn in calls.items():
                t = timing.time_host(fn, calls=40, repeats=5)
                print(f"  under the profiler: {name:40s} {t.median_s * 1e6:8.1f} us")
    if args.profile_calls <= 0:
        return 0
    forward = calls["module forward"]
    prof = cProfile.Profile()
    torch.cuda.synchronize()
    with torch.no_grad():
        for _ in range(args.profile_calls // 40):  # 40 calls at a time: the queue never fills
            prof.enable()
            for _ in range(40):
                forward()
            prof.disable()
            torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
