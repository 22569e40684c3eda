"""Check and time 03_fused_mlp.py's kernel under candidate configurations, beside its baselines.

On a CUDA GPU, for one GeGLU MLP shape (default: the post's, M = 64 x 128 = 8192, dim 768,
hidden 3072, bf16), in this order:
  1. baselines: cuBLAS gate + up as two F.linear calls and as one over the concatenated weight,
     cuBLAS down, and a 8192^3 matmul in the run's dtype;
  2. the fused gate/up + GeGLU kernel under each candidate configuration of both paths (tile,
     stages, warps; on the Hopper path also persistent or not, loop flattening, warp
     specialization; on the opt-in hopper-epi path, `--paths hopper,hopper-epi`, what fits
     from QuACK's gated GEMM, one change at a time): checked against a float32 reference,
     then timed. A configuration that
     fails to compile, runs out of shared memory or computes the wrong thing costs one line;
  3. the whole forward: the lesson's module with the best configuration of each path, eager,
     captured in a CUDA graph (no launch gaps: what the kernels alone take, cold L2 included)
     and under torch.compile (fullgraph=True: a graph break fails it), against the eager MLP,
     torch.compile's default on it, Liger's LigerGEGLUMLP when liger_kernel imports, and
     QuACK's gated GEMM (quack-kernels, `uv sync --extra hopper`; SM90, where it imports)
     with cuBLAS down, tuned=False and tuned=True, its gate/up GEMM also timed alone; the
     first call of each (JIT compile; with tuned=True also QuACK's autotuning) is timed and
     printed apart, before the passes;
     all built first, then timed in round-robin passes together with what sets the floor, so
     that every forward is timed in the same power state of the GPU (under sustained dense
     GEMMs it reaches its power limit and lowers its clocks); nvidia-smi's clocks, power and
     throttle reasons are printed before and after. The compute floor is the forward's FLOPs
     at the best rate measured in those passes: the 8192^3 matmul, cuBLAS's gate/up and down
     GEMMs at this shape, the lesson's own kernel and QuACK's (one square is no ceiling: a
     K = 768 GEMM can beat it), so no GEMM timed here beats the floor;
  4. a short table, the targets met or not, and each path's best configuration as a line to
     paste into CONFIGS in modules/geglu/fused.py.
Times are triton.testing.do_bench medians (each call after an L2 flush). Candidates stop once
--budget-s is spent, so the whole run ends well inside 8 minutes.

    uv run python -m tools.tune_fused_mlp                      (needs a CUDA GPU; ~2 minutes)
    uv run python -m tools.tune_fused_mlp --quick              (a few candidates per path)
    python3 -m tools.tune_fused_mlp                            (the same, without uv)
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from common import check, cli
from modules import quack_gemm
from modules.geglu import fused as fused_geglu
from modules.models import GeGLUMLP, geglu_reference
from tools.fused_mlp_candidates import PATHS, Config, as_code, candidates_for, quack_variants
from tools.fused_mlp_timing import (
    Row,
    bench_us,
    compute_floor,
    cuda_alive,
    first_line,
    gpu_state,
    host_us,
    queued_us,
    rel_err,
)
from tracereader import Parser, run

DTYPES = {name: cli.DTYPES[name] for name in ("bf16", "fp16")}  # the tensor cores' types
ROUNDS = 5  # round-robin passes over the whole forwards
TWO = "cuBLAS gate + up (two F.linear)"
DOWN = "cuBLAS down (F.linear)"
ONE = "cuBLAS gate+up, one F.linear over [2*hidden, dim]"
EAGER = "eager MLP (03_simple_mlp)"
COMPILED = "torch.compile(MLP), default"
LIGER = "Liger LigerGEGLUMLP"


@dataclass
class Shape:
    """What every section times: the shape, the module and its input, the float32 reference of
    gate/up + GeGLU, and the rows of the summary (each section adds its own)."""

    args: argparse.Namespace
    dtype: torch.dtype
    M: int
    dim: int
    hidden: int
    tol: float
    dev: torch.device
    props: object
    major: int
    minor: int
    mlp: GeGLUMLP
    x: torch.Tensor
    m_ref: torch.Tensor
    rows: list[Row] = field(default_factory=list)

    @property
    def weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.mlp.gate_proj.weight, self.mlp.up_proj.weight, self.mlp.down_proj.weight

    @property
    def gate_up_flops(self) -> int:
        return 2 * self.M * self.dim * 2 * self.hidden

    @property
    def down_flops(self) -> int:
        return 2 * self.M * self.hidden * self.dim


def make_parser() -> argparse.ArgumentParser:
    parser = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--m", type=int, default=8192, help="tokens: batch x seq (default: 8192)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--hidden", type=int, default=3072)
    parser.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    parser.add_argument("--quick", action="store_true", help="a few candidates per path")
    parser.add_argument(
        "--budget-s", type=float, default=240.0, help="stop trying candidates after this (240)"
    )
    parser.add_argument(
        "--paths",
        default="hopper,plain",
        help=f"which paths' candidates to try, of {','.join(PATHS)} (default: hopper,plain)",
    )
    parser.add_argument(
        "--tracebacks", action="store_true", help="print a failing candidate's whole traceback"
    )
    return parser


def setup(args) -> Shape:
    """The GPU said, the module built and its float32 gate/up + GeGLU computed."""
    import triton

    torch.set_grad_enabled(False)  # inference: the custom op has no backward
    dtype, M, dim, hidden = DTYPES[args.dtype], args.m, args.dim, args.hidden
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    major, minor = torch.cuda.get_device_capability(dev)
    print(
        f"{props.name}, compute capability {major}.{minor}, {props.multi_processor_count} SMs; "
        f"torch {torch.__version__}, triton {triton.__version__}, Python {sys.version.split()[0]}"
    )
    print(f"shape: x [{M}, {dim}], gate/up [{hidden}, {dim}], down [{dim}, {hidden}], {args.dtype}")

    torch.manual_seed(0)
    mlp = GeGLUMLP(dim, hidden).to(dev, dtype).eval()
    x = torch.randn(M, dim, device=dev, dtype=dtype)
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    with torch.no_grad():
        m_ref = F.gelu(F.linear(x.float(), gate.float()), approximate="tanh") * F.linear(
            x.float(), up.float()
        )
    tol = check.TOLERANCE[dtype]
    return Shape(args, dtype, M, dim, hidden, tol, dev, props, major, minor, mlp, x, m_ref)


def baselines(s: Shape) -> tuple[dict, torch.Tensor, float]:
    """1. cuBLAS's GEMMs at this shape and a square matmul: (their calls, the square's operand,
    the one-GEMM gate/up's time: the candidates' yardstick)."""
    print("\n1. baselines (do_bench median after an L2 flush; queued: back to back, warm L2)")
    x, (gate, up, down) = s.x, s.weights
    concat = torch.cat([gate, up]).contiguous()
    m_low = s.m_ref.to(s.dtype)  # down's input
    base = {
        TWO: lambda: (F.linear(x, gate), F.linear(x, up)),
        ONE: lambda: F.linear(x, concat),
        DOWN: lambda: F.linear(m_low, down),
    }
    for what, fn in base.items():
        us, q_us = bench_us(fn), queued_us(fn)
        s.rows.append(Row(what, us, f"queued {q_us:.1f}"))
        print(f"  {us:7.1f} us {what:<52} queued {q_us:6.1f} us")
    square = torch.randn(8192, 8192, device=s.dev, dtype=s.dtype)
    peak_us = bench_us(lambda: square @ square)
    print(
        f"  {s.args.dtype} 8192^3 matmul: {peak_us:.1f} us = "
        f"{2 * 8192**3 / peak_us / 1e6:.0f} TFLOP/s (not the floor's: section 3 times those)"
    )
    return base, square, s.rows[1].us


def try_candidates(s: Shape, candidates: list[Config], one_us: float) -> dict:
    """2. Each candidate checked, then timed, until the budget is spent: {path: (us, the
    fastest configuration)}."""
    print(
        f"\n2. fused gate/up + GeGLU kernel, {len(candidates)} candidates "
        f"(budget {s.args.budget_s:.0f} s; x = time / cuBLAS gate+up as one GEMM, {one_us:.1f} us)"
    )
    x, (gate, up, _) = s.x, s.weights
    packed_cache: dict[int, torch.Tensor] = {}
    best: dict[str, tuple[float, Config]] = {}
    budget_end = time.perf_counter() + s.args.budget_s
    for number, cfg in enumerate(candidates):
        if time.perf_counter() > budget_end:
            print(f"  budget spent: {cfg.describe()} and the rest not tried")
            break
        layout = "gluon" if cfg.path == "gluon" else cfg.block_n  # what the packing needs
        if layout not in packed_cache:
            packed_cache[layout] = fused_geglu.pack(cfg, gate, up)
        packed = packed_cache[layout]
        # Through the custom op, which only changes the host's time, not the GPU's measured here.
        name = f"candidate-{number}"
        fused_geglu.CONFIGS[name] = cfg

        def call(packed=packed, name=name):
            return torch.ops.profiling_pytorch.fused_gate_up_geglu(x, packed, s.hidden, name)

        t0 = time.perf_counter()
        try:
            out = call()
            torch.cuda.synchronize()
        except Exception as err:
            print(f"  FAILED   {cfg.describe():<52} {first_line(err)}")
            if s.args.tracebacks:  # a compile error's whole text: the first GPU runs of a kernel
                traceback.print_exc()
            if not cuda_alive():
                print("  the CUDA context is broken; no more candidates")
                break
            continue
        compile_s = time.perf_counter() - t0
        err = rel_err(out, s.m_ref)
        if not err <= s.tol:
            print(f"  WRONG    {cfg.describe():<52} relative error {err:.2e} > {s.tol:.0e}")
            continue

        us, q_us = bench_us(call), queued_us(call)
        tflops = s.gate_up_flops / (us * 1e-6) / 1e12
        print(
            f"  {us:7.1f} us {cfg.describe():<52} x{us / one_us:.3f}  {tflops:4.0f} TFLOP/s  "
            f"queued {q_us:6.1f} us  err {err:.1e}  first call {compile_s:.1f} s"
        )
        if cfg.path not in best or us < best[cfg.path][0]:
            best[cfg.path] = (us, cfg)
    for path, (us, cfg) in best.items():
        s.rows.append(Row(f"fused kernel, best {path}: {cfg.describe()}", us))
    return best


def cuda_graph(module, x3: torch.Tensor):
    """The module's two launches captured once and replayed: no host work in the timed
    window but the replay itself (x3 is the static input every timing passes)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):  # warm-up off the capture: allocations, Triton's first launch
            module(x3)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = module(x3)

    def replay(_x):
        graph.replay()
        return out

    return replay


class Forwards:
    """3. The whole forwards, each built and checked now and timed later with all the others:
    `built` maps what -> (call, note); `kernels` the gate/up kernels timed beside them, what
    -> (row, call)."""

    def __init__(self, s: Shape):
        self.s = s
        self.x3 = s.x.view(1, s.M, s.dim)
        self.y_ref = geglu_reference(self.x3, s.mlp)
        self.built: dict[str, tuple] = {}
        self.kernels: dict[str, tuple[str, object]] = {}

    def add(self, what: str, build, *, compiled: bool = False) -> None:
        """Build and check one forward now; it is timed below, with all the others."""
        x3 = self.x3
        try:
            t0 = time.perf_counter()
            fn = build()
            with torch.no_grad():
                y = fn(x3)
                torch.cuda.synchronize()
            setup_s = time.perf_counter() - t0
            err = rel_err(y, self.y_ref)
            if not err <= self.s.tol:
                raise RuntimeError(f"relative error {err:.2e} > {self.s.tol:.0e}")
        except Exception as err:
            print(f"  FAILED   {what:<52} {first_line(err)}")
            self.s.rows.append(Row(what, None, first_line(err)))
            return
        note = f"err {err:.1e}; first call {setup_s:.1f} s" + (" (compile)" if compiled else "")
        self.built[what] = (lambda fn=fn: fn(x3), note)

    def add_references(self) -> None:
        """The eager MLP, torch.compile's default on it, and Liger's where it imports."""
        s, mlp = self.s, self.s.mlp
        self.add(EAGER, lambda: mlp)
        self.add(COMPILED, lambda: torch.compile(mlp), compiled=True)
        try:
            from liger_kernel.transformers.geglu import LigerGEGLUMLP
        except Exception as err:
            print(f"  (Liger not measured: liger_kernel does not import: {first_line(err)})")
            return

        def build_liger():
            cfg = SimpleNamespace(
                hidden_size=s.dim, intermediate_size=s.hidden, hidden_act="gelu_pytorch_tanh"
            )
            liger = LigerGEGLUMLP(cfg).to(s.dev, s.dtype).eval()
            liger.load_state_dict(mlp.state_dict())
            return liger

        self.add(LIGER, build_liger)

    def add_fused(self, best: dict) -> dict[str, dict[str, str]]:
        """The lesson's own configuration per path (what a reader runs), not the best candidate
        above (which may differ by noise or be one to try): its kernel against cuBLAS, and its
        forward eager, in a CUDA graph and compiled. Returns each path's forwards' names."""
        s, mlp = self.s, self.s.mlp
        x, (gate, up, _) = s.x, s.weights
        fused_names: dict[str, dict[str, str]] = {}
        for path in best:
            name = path  # the key in fused_geglu.CONFIGS: the committed configuration
            committed = fused_geglu.CONFIGS[name]
            packed = fused_geglu.pack(committed, gate, up)
            self.kernels[path] = (
                f"fused kernel, {path} as committed",
                lambda packed=packed, committed=committed: fused_geglu.launch(
                    x, packed, s.hidden, committed
                ),
            )
            fused_names[path] = {
                "eager": f"fused MLP, {path}",
                "graph": f"fused MLP in a CUDA graph, {path}",
                "compiled": f"torch.compile(fused MLP, fullgraph), {path}",
            }
            self.add(
                fused_names[path]["eager"], lambda name=name: fused_geglu.FusedGeGLUMLP(mlp, name)
            )
            self.add(
                fused_names[path]["graph"],
                lambda name=name: cuda_graph(fused_geglu.FusedGeGLUMLP(mlp, name), self.x3),
            )
            if path == "gluon":  # eager only: Inductor traces Triton kernels, not Gluon's
                continue
            self.add(
                fused_names[path]["compiled"],
                lambda name=name: torch.compile(
                    fused_geglu.FusedGeGLUMLP(mlp, name), fullgraph=True
                ),
                compiled=True,
            )
        return fused_names

    def add_quack(self) -> list[tuple[str, str, bool]]:
        """QuACK's gated GEMM: its first call per variant (JIT compile; tuned=True: autotuning
        too) timed apart, then its kernel alone and its whole forward join the passes."""
        s = self.s
        gate, up, _ = s.weights
        quacks = quack_variants(s.major, s.args.dtype)
        if not quacks:
            print(f"  (QuACK not measured: {quack_gemm.unavailable(s.major, s.args.dtype)})")
        b_quack = quack_gemm.gate_up_weight(gate, up) if quacks else None
        for kernel_what, forward_what, tuned in quacks:

            def quack_call(tuned=tuned):
                return quack_gemm.gated(s.x, b_quack, tuned=tuned)

            try:
                t0 = time.perf_counter()
                out = quack_call()
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                err = rel_err(out, s.m_ref)
                if not err <= s.tol:
                    raise RuntimeError(f"relative error {err:.2e} > {s.tol:.0e}")
            except Exception as err:
                print(f"  FAILED   {kernel_what:<52} {first_line(err)}")
                s.rows.append(Row(kernel_what, None, first_line(err)))
                continue
            cost = "JIT compile + autotuning" if tuned else "JIT compile"
            print(f"  {kernel_what}: first call {first_s:.1f} s ({cost}), err {err:.1e}")
            self.kernels[f"quack-{tuned}"] = (kernel_what, quack_call)
            self.add(forward_what, lambda tuned=tuned: quack_gemm.QuackGeGLUMLP(s.mlp, tuned=tuned))
        return quacks


def round_robin(s: Shape, timed: dict, built: dict) -> dict[str, list[float]]:
    """Every call of `timed` once per pass, ROUNDS passes: a GPU that has run dense GEMMs for a
    few seconds reaches its power limit and lowers its clocks (on the H200: 1980 -> ~1650 MHz,
    +10% on this forward), so timings taken one after another would compare states, not code.
    A call that fails is dropped from `timed` and `built`, with a row saying why."""
    print(f"  GPU before: {gpu_state()}")
    samples: dict[str, list[float]] = {what: [] for what in timed}
    with torch.no_grad():
        for _ in range(ROUNDS):
            for what, call in list(timed.items()):
                try:
                    samples[what].append(bench_us(call))
                except Exception as err:  # one forward failing must not lose the others
                    print(f"  FAILED   {what:<52} {first_line(err)}")
                    s.rows.append(Row(what, None, first_line(err)))
                    del timed[what], samples[what]
                    built.pop(what, None)
                    if not cuda_alive():
                        raise
    print(f"  GPU after {ROUNDS} rounds: {gpu_state()}")
    return samples


def report_forwards(s: Shape, fw: Forwards, samples: dict, median: dict) -> dict[str, float]:
    """Each forward's median, spread, back-to-back and host times, printed and added to the
    rows: {what: median us}."""
    forward_us: dict[str, float] = {}
    with torch.no_grad():
        for what, (call, note) in fw.built.items():
            us = forward_us[what] = median[what]
            spread = f"{min(samples[what]):.1f}-{max(samples[what]):.1f}"
            try:
                loop = f"queued {queued_us(call):.1f}, host {host_us(call):.1f}"
            except Exception as err:
                loop = f"queued/host not measured: {first_line(err)}"
            full = f"rounds {spread}; {loop}; {note}"
            print(f"  {us:7.1f} us {what:<52} {full}")
            s.rows.append(Row(what, us, full))
    return forward_us


@dataclass
class Timings:
    """What the summary reads: the medians of the passes and what the forwards came to."""

    median: dict[str, float]
    forward_us: dict[str, float]
    kernel_us: dict[str, float | None]
    fused_us: dict[str, dict[str, float | None]]
    floor_us: float
    quacks: list[tuple[str, str, bool]]


def whole_forwards(s: Shape, best: dict, base: dict, square: torch.Tensor) -> Timings:
    """3. Every forward and kernel built, then timed in round-robin passes together with what
    sets the floor; the floor, then each forward, printed."""
    print(
        f"\n3. whole forward, x [1, M, dim] (do_bench, median of {ROUNDS} round-robin passes, us)"
    )
    fw = Forwards(s)
    fw.add_references()
    fused_names = fw.add_fused(best)
    quacks = fw.add_quack()
    ceiling = f"{s.args.dtype} 8192^3 matmul"
    timed = {
        ceiling: lambda: square @ square,
        **{what: base[what] for what in (TWO, ONE, DOWN)},
        **dict(fw.kernels.values()),
        **{w: c for w, (c, _) in fw.built.items()},
    }
    samples = round_robin(s, timed, fw.built)
    median = {what: sorted(v)[len(v) // 2] for what, v in samples.items()}
    kernel_us = {path: median.get(what) for path, (what, _) in fw.kernels.items()}
    gate_up = s.gate_up_flops
    floor_us, floor_lines = compute_floor(
        gate_up + s.down_flops,
        {
            ceiling: 2 * 8192**3,
            TWO: gate_up,
            ONE: gate_up,
            DOWN: s.down_flops,
            **{what: gate_up for what, _ in fw.kernels.values()},
        },
        median,
        s.props.name,
        s.args.dtype,
    )
    for line in floor_lines:
        print(f"  {line}")
    forward_us = report_forwards(s, fw, samples, median)
    for what in (TWO, ONE):
        s.rows.append(Row(f"{what}, same passes", median.get(what)))
    for path, (what, _) in fw.kernels.items():
        described = fused_geglu.CONFIGS[path].describe() if path in best else "its choice"
        s.rows.append(Row(f"{what}: {described}", kernel_us[path]))
    fused_us = {
        path: {how: forward_us.get(what) for how, what in names.items()}
        for path, names in fused_names.items()
    }
    return Timings(median, forward_us, kernel_us, fused_us, floor_us, quacks)


def print_targets(path: str, t: Timings) -> None:
    """One path's fused forward against the floor, torch.compile, Liger, eager and QuACK."""
    forwards = t.fused_us.get(path, {})
    f_us = forwards.get("eager")
    if f_us is None:
        return
    compile_us, liger_us = t.forward_us.get(COMPILED), t.forward_us.get(LIGER)
    eager_us = t.forward_us.get(EAGER)
    if compile_us:
        print(
            f"  {path}: torch.compile default / fused forward: {compile_us / f_us:.2f}x; "
            "target >= 1.2"
        )
    if liger_us:
        print(f"  {path}: Liger / fused forward: {liger_us / f_us:.2f}x; target > 1")
    print(f"  {path}: fused forward / compute floor: x{f_us / t.floor_us:.2f}; target <= 1.10")
    for how in ("compiled", "graph"):
        if forwards.get(how):
            print(
                f"  {path}: fused forward ({how}) / compute floor: "
                f"x{forwards[how] / t.floor_us:.2f}"
            )
    if eager_us:
        print(f"  {path}: eager / fused forward: {eager_us / f_us:.2f}x")
    for kernel_what, forward_what, _ in t.quacks:
        q_us, qk_us = t.forward_us.get(forward_what), t.median.get(kernel_what)
        if q_us:
            print(f"  {path}: fused forward / {forward_what}: x{f_us / q_us:.2f}; target <= 1.00")
        if qk_us and t.kernel_us.get(path):
            print(
                f"  {path}: fused kernel / {kernel_what}: x{t.kernel_us[path] / qk_us:.2f}; "
                "target <= 1.00"
            )


def summary(s: Shape, best: dict, t: Timings) -> None:
    """4. The table, the targets met or not, and each path's best configuration to paste."""
    print(f"\nsummary ({s.props.name}, {s.args.dtype}, M={s.M}, dim={s.dim}, hidden={s.hidden})")
    print(f"  {'what':<64} {'us':>8}  note")
    for row in s.rows:
        us = f"{row.us:8.1f}" if row.us is not None else "  failed"
        print(f"  {row.what:<64} {us}  {row.note}")
    print(f"  {'compute floor of the forward (its FLOPs at the best rate)':<64} {t.floor_us:8.1f}")
    print("targets (set for the Hopper path; the plain path is the one Ampere runs):")
    two_us, one_us = t.median.get(TWO), t.median.get(ONE)
    for path in best:
        us = t.kernel_us.get(path)
        if us and one_us and two_us:
            print(
                f"  {path}: fused kernel (as committed) / cuBLAS gate+up: x{us / one_us:.2f} "
                f"(one GEMM), x{us / two_us:.2f} (two GEMMs); target <= 1.10"
            )
        print_targets(path, t)
    print(
        "paste into CONFIGS in modules/geglu/fused.py (the fastest candidate; within ~2 us, prefer"
    )
    print("the simpler one: no warp specialization, which Triton 3.6 fails to compile at times):")
    for path, (_, cfg) in best.items():
        print(f'  "{path}": {as_code(cfg)},')


def main() -> int:
    args = make_parser().parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        print(f"error: --paths takes {', '.join(PATHS)}; got {args.paths!r}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    started = time.perf_counter()
    s = setup(args)
    base, square, one_us = baselines(s)
    candidates = candidates_for(paths, s.major, s.minor, args.quick)
    best = try_candidates(s, candidates, one_us)
    timings = whole_forwards(s, best, base, square)
    summary(s, best, timings)
    print(f"total time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
