"""07_fsdp_train's plumbing: its flags (FSDP2's and DDP's) and the combinations refused, the
shapes that cannot be cut into N shards, the memory a rank needs, and the run's tag. The model's
flags and the reference step it shares with 06: common/training.py."""

from __future__ import annotations

import argparse

from common import cli, outputs, torchrun, training

BOOL = argparse.BooleanOptionalAction  # --flag / --no-flag


def events_per_step(layers: int) -> int:
    """Profiler events a recorded step adds on one rank (cli.ensure_fits bounds --active with
    it): 06's measured ~940 a layer (the same TinyLM step), rounded up with FSDP's all-gathers,
    reduce-scatters and their copies per layer."""
    return 1_000 + 2_000 * layers


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The model's flags (per rank), FSDP2's and DDP's, and torchrun's."""
    training.add_model_flags(
        parser,
        batch="sequences per batch, per rank",
        layers="transformer blocks, one FSDP group each",
    )
    parser.add_argument(
        "--reshard-after-forward",
        action=BOOL,
        default=True,
        help="free the gathered weights after each forward and gather them again for the "
        "backward (default: on; off keeps them: more memory, fewer all-gathers)",
    )
    parser.add_argument(
        "--prefetch",
        action=BOOL,
        default=False,
        help="explicit prefetching: each block gathers the next one's weights (forward) and the "
        "previous one's (backward) (default: off, FSDP2's implicit order)",
    )
    parser.add_argument(
        "--ddp",
        action="store_true",
        help="DistributedDataParallel instead of FSDP2: the whole model on every rank, "
        "gradients all-reduced in buckets (docstring)",
    )
    parser.add_argument(
        "--bucket-cap-mb",
        type=cli.size_up_to(2**20, "MiB"),
        default=None,
        help="with --ddp: DDP's bucket size in MiB (default: 25, DDP's own; the first bucket "
        "1 MiB); the all-reduces per step follow from it",
    )
    torchrun.add_flags(parser)


def refuse(args: argparse.Namespace) -> argparse.Namespace:
    """The parsed flags; what cannot run refused in one line (cli.UsageError)."""
    if args.ddp and (args.prefetch or not args.reshard_after_forward):
        raise cli.UsageError(
            "--prefetch and --no-reshard-after-forward are FSDP's: DDP "
            "gathers nothing (every rank holds every weight)"
        )
    if args.bucket_cap_mb is not None and not args.ddp:
        raise cli.UsageError(
            "--bucket-cap-mb is DDP's: add --ddp (FSDP2 issues one collective per group, not "
            "per bucket)"
        )
    if args.dtype == "fp16":
        raise cli.UsageError(
            "07_fsdp_train.py takes --dtype bf16 or fp32 (its parameters' dtype in compute; "
            "fp16 would need a gradient scaler)"
        )
    if args.dim % args.heads:
        raise cli.UsageError(f"--heads {args.heads} does not divide --dim {args.dim}")
    return args


def refuse_uneven(args: argparse.Namespace, world: int) -> None:
    """FSDP2 cuts every weight by rows (dim 0): a width that does not divide by the ranks would
    be padded, and the gathers would move padding."""
    for flag in ("dim", "hidden", "vocab"):
        if not args.ddp and getattr(args, flag) % world:
            raise cli.UsageError(
                f"--{flag} {getattr(args, flag)} does not shard over {world} ranks: FSDP2 "
                f"cuts every weight by rows (dim 0); choose a multiple of {world}"
            )


def bytes_needed(args: argparse.Namespace, world: int) -> int:
    """In fp32: the whole model as built and its copy for the reference (rank 0), the reference
    step's weights, gradients and AdamW's two states, this rank's shards of the same four;
    activations (per layer about 7 [tokens, dim] and 4 [tokens, hidden] tensors, the logits)
    for this rank's batch and for the reference's N batches.
    Counted, not built: a model of 50,000 layers, even on the meta device, took minutes to
    say that it does not fit."""
    d, h = args.dim, args.hidden
    # per block: two RMSNorm weights, q, k, v, o, and the MLP's gate, up, down; the root: the
    # embedding, the head and the final norm (TinyLM in modules/models.py)
    params = args.layers * (2 * d + 4 * d * d + 3 * d * h) + 2 * args.vocab * d + d
    t = args.batch * args.seq
    acts = (args.layers * (7 * t * args.dim + 4 * t * args.hidden) + 3 * t * args.vocab) * 4
    shards = 1 if args.ddp else world  # DDP: every rank holds all of it
    # whole integers: a size past the float range is still refused in one line
    return params * 4 * (2 + 4) + params * 16 // shards + acts * (world + 1)


def ensure_fits(args: argparse.Namespace, run: cli.Run, world: int) -> None:
    """This rank's memory and the profiler's events, refused before anything is built."""
    trace = cli.profiled(args, events_per_step(args.layers))
    cli.ensure_fits(bytes_needed(args, world), run, trace=trace)


def run_tag(args: argparse.Namespace, run: cli.Run, world: int) -> str:
    """The traces' name: the shape, then FSDP's (or DDP's) variant and the ranks."""
    shape = f"b{args.batch}_s{args.seq}_d{args.dim}_h{args.hidden}_n{args.heads}_l{args.layers}"
    if args.ddp:
        cap = "" if args.bucket_cap_mb is None else f"_bucket{args.bucket_cap_mb:g}mb"
        extra = f"ddp{world}{cap}"
    else:
        flags = "" if args.reshard_after_forward else "_keep"
        extra = f"fsdp{world}{flags}" + ("_prefetch" if args.prefetch else "")
    return outputs.run_tag(shape, args, run, extra=extra)
