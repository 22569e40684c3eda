"""Flags every script shares, device/dtype resolution, and the one-line error path.

Bad input must cost the user one clear line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from common.check import MismatchError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class UsageError(Exception):
    """Input the script cannot work with: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (argparse prints the usage block first), the
    description keeps its layout, and a mistyped flag fails instead of matching a prefix."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def one_line(err: BaseException, limit: int = 200) -> str:
    """`Type: first line of the message`, cut to `limit`: an exception fit for one stderr line."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:limit]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def make_parser(doc: str | None, *, prog: str) -> Parser:
    """A parser with the flags every script shares; the script adds its own shape flags."""
    parser = Parser(prog=prog, description=doc)
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="auto: the CUDA GPU when there is one, else the CPU (default: auto)",
    )
    parser.add_argument(
        "--dtype",
        choices=list(DTYPES),
        default="bf16",
        help="element type of inputs and weights; bf16 is what the posts profile (default: bf16)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="wrap the forward in torch.compile (compilation happens during warm-up)",
    )
    parser.add_argument(
        "--traces-dir",
        "--traces_dir",
        default="traces",
        metavar="DIR",
        help="where traces and tables go, under DIR/<script name>/ (default: traces)",
    )
    sched = parser.add_argument_group(
        "profiler schedule",
        "steps run = wait + warmup + active; the wait and warm-up steps are discarded so the "
        "recorded ones are free of start-up cost and of the profiler's own warm-up",
    )
    sched.add_argument(
        "--wait",
        type=non_negative_int,
        default=1,
        help="steps skipped before the profiler warms up (default: 1)",
    )
    sched.add_argument(
        "--warmup-steps",
        "--warmup_steps",
        type=non_negative_int,
        default=1,
        help="steps traced then thrown away (default: 1)",
    )
    sched.add_argument(
        "--active", type=positive_int, default=3, help="steps recorded into the trace (default: 3)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for inputs and weights, so runs are comparable (default: 0)",
    )
    parser.add_argument(
        "--gzip", action="store_true", help="write the trace as .json.gz (Perfetto opens it as is)"
    )
    parser.add_argument(
        "--rows",
        type=positive_int,
        default=15,
        help="rows of the profiler table to print and save (default: 15)",
    )
    parser.add_argument(
        "--bench",
        action="store_true",
        help="after profiling, time the forward without the profiler (median and 20th/80th "
        "percentiles) and, on a GPU, compare it with the device's measured ceilings",
    )
    parser.add_argument(
        "--fresh-ceilings",
        "--fresh_ceilings",
        action="store_true",
        help="with --bench: measure the device's ceilings again instead of using the cache",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with code 3 when the trace does not match the script's declared "
        "expectation (default: report the mismatch and exit 0)",
    )
    parser.add_argument(
        "--bucket",
        metavar="NAME",
        default=None,
        help="after writing, sync this script's traces to the Hugging Face "
        "bucket NAME and print Perfetto links (needs a token)",
    )
    return parser


@dataclass(frozen=True)
class Run:
    """What a script runs on: resolved once from the flags."""

    device: torch.device
    dtype: torch.dtype
    dtype_name: str

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def resolve(args: argparse.Namespace) -> Run:
    """Pick the device, seed the generators, and say so when we fall back to the CPU."""
    has_gpu = torch.cuda.is_available()
    if args.device == "cuda" and not has_gpu:
        raise UsageError("--device cuda was asked for, but PyTorch sees no CUDA GPU here")
    if args.device == "auto" and not has_gpu:
        print(
            "note: no CUDA GPU found, running on the CPU: the trace shows the CPU dispatch "
            "chain, not GPU kernels"
        )
    device = torch.device("cuda" if args.device != "cpu" and has_gpu else "cpu")
    torch.manual_seed(args.seed)
    return Run(device=device, dtype=DTYPES[args.dtype], dtype_name=args.dtype)


def ensure_fits(nbytes: int, run: Run) -> None:
    """Refuse, before allocating, a problem larger than the memory that is free."""
    if run.on_gpu:
        free, _ = torch.cuda.mem_get_info(run.device)
        where = "GPU memory"
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        where = "free RAM"
    if nbytes > free:
        raise UsageError(
            f"these sizes need about {nbytes / 2**30:.1f} GiB, more than the "
            f"{free / 2**30:.1f} GiB of {where}: choose smaller sizes"
        )


def run_main(
    main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None
) -> int:
    """Call a script's main; turn bad input into one stderr line and exit code 2."""
    try:
        return main(argv) or 0
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except torch.OutOfMemoryError:
        print("error: out of device memory at these sizes: choose smaller sizes", file=sys.stderr)
        return 2
    except MismatchError as err:
        print(f"error: the output does not match the float32 reference: {err}", file=sys.stderr)
        return 1
