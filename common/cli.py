"""Flags every script shares, device/dtype resolution, and the one-line error path.

Bad input must cost the user one clear line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from common import startup
from common.check import WORKSPACE_BYTES, MismatchError
from common.share import bucket_name
from tracereader import (  # noqa: F401 - re-exported: the lessons use cli.*
    ELEMENT_TYPES,
    Parser,
    UsageError,
    int_in,
    non_negative_int,
    one_line,
    positive_int,
    run,
    size_up_to,
)
from tracereader import failure as commandline_failure

# Upper bounds on the schedule: each recorded step adds events to the trace (a few KB to MB),
# and the trace must still open in Perfetto and read back in seconds.
MAX_WAIT = 1_000
MAX_ACTIVE = 10_000
SEED_RANGE = (0, 2**64 - 1)  # what torch.manual_seed accepts


# --dtype's choices: the reader's element types that the lessons run (fp64 only in traces).
DTYPES = {short: getattr(torch, name) for short, (_, name) in ELEMENT_TYPES.items()}
del DTYPES["fp64"]
ROOT = Path(__file__).resolve().parent.parent  # the repository: lessons, common/, tools/


def traces_folder(text: str) -> str:
    """An argparse type for --traces-dir: a path the profiler can really write to.

    Refused here, before any work: an empty name (it would silently mean the current folder),
    control characters such as a newline (the profiler's exporter cannot rename its file into
    such a folder and says nothing), and bytes that are not UTF-8 (torch cannot pass the path
    to its C++ side).
    """
    if not text:
        raise argparse.ArgumentTypeError("is empty; give a folder, e.g. --traces-dir traces")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} contains a control character (a newline?)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid UTF-8; the profiler cannot write there"
        ) from None
    return text


BENCH_HELP = (
    "after profiling, time the forward without the profiler (median and 20th/80th "
    "percentiles) and, on a GPU, compare it with the device's measured ceilings"
)


# --help's width in columns, whatever the terminal: the help common/early.py serves before torch
# loads is a snapshot of it (common/lesson_help.json), byte for byte.
HELP_WIDTH = 100


def make_parser(doc: str | None, *, prog: str, bench_help: str = BENCH_HELP) -> Parser:
    """A parser with the flags every script shares; the script adds its own shape flags
    (and says what its --bench times, where that is not a forward)."""
    parser = Parser(prog=prog, description=doc)
    parser.formatter_class = partial(parser.formatter_class, width=HELP_WIDTH)
    add_device_flags(parser)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="wrap the forward in torch.compile (compilation happens during warm-up)",
    )
    add_traces_dir_flag(parser)
    sched = parser.add_argument_group(
        "profiler schedule",
        "steps run = wait + warmup + active; the wait and warm-up steps are discarded so the "
        "recorded ones are free of start-up cost and of the profiler's own warm-up",
    )
    untraced = "more only adds run time"
    sched.add_argument(
        "--wait",
        type=int_in(0, MAX_WAIT, untraced),
        default=1,
        help=f"steps skipped before the profiler warms up, 0 to {MAX_WAIT} (default: 1)",
    )
    sched.add_argument(
        "--warmup-steps",
        "--warmup_steps",
        type=int_in(0, MAX_WAIT, untraced),
        default=1,
        help=f"steps traced then thrown away, 0 to {MAX_WAIT} (default: 1)",
    )
    sched.add_argument(
        "--active",
        type=int_in(
            1,
            MAX_ACTIVE,
            "every recorded step grows the trace; past this it no "
            "longer opens comfortably in Perfetto",
        ),
        default=3,
        help=f"steps recorded into the trace, 1 to {MAX_ACTIVE} (default: 3)",
    )
    add_seed_flag(parser)
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
        help=bench_help,
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
        type=bucket_name,
        default=None,
        help="after writing, sync the whole traces folder (DIR, every script's traces) to "
        "the Hugging Face bucket NAME and print this run's Perfetto link (needs a token; "
        "nothing remote is deleted)",
    )
    return parser


def parse_warm_or_cold(
    parser: Parser, argv, *, calls: int, warm: tuple, cold: tuple
) -> argparse.Namespace:
    """Part 1's --warmup, parsed: a warm run makes `calls` calls before profiling and keeps the
    `warm` schedule (wait, warmup, active); a cold run records from its first call, with the
    `cold` one. --wait and --warmup-steps given by hand win over either."""
    parser.add_argument(
        "--warmup",
        action="store_true",
        help=f"call the function {calls} times before profiling; "
        "without it the run is cold and records from its first call (default: cold)",
    )
    parser.set_defaults(wait=None, warmup_steps=None)  # their defaults depend on --warmup
    args = parser.parse_args(argv)
    wait, warmup, _ = warm if args.warmup else cold
    args.wait = wait if args.wait is None else args.wait
    args.warmup_steps = warmup if args.warmup_steps is None else args.warmup_steps
    return args


def add_device_flags(parser: argparse.ArgumentParser) -> None:
    """--device and --dtype: every script and tool that runs a module takes them alike."""
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


def add_traces_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--traces-dir",
        "--traces_dir",
        type=traces_folder,
        default="traces",
        metavar="DIR",
        help="where traces and tables go, under DIR/<script name>/ (default: traces)",
    )


def add_seed_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed",
        type=int_in(*SEED_RANGE, "the range torch.manual_seed takes"),
        default=0,
        help="seed for inputs and weights, so runs are comparable (default: 0)",
    )


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
    if device.type == "cpu":
        _quiet_cuda_home_note()
    torch.manual_seed(args.seed)
    if getattr(args, "compile", False):
        compile_in_process()
    return Run(device=device, dtype=DTYPES[args.dtype], dtype_name=args.dtype)


class _NoCudaHomeNote(logging.Filter):
    """Drops torch's "No CUDA runtime is found, using CUDA_HOME=..." (a warning that
    torch.utils.cpp_extension logs when Inductor imports it on a machine with a CUDA toolkit
    and no GPU): the run chose the CPU, where that toolkit plays no part."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")


def _quiet_cuda_home_note() -> None:
    """Silence that one note in a run on the CPU (before anything compiles and imports
    cpp_extension); every other message of the logger stays."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoCudaHomeNote) for f in logger.filters):
        logger.addFilter(_NoCudaHomeNote())


COMPILE_THREADS = "TORCHINDUCTOR_COMPILE_THREADS"


def compile_in_process() -> str:
    """Have Inductor compile in this process, unless the user chose otherwise; returns what the
    printed compile time measured.

    A lesson compiles a graph of one or two Triton kernels. Inductor's default is a pool of
    compile worker processes, one per core: on a 16-core GPU machine it cost seconds to start
    and about 10 s to shut down at exit (tools/startup_breakdown.py, docs/startup.md), far more
    than the compile itself. Must run before torch.compile is first called: Inductor's config
    reads the variable once, when it is imported.
    """
    if os.environ.setdefault(COMPILE_THREADS, "1") == "1":
        return f"in this process, one thread ({COMPILE_THREADS}=1, set by common.cli)"
    return f"with {COMPILE_THREADS}={os.environ[COMPILE_THREADS]} (yours)"


def _cgroup_room() -> int | None:
    """Bytes a Linux container may still allocate (cgroup v2 or v1), None without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:  # v1 reports "no limit" as a huge number
            return int(limit) - usage
        return None
    return None


def available_ram() -> int | None:
    """RAM a new allocation can get without swapping, as reliably as the platform says it.

    Linux: MemAvailable (free plus reclaimable cache; MemFree alone undercounts), capped by a
    container's cgroup limit. macOS and others: the physical memory, an upper bound (there is
    no reliable "available" figure without extra packages). None if even that is unknown.
    """
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                room = _cgroup_room()
                return min(available, room) if room is not None else available
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(nbytes: float) -> str:
    if nbytes >= 2**30 * 10**6:  # absurd sizes stay one short line, past the float range too
        return f"10^{int(math.log10(nbytes) - math.log10(2**30))}"
    return f"{nbytes / 2**30:.1f}"


# What the profiler holds per recorded event until the export, on the host, measured here
# (tools/dev/step_memory.py, CPU, torch 2.11): 06's training step at its tiny shape records
# 2,236 events a step and its peak RSS grew 17.2 MB a step from --active 3 to 103, 7.7 kB an
# event: Kineto's event, its input shapes (record_shapes=True), the Python FunctionEvent made
# for key_averages, and the exporter's JSON. The smaller lessons' differences were within
# the noise of their ~600 MB processes. Rounded up.
TRACE_BYTES_PER_EVENT = 8 * 1024
# On a GPU each CPU op that launches work adds its runtime call and its kernel as events.
GPU_EVENTS_FACTOR = 2


@dataclass(frozen=True)
class Profiled:
    """What a run's profiler will hold: `events` per step (the lesson's estimate, CPU ops)
    over `steps` traced steps (warm-up steps are recorded too, then dropped)."""

    events: int
    steps: int
    active: int

    def events_per_step(self, run: Run) -> int:
        return self.events * (GPU_EVENTS_FACTOR if run.on_gpu else 1)

    def nbytes(self, run: Run) -> int:
        return self.events_per_step(run) * self.steps * TRACE_BYTES_PER_EVENT


def profiled(args: argparse.Namespace, events_per_step: int) -> Profiled:
    return Profiled(
        events=events_per_step, steps=args.warmup_steps + args.active, active=args.active
    )


def ensure_fits(nbytes: int, run: Run, *, trace: Profiled | None = None) -> None:
    """Refuse, before allocating, a problem larger than the memory the run can get.

    `nbytes` is the lesson's estimate of its peak: inputs, weights, the outputs alive at once,
    and the float32 reference; the reference check's float64 slices are added here. `trace`
    is what the profiler will hold on the host until the export (06 at --active 3000 grew
    past 23 GB on a tiny model): refused when it does not fit the available RAM beside the
    tensors (on a CPU) or alone (on a GPU, whose tensors are elsewhere).
    """
    nbytes += WORKSPACE_BYTES
    if run.on_gpu:
        free, _ = torch.cuda.mem_get_info(run.device)
        where = "free GPU memory"
    else:
        free = available_ram()
        where = "available RAM"
    if free is not None and nbytes > free:
        raise UsageError(
            f"these sizes need about {_gib(nbytes)} GiB, more than the "
            f"{_gib(free)} GiB of {where}: choose smaller sizes"
        )
    if trace is None:
        return
    ram = available_ram()
    if ram is None:
        return  # nothing reliable to compare with
    room = ram - (0 if run.on_gpu else nbytes)
    held = trace.nbytes(run)
    if held > room:
        per_step = trace.events_per_step(run) * TRACE_BYTES_PER_EVENT
        most = max(0, room // per_step - (trace.steps - trace.active))
        raise UsageError(
            f"--active {trace.active} would hold about {_gib(held)} GiB of profiler events "
            f"until the export (~{trace.events_per_step(run):,} a step, "
            f"~{TRACE_BYTES_PER_EVENT // 1024} kB each), more than the {_gib(max(room, 0))} GiB "
            f"of available RAM: choose --active {most} or fewer"
        )


def element_size(run: Run) -> int:
    return torch.empty((), dtype=run.dtype).element_size()


def command_hint(command: str, *words: str | Path) -> str:
    """A `uv run ...` line the user can paste from where they are: a console command of the
    project (`explain`, `compare`) or, for a dotted name, `python -m` on that module.

    From the repository root the short form works; from anywhere else uv is pointed at the
    project (--project), and every path in the line is made absolute.
    """
    here = Path.cwd().resolve() == ROOT
    parts = ["uv", "run"] + ([] if here else ["--project", str(ROOT)])
    parts += ["python", "-m", command] if "." in command else [command]
    for word in words:
        parts.append(str(word if here or not isinstance(word, Path) else word.resolve()))
    return shlex.join(parts)


def known(err: BaseException) -> tuple[int, str] | None:
    """A lesson's own errors that the user can act on, in one line: the device's memory, a
    result that does not match its float32 reference; None for the rest."""
    if isinstance(err, torch.OutOfMemoryError):
        return 2, "out of device memory at these sizes: choose smaller sizes"
    if isinstance(err, MismatchError):
        return 1, f"the output does not match the float32 reference: {err}"
    return None


def failure(err: BaseException) -> tuple[int, str | None] | None:
    """The exit code and one line for an error the user can act on; None for a bug."""
    return known(err) or commandline_failure(err)


def run_main(
    main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None
) -> int:
    """Call a script's main through the one runner (tracereader.commandline.run): bad input is
    one stderr line and exit code 2, Ctrl-C, SIGTERM and SIGHUP 130; partial outputs are
    cleaned up by the context managers the error unwound. While the lesson imports, before
    this, a signal stops it at once, in one line (common/startup.py)."""
    startup.hand_over()
    return run(lambda: main(argv), known=known)


class _Refused(argparse._StoreTrueAction):
    """A shared flag that a lesson refuses: one line and exit 2 at parse time, the reason in
    --help."""

    why = ""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{parser.prog} does not take {option_string}: {self.why}")


def refuse_compile(parser: argparse.ArgumentParser, why: str) -> None:
    """Refuse the shared --compile flag where compiling would not teach anything, saying why."""
    action = parser._option_string_actions["--compile"]  # argparse has no public setter
    action.__class__, action.why, action.help = _Refused, why, f"not offered here (refused): {why}"


def require_gpu(script: str, args: argparse.Namespace, why: str) -> None:
    """One line and exit 2 before any work where a lesson needs a CUDA GPU (`why`: what needs
    it, and what runs on a CPU instead)."""
    if args.device == "cpu" or not torch.cuda.is_available():
        raise UsageError(f"{script} needs a CUDA GPU: {why}")
