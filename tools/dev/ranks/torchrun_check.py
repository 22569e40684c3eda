"""05_tp_mlp.py's promises under torchrun, checked on this machine's GPUs (NCCL) or on gloo
ranks: every rank's trace published, or none; one line from rank 0 for a failure on any rank;
every rank exits; nothing hangs past --timeout; Ctrl-C leaves nothing. tests/test_tp_mlp.py
checks the same on the CPU; this is for the GPUs, which CI has not.

    uv run python -m tools.dev.ranks.torchrun_check OUT                 # N = every GPU (at least 2)
    uv run python -m tools.dev.ranks.torchrun_check OUT --nproc 4 --device cpu

One torchrun launch per case, its logs and traces under OUT/<case>/; one line per case, PASS or
FAIL and why; exit code 1 if any failed. About a minute per case on 2 H200s (--compile most).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from common.torchrun import FAULT_ENV
from tracereader import Parser, positive_int, run

ROOT = Path(__file__).resolve().parents[3]

SHAPE = ["--batch", "4", "--seq", "64", "--dim", "256", "--hidden", "1536"]  # splits over 1-4, 6, 8
LAUNCH_TIMEOUT_S = 600


def launch_command(logs: Path, nproc: int, *argv: str, script: str = "05_tp_mlp.py") -> list[str]:
    """torchrun running a lesson (05_tp_mlp.py) on `nproc` ranks, each rank's output in its
    own files."""
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
        *("--nproc-per-node", str(nproc), "--log-dir", str(logs), "--redirects", "3"),
        str(ROOT / script),
        *argv,
    ]


def launch_env(fault: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    return {**env, FAULT_ENV: fault} if fault else env


def rank_logs(logs: Path, nproc: int) -> dict[int, tuple[str, str]]:
    """{rank: (stdout, stderr)} of the launch that logged under `logs`."""
    per_rank = {}
    for r in range(nproc):
        (folder,) = logs.glob(f"*/attempt_0/{r}")
        per_rank[r] = ((folder / "stdout.log").read_text(), (folder / "stderr.log").read_text())
    return per_rank


def exit_codes(report: str) -> dict[int, int]:
    """Each failed rank's exit code, from torchrun's closing report."""
    found = re.findall(
        r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", report
    )
    return {int(r): int(code) for r, code in found}


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def default_signals() -> None:
    """A child's preexec_fn: Ctrl-C, SIGTERM and SIGHUP at their defaults, as in a terminal,
    whatever this process inherited (nohup, a background job or a CI runner ignore some)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def interrupted(argv: list[str], env: dict[str, str], logs: Path) -> tuple[int, str, float]:
    """Ctrl-C as a terminal sends it (SIGINT to torchrun) once rank 0 has checked its output.
    Returns (exit code, torchrun's stderr, seconds from SIGINT to the end)."""
    env = {**env, "PYTHONUNBUFFERED": "1"}  # rank 0's lines reach its log at once
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_signals,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while not any("correctness" in p.read_text() for p in logs.glob("*/*/0/stdout.log")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the run ended, or never got going, before Ctrl-C")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        start = time.monotonic()
        _, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
        return proc.returncode, err, time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def check(case: str, out: Path, nproc: int, device: str) -> list[str]:
    """Run one case; what went wrong, nothing if it passed."""
    traces, logs = out / case / "traces", out / case / "logs"
    argv = [*SHAPE, "--device", device, "--traces-dir", str(traces), "--timeout", "20"]
    fault = {"fail-init": "1:init", "fail-export": "1:export", "hang": "1:export:hang"}
    extra = {"compile": ["--compile", "--strict"], "eager": ["--strict", "--bench"]}
    extra["ctrl-c"] = ["--active", "3000"]  # time to interrupt it in
    command = launch_command(logs, nproc, *argv, *extra.get(case, []))
    start = time.monotonic()
    if case == "ctrl-c":
        code, report, after = interrupted(command, launch_env(), logs)
    else:
        proc = subprocess.run(
            command, cwd=ROOT, env=launch_env(fault.get(case)), capture_output=True, text=True,
            timeout=LAUNCH_TIMEOUT_S,
        )  # fmt: skip
        code, report, after = proc.returncode, proc.stderr, time.monotonic() - start
    (out / case / "torchrun.log").write_text(report)
    said = rank_logs(logs, nproc)
    problems = [f"rank {r} printed something" for r in range(1, nproc) if said[r] != ("", "")]
    line = said[0][1].strip().splitlines()[-1:]  # rank 0's last word
    if case in extra and case != "ctrl-c":
        written = files_under(traces / "05_tp_mlp")
        if code != 0:
            problems.append(f"exit code {code}: {line}")
        if sum(name.endswith((".json", ".json.gz")) for name in written) != nproc:
            problems.append(f"not one trace per rank: {written}")
        if "all as expected" not in said[0][0]:
            problems.append("rank 0 did not find every rank's trace as expected")
        return problems
    want = {
        "fail-init": "error: rank 1 of {n}: InjectedFault: failure staged at 'init'",
        "fail-export": "error: rank 1 of {n}: InjectedFault: failure staged at 'export'",
        "hang": "error: a rank did not answer within --timeout",
        "ctrl-c": "error: ",  # its own interrupt, or rank 1's
    }[case].format(n=nproc)
    if code == 0:
        problems.append("exit code 0")
    if len(said[0][1].splitlines()) != 1 or not line[0].startswith(want):
        problems.append(f"rank 0's stderr is not one line starting {want!r}: {said[0][1]!r}")
    if case == "ctrl-c" and "interrupted (Ctrl-C)" not in said[0][1]:
        problems.append("rank 0 did not say it was interrupted")
    codes = exit_codes(report)  # torchrun reports them for a failure, not for its own SIGINT
    if case != "ctrl-c" and (sorted(codes) != list(range(nproc)) or -9 in codes.values()):
        problems.append(f"not every rank failed and stopped by itself: {codes}")
    if case == "ctrl-c" and after > 25:  # torchrun kills a rank 30 s after it passed SIGINT
        problems.append(f"took {after:.0f} s to stop: a rank was killed, not stopped")
    if files_under(traces):
        problems.append(f"left behind: {files_under(traces)}")
    return problems


CASES = ("eager", "compile", "fail-init", "fail-export", "hang", "ctrl-c")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="torchrun_check.py", description=__doc__)
    parser.add_argument("out", type=Path, help="folder for each case's logs and traces")
    parser.add_argument("--nproc", type=positive_int, help="ranks (default: every GPU)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--cases", default=",".join(CASES), help="of: " + ", ".join(CASES))
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if unknown := [c for c in cases if c not in CASES]:
        parser.error(f"unknown case: {', '.join(unknown)}")
    nproc = args.nproc
    if nproc is None:
        probe = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
        nproc = int(subprocess.run(probe, capture_output=True, text=True).stdout or 0)
    if nproc < 2:
        parser.error(f"{nproc} rank(s): the checks need at least 2 (--nproc, or more GPUs)")
    failed = 0
    for case in cases:
        start = time.monotonic()
        try:
            problems = check(case, args.out.resolve(), nproc, args.device)
        except Exception as err:  # a case that cannot run is a failed case, not the end
            problems = [f"{type(err).__name__}: {err}"]
        failed += bool(problems)
        verdict = "FAIL " + "; ".join(problems) if problems else "PASS"
        print(f"{case:12} N={nproc} {args.device}: {verdict} ({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
