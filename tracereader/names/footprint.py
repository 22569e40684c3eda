"""A kernel's footprint (what its trace event records) and the occupancy worked out from it.

Every kernel event carries its launch shape and resources in `args`: grid, block, registers
per thread, shared memory per block, and the profiler's own "blocks per SM", "warps per SM"
and "est. achieved occupancy %". That estimate is missing for some kernels: it reads 0 for
cuDNN's generated attention kernel and for every nvjet GEMM on Hopper, all launched with
cuLaunchKernelEx, while the same GPU runs them at full speed. The footprint still holds the
answer; `occupancy` works it out the way CUDA's occupancy calculator does:

  blocks per SM = the fewest allowed by each limit of the SM, from the trace's
                  deviceProperties:
    registers       regsPerMultiprocessor / (registers per thread x threads per block),
                    registers allocated per warp in units of 256 (as on sm50 to sm90);
                    a block that needs more than regsPerBlock cannot run at all
    shared memory   sharedMemPerMultiprocessor / (shared memory per block + 1 KB that the
                    system reserves per block on sm80 and later); the 128 B allocation
                    granularity is ignored (a few bytes per block)
    threads         maxThreadsPerMultiprocessor / threads per block, in whole warps
    blocks          at most 32 blocks per SM (16 on sm75/sm86/sm87, 24 on sm89)
  theoretical occupancy = blocks per SM x warps per block / (maxThreadsPerMultiprocessor /
                  warpSize): the share of the SM's warp slots the kernel can fill.
  estimated     = the same, with the blocks per SM capped by what the grid provides
                  (grid blocks / numSms), rounded as the profiler rounds: its
                  "est. achieved occupancy %" computed the profiler's way.
"""

from __future__ import annotations

import math

# Maximum resident blocks per SM where it is not 32 (CUDA programming guide, per compute
# capability); the trace's deviceProperties does not record it.
MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24}
REGISTER_UNIT = 256  # registers are allocated to a warp in units of this many
RESERVED_SHARED = 1024  # bytes of shared memory the system keeps per block on sm80 and later
FIELDS = (
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "warps per SM",
    "est. achieved occupancy %",
)


class Occupancy:
    __slots__ = (
        "blocks_per_sm",
        "warps_per_sm",
        "max_warps",
        "limited_by",
        "theoretical_pct",
        "estimated_pct",
        "grid_blocks_per_sm",
    )

    def __init__(
        self,
        blocks_per_sm: int,
        warps_per_sm: int,
        max_warps: int,
        limited_by: str,
        theoretical_pct: float,
        estimated_pct: int,
        grid_blocks_per_sm: float,
    ):
        self.blocks_per_sm = blocks_per_sm  # resident blocks the SM's limits allow
        self.warps_per_sm = warps_per_sm
        self.max_warps = max_warps
        # "registers", "shared memory", "threads", "blocks"; ties joined by "and"
        self.limited_by = limited_by
        self.theoretical_pct = theoretical_pct
        self.estimated_pct = estimated_pct  # capped by the grid, rounded like the profiler's
        self.grid_blocks_per_sm = grid_blocks_per_sm

    def __eq__(self, other) -> bool:
        return type(other) is Occupancy and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return f"Occupancy({self.as_dict()})"

    def as_dict(self) -> dict:
        return {
            "blocks_per_sm": self.blocks_per_sm,
            "warps_per_sm": self.warps_per_sm,
            "max_warps_per_sm": self.max_warps,
            "limited_by": self.limited_by,
            "theoretical_pct": self.theoretical_pct,
            "estimated_pct": self.estimated_pct,
            "grid_blocks_per_sm": self.grid_blocks_per_sm,
        }


def fields(args) -> dict:
    """The footprint fields a kernel event recorded, under the trace's own names."""
    return {k: args[k] for k in FIELDS if k in args}


def _int(value) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _dims(value) -> int | None:
    """Threads in a block or blocks in a grid, from a recorded [x, y, z]."""
    if isinstance(value, tuple | list) and value and all(type(v) is int and v > 0 for v in value):
        return math.prod(value)
    return None


def blocks(args) -> int | None:
    """A kernel's blocks (its grid's product), None where the trace does not record its grid."""
    return _dims(args.get("grid"))


def rounded(pct: float) -> int:
    """A percentage as the profiler writes it: (int)(0.5 + x), so 12.5 becomes 13."""
    return int(0.5 + pct)


def occupancy(args, props: dict) -> Occupancy | None:
    """The occupancy a kernel's footprint allows on the device `props` describes, or None
    when the event or the device properties lack a field it needs."""
    threads, grid = _dims(args.get("block")), _dims(args.get("grid"))
    regs, shared = _int(args.get("registers per thread")), _int(args.get("shared memory"))
    warp = _int(props.get("warpSize"))
    sm_threads = _int(props.get("maxThreadsPerMultiprocessor"))
    sm_regs = _int(props.get("regsPerMultiprocessor"))
    sm_shared = _int(props.get("sharedMemPerMultiprocessor"))
    sms = _int(props.get("numSms"))
    needed = (threads, grid, regs, shared, warp, sm_threads, sm_regs, sm_shared, sms)
    if any(v is None for v in needed) or not (warp and sm_threads and sms):
        return None
    major, minor = _int(props.get("computeMajor")) or 0, _int(props.get("computeMinor")) or 0
    warps_per_block = -(-threads // warp)
    max_warps = sm_threads // warp
    limits = {}
    if regs:
        per_warp = -(-regs * warp // REGISTER_UNIT) * REGISTER_UNIT
        per_block = per_warp * warps_per_block
        block_limit = _int(props.get("regsPerBlock"))
        fits = block_limit is None or per_block <= block_limit
        limits["registers"] = sm_regs // per_block if fits else 0
    if shared:
        per_block = shared + (RESERVED_SHARED if major >= 8 else 0)
        limits["shared memory"] = sm_shared // per_block
    limits["threads"] = max_warps // warps_per_block
    limits["blocks"] = MAX_BLOCKS_PER_SM.get((major, minor), 32)
    blocks = min(limits.values())
    limited_by = " and ".join(name for name, n in limits.items() if n == blocks)
    grid_per_sm = grid / sms
    estimated = min(blocks, grid_per_sm) * threads / sm_threads * 100
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=blocks * warps_per_block,
        max_warps=max_warps,
        limited_by=limited_by,
        theoretical_pct=100 * blocks * warps_per_block / max_warps,
        estimated_pct=rounded(estimated),
        grid_blocks_per_sm=grid_per_sm,
    )


def _size(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 1024 else f"{nbytes / 1024:.4g} KB"


def describe(args, occ: Occupancy | None) -> str:
    """One compact line: the launch shape, the resources, the profiler's estimate and the
    footprint's. Empty when the event recorded no footprint."""
    parts = []
    for key in ("grid", "block"):
        value = args.get(key)
        if isinstance(value, tuple | list) and value:
            value = list(value)
            while len(value) > 1 and value[-1] == 1:  # 384x1x1 reads 384
                value.pop()
            parts.append(f"{key} {'x'.join(map(str, value))}")
    if "registers per thread" in args:
        parts.append(f"{args['registers per thread']} regs/thread")
    if isinstance(args.get("shared memory"), int):
        parts.append(f"{_size(args['shared memory'])} shared")
    blocks, warps = args.get("blocks per SM"), args.get("warps per SM")
    if isinstance(blocks, int | float) and isinstance(warps, int | float):
        # kineto's figures are the grid divided over the SMs (all waves), not what is
        # resident at once: the footprint below gives that
        parts.append(f"grid over all waves: {blocks:.3g} blocks, {warps:.3g} warps per SM")
    reported = args.get("est. achieved occupancy %")
    if isinstance(reported, int | float):
        parts.append(f"est. occupancy {reported:g}%")
    if occ is not None:
        return ", ".join(parts) + (
            f" | footprint: {occ.blocks_per_sm} block{'s' if occ.blocks_per_sm != 1 else ''}"
            f"/SM ({occ.limited_by}), {occ.warps_per_sm}/{occ.max_warps} warps = "
            f"{rounded(occ.theoretical_pct)}%, {occ.estimated_pct}% with this grid"
        )
    return ", ".join(parts)
