"""Every lesson at small shapes, eager and compiled, with --strict and --bench, and checked.

The GPU smoke test to run before any change to docs/ measurements (it works on a CPU too, with
the lessons a CPU can run):

    python3 -m tools.dev.gpu_runs.smoke --logs OUT                  # the GPU machine: tiny shapes
    python3 -m tools.dev.gpu_runs.smoke --shapes posts --logs OUT   # the posts' shapes
    uv run python -m tools.dev.gpu_runs.smoke --device cpu --only 02_linear,03_simple_mlp

A run fails on a non-zero exit code (a wrong output is 1, a --strict mismatch 3), on a
MISMATCH anywhere in its output, and on any figure above 100% of a ceiling in --bench's
output: a kernel cannot beat the device's ceiling, so such a ratio is a measurement bug. A
lesson whose kernel source is missing on this machine (04_d without the kernels Hub, its cache
or LOCAL_KERNELS) is reported as unavailable, not passed. Each run's output goes to
LOGS/<n>_<lesson>.log; a table of verdicts comes last. Exit code 1 if any run failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tracereader import Parser
from tracereader import run as run_main

ROOT = Path(__file__).resolve().parents[3]

SHAPES = {
    "tiny": {
        "01": ["--size", "64"],
        "02": ["--batch", "1024", "--in_dim", "32", "--out_dim", "64"],
        "03": ["--batch", "4", "--seq", "128", "--dim", "256", "--hidden", "512"],
        "04": ["--batch", "1", "--heads", "4", "--seq", "256", "--head_dim", "64"],
        "06": ["--batch", "2", "--seq", "128", "--dim", "256", "--hidden", "512", "--heads", "4"],
        "08": ["--preset", "tiny", "--prompt", "64", "--new-tokens", "16"],
    },
    "posts": {
        "01": ["--size", "64"],
        "02": ["--batch", "1024", "--in_dim", "32", "--out_dim", "64"],
        "03": ["--batch", "64", "--seq", "128", "--dim", "768", "--hidden", "3072"],
        "04": ["--batch", "8", "--heads", "16", "--seq", "1024", "--head_dim", "64"],
        "06": [
            "--batch",
            "8",
            "--seq",
            "1024",
            "--dim",
            "1024",
            "--hidden",
            "4096",
            "--heads",
            "16",
            "--layers",
            "4",
            "--vocab",
            "32768",
        ],  # fmt: skip
        "08": ["--preset", "1b", "--prompt", "512", "--new-tokens", "64"],
    },
}
GPU_ONLY = {"03_kernels_mlp", "03_fused_mlp", "04_d_kernels_attention"}
# A missing kernel source is this machine's gap, not the lesson's failure.
UNAVAILABLE = re.compile(
    r"LOCAL_KERNELS|kernels Hub|no kernel source|kernels library is not installed", re.I
)
# "117% of the matrix ceiling", "105% of bf16's measured ceiling", "x0.85 ... floor"
PERCENT_OF_CEILING = re.compile(r"(\d+(?:\.\d+)?)% of [^,;)]*ceiling")
BELOW_FLOOR = re.compile(r"\bx(0\.\d+)\b|/ floor = 0\.\d+")


@dataclass(frozen=True)
class Run:
    lesson: str
    argv: tuple[str, ...]
    torchrun: bool = False

    def describe(self) -> str:
        return " ".join([f"{self.lesson}.py", *self.argv])


def runs(shapes: str, on_gpu: bool) -> list[Run]:
    s = SHAPES[shapes]
    plan = []
    for mode in ([], ["--compile"]):
        plan += [
            Run("01_matmul_add", (*s["01"], *mode)),
            Run("01_matmul_add", (*s["01"], "--warmup", *mode)),
            Run("02_linear", (*s["02"], *mode)),
            Run("03_simple_mlp", (*s["03"], *mode)),
            Run("03_kernels_mlp", (*s["03"], *mode)),
            Run("03_fused_mlp", (*s["03"], *mode)),
            Run("04_a_naive_attention", (*s["04"], *mode)),
            Run("04_b_inplace_ops_attention", (*s["04"], *mode)),
            Run("05_tp_mlp", (*s["03"], *mode), torchrun=True),
            Run("06_train_step", (*s["06"], *mode)),
            Run("07_fsdp_train", (*s["06"], *mode), torchrun=True),
            Run("08_generate", (*s["08"], *mode)),
        ]
    plan += [
        Run("04_c_sdpa_attention", (*s["04"], "--backend", "all")),
        Run("04_d_kernels_attention", s["04"]),
    ]
    return [r for r in plan if on_gpu or r.lesson not in GPU_ONLY]


def problems(returncode: int, output: str) -> list[str]:
    """Why a run's result cannot be trusted; [] when it can."""
    found = []
    if returncode:
        found.append(f"exit code {returncode}")
    if "MISMATCH" in output:
        found.append("MISMATCH in the output")
    if "not a ceiling" in output:  # --bench's own flag: a kernel beat a measured ceiling
        found.append("a kernel ran above a measured ceiling")
    for match in PERCENT_OF_CEILING.finditer(output):
        if float(match.group(1)) > 100:
            found.append(f"above a ceiling: {match.group(0)!r}")
    for line in output.splitlines():
        if "floor" in line and BELOW_FLOOR.search(line):
            found.append(f"faster than its floor: {line.strip()[:100]!r}")
    return found


def command(run: Run, device: str) -> list[str]:
    flags = [*run.argv, "--strict", "--bench", "--device", device]
    if run.torchrun:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "1", f"{run.lesson}.py", *flags]  # fmt: skip
    return [sys.executable, f"{run.lesson}.py", *flags]


def main(argv=None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", choices=list(SHAPES), default="tiny")
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default=None,
        help="default: cuda when torch sees a GPU",
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated lessons (e.g. 02_linear,04_c_sdpa_attention)"
    )
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="folder for one log per run (default: a temporary one)",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run (default: 600)")
    args = parser.parse_args(argv)

    import torch  # after --help, which needs none of it

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but torch sees no GPU", file=sys.stderr)
        return 2
    plan = runs(args.shapes, device == "cuda")
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {r.lesson for r in runs(args.shapes, True)}
        if unknown:
            print(f"error: --only names no lesson: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        plan = [r for r in plan if r.lesson in wanted]
    logs = args.logs or Path(__import__("tempfile").mkdtemp(prefix="smoke-"))
    logs.mkdir(parents=True, exist_ok=True)
    traces = logs / "traces"
    print(f"{len(plan)} runs on {device} ({args.shapes} shapes); logs in {logs}", flush=True)

    verdicts = []
    for i, run in enumerate(plan, 1):
        cmd = [*command(run, device), "--traces-dir", str(traces)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout
            )
            rc, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as err:
            rc, output = (
                124,
                f"{err.stdout or ''}{err.stderr or ''}\ntimed out after {args.timeout} s",
            )
        seconds = time.perf_counter() - start
        (logs / f"{i:02d}_{run.lesson}.log").write_text(f"$ {' '.join(cmd)}\n{output}")
        found = problems(rc, output)
        if found and rc == 2 and run.lesson in GPU_ONLY and UNAVAILABLE.search(output):
            verdict = "unavailable"
        else:
            verdict = "FAIL" if found else "ok"
        verdicts.append((run, verdict, found, seconds))
        print(f"[{i}/{len(plan)}] {verdict:<11} {seconds:6.1f} s  {run.describe()}", flush=True)
        for why in found if verdict == "FAIL" else []:
            print(f"      {why}", flush=True)

    failed = [v for v in verdicts if v[1] == "FAIL"]
    counts = {name: sum(v[1] == name for v in verdicts) for name in ("ok", "FAIL", "unavailable")}
    print(f"smoke: {counts['ok']} ok, {counts['FAIL']} failed, {counts['unavailable']} unavailable")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_main(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
