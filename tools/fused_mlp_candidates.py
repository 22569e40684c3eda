"""The configurations tools/tune_fused_mlp.py tries for 03_fused_mlp.py's kernel, per path (the
quick list a few of each), QuACK's variants it times beside them, and a configuration written
as modules/geglu/fused.py's CONFIGS writes it. tools/dev/kernel_lab's gluon_bench and
fused_geglu_sass read the same lists."""

from __future__ import annotations

from dataclasses import fields, replace

from modules import quack_gemm
from modules.geglu import fused as fused_geglu
from modules.geglu import shared as geglu_shared

Config = geglu_shared.Config
PATHS = geglu_shared.PATHS  # each with its candidates below


def hopper_candidates(quick: bool) -> list[Config]:
    base = Config("hopper", 128, 256, 64, stages=3, warps=8)
    if quick:
        return [base, replace(base, flatten=False), replace(base, warp_specialize=True)]
    return [
        base,
        replace(base, flatten=False),
        replace(base, warp_specialize=True),
        replace(base, warp_specialize=True, flatten=False),
        replace(base, persistent=False, flatten=False),
        replace(base, stages=4),
        replace(base, stages=4, warp_specialize=True),
        replace(base, group_m=16),
        replace(base, group_m=4),
        replace(base, block_k=128, stages=2),
        # 128 packed rows: 64 gate + 64 up per tile; small enough for two programs per SM
        Config("hopper", 128, 128, 64, stages=4, warps=4),
        Config("hopper", 128, 128, 64, stages=5, warps=4),
        Config("hopper", 128, 128, 64, stages=4, warps=4, persistent=False, flatten=False),
        Config("hopper", 128, 128, 64, stages=4, warps=8),
        # 64-row tiles: one warpgroup per tile
        Config("hopper", 64, 256, 64, stages=4, warps=4),
        Config("hopper", 64, 256, 64, stages=4, warps=4, persistent=False, flatten=False),
        # 256-row tiles: two warpgroups of 128 rows each
        Config("hopper", 256, 128, 64, stages=3, warps=8),
    ]


def hopper_epi_candidates(quick: bool) -> list[Config]:
    """The opt-in path with what fits from QuACK's gated GEMM, and the same minus one change
    at a time, so that differences of medians say what each change is worth."""
    base = fused_geglu.CONFIGS["hopper-epi"]
    pair = Config("hopper-epi", 128, 128, 64, stages=3, warps=4, per_sm=2, fast_tanh=True)
    one_store = replace(base, stages=3, epi_split=1)  # = the hopper path + QuACK's tanh
    if quick:
        return [base, one_store, replace(base, fast_tanh=False), replace(pair, epi_split=2)]
    return [
        base,
        one_store,
        replace(base, fast_tanh=False),  # the 4th stage alone
        replace(base, stages=3),  # the split store alone, beside one_store
        replace(base, along_n=True),
        replace(base, along_n=True, group_m=16),
        replace(base, warp_specialize=True),
        # 64 gate + 64 up columns, two programs per SM (3 x 32 KB + 8-16 KB each): while one
        # runs its epilogue the other's tensor-core work goes on, as QuACK's two consumer
        # warpgroups alternate tiles ("pingpong")
        pair,
        replace(pair, epi_split=2),
        replace(pair, epi_split=2, along_n=True),
        replace(pair, per_sm=1, stages=4),
    ]


def gluon_candidates(quick: bool) -> list[Config]:
    """modules/geglu/gluon.py's kernel: pingpong (two consumer warpgroups taking turns over tiles)
    and
    cooperative (one of 8 warps per tile), each beside one change at a time. Shared memory:
    stages x (x's box + the weight's box) + one output box per consumer, under 227 KB."""
    base = fused_geglu.CONFIGS["gluon"]  # pingpong 128 x 128 x 64, 6 stages of 32 KB
    coop = Config("gluon", 128, 256, 64, stages=4, warps=8, consumers=1)  # 4 x 48 + 32 KB
    wide = Config("gluon", 64, 256, 64, stages=4, warps=4, consumers=2)  # 4 x 40 + 2 x 16 KB
    # QuACK's 128 x 192 tile (96 gate + 96 up units; gluon_geglu.split_n: accumulators of 128 and
    # 64 columns): 192 fp32 registers a consumer thread of 232 in pingpong, 4 x 40 + 2 x 24 KB
    # (5 stages would need 248); cooperative 96 registers, 5 x 40 + 24 KB.
    wide192 = Config("gluon", 128, 192, 64, stages=4, warps=4, consumers=2)
    coop192 = Config("gluon", 128, 192, 64, stages=5, warps=8, consumers=1)
    short = [  # tools/dev/gpu_runs/gluon_gpu.sh's list: at most 10, so both shapes fit its time
        base,
        replace(base, fast_tanh=True),
        replace(base, fast_tanh=True, epi_split=2),  # the output in 2 boxes of 128 x 32
        coop,
        replace(coop, fast_tanh=True),  # its epilogue is not overlapped: make it cheaper
        replace(coop, along_n=True),  # QuACK's raster: the Llama shape's DRAM traffic
        # the Llama shape: 1.8-3% ahead of the same without tanh.approx (H100 AB, AD, AH)
        replace(coop, along_n=True, fast_tanh=True),
        # its exposed epilogue stored a 128 x 64 box at a time, each store leaving as written
        replace(coop, along_n=True, fast_tanh=True, epi_split=2),
        replace(wide192, fast_tanh=True),  # QuACK's tile: 53 B a clock per SM, not 64
        replace(wide192, fast_tanh=True, epi_split=2),  # and its tail: 3 boxes of 128 x 32
    ]
    if quick:
        return short
    return short + [
        replace(base, stages=5),
        replace(base, along_n=True),
        replace(base, group_m=16),
        replace(base, block_k=128, stages=3),  # 3 x 64 + 2 x 16 KB
        wide,
        replace(wide, fast_tanh=True),
        wide192,
        replace(wide192, fast_tanh=True, epi_split=2, stages=5),  # room for a 5th stage
        replace(coop192, fast_tanh=True),
    ]


def plain_candidates(quick: bool) -> list[Config]:
    base = Config("plain", 128, 128, 64, stages=4, warps=4)
    if quick:
        return [base, Config("plain", 128, 256, 64, stages=3, warps=8)]
    return [
        base,
        Config("plain", 128, 256, 64, stages=3, warps=8),
        Config("plain", 128, 256, 32, stages=4, warps=8),
        Config("plain", 128, 128, 64, stages=3, warps=8),
        Config("plain", 64, 256, 32, stages=4, warps=4),
        Config("plain", 256, 128, 64, stages=3, warps=8),
    ]


def quack_variants(major: int | None, dtype: str = "bf16") -> list[tuple[str, str, bool]]:
    """(gate/up kernel row, whole-forward row, tuned) per QuACK variant timed on this GPU
    (major: its compute capability); none where QuACK's gated GEMM cannot run."""
    return [
        (f"{what} (gate/up + GeGLU)", f"QuACK MLP: {what} + cuBLAS down", tuned)
        for what, tuned in quack_gemm.variants(major, dtype).items()
    ]


def as_code(cfg: Config) -> str:
    """The configuration as CONFIGS in modules/geglu/fused.py writes it: what differs from the
    defaults."""
    tile = (cfg.path, cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.warps)
    plain = Config(*tile)
    changed = "".join(
        f", {f.name}={getattr(cfg, f.name)!r}"
        for f in fields(cfg)
        if getattr(cfg, f.name) != getattr(plain, f.name)
    )
    return (
        f'Config("{cfg.path}", {cfg.block_m}, {cfg.block_n}, {cfg.block_k}, '
        f"stages={cfg.stages}, warps={cfg.warps}{changed})"
    )


def candidates_for(paths: list[str], major: int, minor: int, quick: bool) -> list[Config]:
    """Each path's candidates this GPU can run; a path it cannot is said and skipped."""
    candidates = []
    if "hopper" in paths:
        if major >= 9:
            candidates += hopper_candidates(quick)
        else:
            print(f"\n(hopper candidates skipped: compute capability {major}.{minor} < 9.0)")
    if "hopper-epi" in paths:
        if major == 9:
            candidates += hopper_epi_candidates(quick)
        else:
            print(f"\n(hopper-epi candidates skipped: SM90 only, this GPU is {major}.{minor})")
    if "gluon" in paths:
        if major == 9:
            candidates += gluon_candidates(quick)
        else:
            print(f"\n(gluon candidates skipped: SM90 only, this GPU is {major}.{minor})")
    if "plain" in paths:
        candidates += plain_candidates(quick)
    return candidates
