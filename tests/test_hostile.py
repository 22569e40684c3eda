"""Hostile input against every entry point (issue 27): each case gets one line on stderr (or
none where the entry point says nothing), exit code 2 (130 for an interrupt), no traceback, no
file left behind, and an answer within a time bound.

In-process calls of main() wherever the behaviour allows (the suite must stay fast on two
cores); a subprocess only where the exit path itself is the case (a signal, a closed stdout,
the interpreter's own exit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tracereader.commands import compare, explain

BOUND_S = 20  # every in-process case answers within this; a hang fails, never blocks CI


@pytest.fixture(autouse=True)
def time_bound():
    """A case that runs past BOUND_S fails (SIGALRM raises in the main thread)."""

    def late(signum, frame):
        raise TimeoutError(f"no answer within {BOUND_S} s: a hang")

    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, BOUND_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def outcome(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) as the command would run it: (exit code, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def said_once(code: int, err: str, *, want: int = 2, words: str = "") -> str:
    """The refusal's shape: exit code `want`, one line starting `error:`, no traceback."""
    assert "Traceback" not in err, err
    assert code == want, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert words in lines[0], lines[0]
    return lines[0]


def run_process(argv: list[str], *, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **kwargs.pop("env", {})}
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, *argv],
        cwd=kwargs.pop("cwd", ROOT),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        **kwargs,
    )


# --- traces made to order -------------------------------------------------------------------


def events(start: float = 0.0, collective: bool = False) -> list[dict]:
    """One profiler step on the CPU with an op in it (and an all-reduce, where asked)."""
    found = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": start, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": start + 1, "dur": 20, "pid": 1,
         "tid": 1},
    ]  # fmt: skip
    if collective:
        found.append(
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": start + 30, "dur": 20,
             "pid": 1, "tid": 1}
        )  # fmt: skip
    return found


def trace_file(path: Path, info: dict | None = None, **kwargs) -> Path:
    doc = {"traceEvents": events(**kwargs)}
    if info is not None:
        doc["distributedInfo"] = info
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def rank_files(folder: Path, stem: str = "run", world: int = 2, **kwargs) -> Path:
    for rank in range(world):
        info = {"rank": rank, "world_size": world, "backend": "gloo"}
        trace_file(folder / f"{stem}_rank{rank}.json", info, collective=True, **kwargs)
    return folder / stem


# --- 1. the folder walk: links, loops, depth, huge trees -------------------------------------


def loop_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "a").symlink_to(".")
    (folder / "b").symlink_to(".")
    (folder / "up").symlink_to("..")
    return folder


def outside_link(tmp_path: Path) -> Path:
    """A folder whose only runs are behind a link to a folder outside it."""
    rank_files(tmp_path / "elsewhere" / "iteration_1")
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "iteration_1").symlink_to(tmp_path / "elsewhere" / "iteration_1")
    return folder


def too_deep(tmp_path: Path) -> Path:
    rank_files(tmp_path / "deep" / "a" / "b")
    return tmp_path / "deep"


def dangling(tmp_path: Path) -> Path:
    folder = tmp_path / "dangling"
    folder.mkdir()
    (folder / "x_rank0.json").symlink_to(tmp_path / "nowhere")
    return folder


def fifo(tmp_path: Path) -> Path:
    folder = tmp_path / "fifo"
    folder.mkdir()
    os.mkfifo(folder / "x_rank0.json")
    os.mkfifo(folder / "x_rank1.json")
    return folder


def many_names(tmp_path: Path) -> Path:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(FEW_ENTRIES + 1):
        (folder / f"f{i}").touch()
    return folder


def duplicate_ranks(tmp_path: Path) -> Path:
    folder = tmp_path / "dup"
    rank_files(folder, "x")
    (folder / "x_rank00.json").write_text((folder / "x_rank0.json").read_text())
    return folder


FEW_ENTRIES = 64

WALKS = {
    "link loop": (loop_folder, "is a folder without rank traces"),
    "link out of the tree": (outside_link, "is a folder without rank traces"),
    "three levels down": (too_deep, "is a folder without rank traces"),
    "dangling rank link": (dangling, "is a folder without rank traces"),
    "FIFOs named as ranks": (fifo, "is a folder without rank traces"),
    "too many names": (many_names, "is a folder without rank traces"),
    "rank0 beside rank00": (duplicate_ranks, "both name rank 0"),
}


@pytest.mark.parametrize("case", list(WALKS))
@pytest.mark.parametrize("command", ["explain", "explain --json", "compare A DIR", "compare DIR A"])
def test_folder_walks_are_bounded_and_refused_in_one_line(
    case, command, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("tracereader.trace.runs.MAX_ENTRIES", FEW_ENTRIES)  # the bound, smaller
    make, words = WALKS[case]
    folder = make(tmp_path)
    other = trace_file(tmp_path / "a.json")
    before = files(tmp_path)
    argv = {
        "explain": [str(folder)],
        "explain --json": [str(folder), "--json"],
        "compare A DIR": [str(other), str(folder)],
        "compare DIR A": [str(folder), str(other)],
    }[command]
    main = explain.main if command.startswith("explain") else compare.main
    started = time.monotonic()
    code, out, err = outcome(main, argv, capsys)
    if words == "is a folder without rank traces" and command.startswith("compare"):
        words = str(folder)  # compare names the folder it could not use
    said_once(code, err, words=words)
    assert out == ""
    assert time.monotonic() - started < 10
    assert files(tmp_path) == before


def test_a_huge_tree_is_answered_at_once(capsys):
    started = time.monotonic()
    code, _, err = outcome(explain.main, ["/usr"], capsys)
    said_once(code, err, words="is a folder without rank traces")
    assert time.monotonic() - started < 5


def test_iteration_folders_one_level_down_are_still_read(tmp_path, capsys):
    rank_files(tmp_path / "iteration_4")
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and "2 of 2 ranks" in out, err


# --- 1. world sizes no job has ----------------------------------------------------------------

WORLDS = [10**12, -5, 0, -(10**12), 2**64, True, "2", 2.0, None, [2]]


@pytest.mark.parametrize("world", WORLDS, ids=repr)
def test_a_world_size_no_job_has_is_said_not_built(world, tmp_path, capsys):
    trace_file(tmp_path / "x_rank0.json", {"rank": 0, "world_size": world, "backend": "gloo"})
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and err == "" and "Traceback" not in out
    assert "1 of 1 ranks" in out  # the world taken as unknown, the rank read
    if world is not None:
        assert f"records world_size {world!r}"[:40] in out and "taken as unknown" in out
    assert f"of {world} ranks" not in out or world in (None,)


@pytest.mark.parametrize("rank", [-1, 7, 10**15, "0"], ids=repr)
def test_a_rank_that_cannot_be_is_said(rank, tmp_path, capsys):
    trace_file(tmp_path / "x_rank0.json", {"rank": rank, "world_size": 2, "backend": "gloo"})
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "gloo"})
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and err == ""
    assert f"records rank {rank!r}" in out and "rank taken from the file name" in out


# --- 4. traces that cannot be ranks of one job ------------------------------------------------


def two_launches(tmp_path: Path) -> Path:
    trace_file(tmp_path / "x_rank0.json", {"rank": 0, "world_size": 2, "backend": "gloo"},
               collective=True)  # fmt: skip
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "nccl"},
               collective=True)  # fmt: skip
    return tmp_path / "x"


def hours_apart(tmp_path: Path) -> Path:
    rank_files(tmp_path, "x", world=1)
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "gloo"},
               collective=True, start=3 * 3600e6)  # fmt: skip
    info = {"rank": 0, "world_size": 2, "backend": "gloo"}
    trace_file(tmp_path / "x_rank0.json", info, collective=True)
    return tmp_path / "x"


def no_collectives(tmp_path: Path) -> Path:
    trace_file(tmp_path / "l" / "b1_eager.json")  # a lesson's eager and compiled traces
    trace_file(tmp_path / "l" / "b1_compile.json")
    return tmp_path / "l"


NOT_ONE_JOB = {
    "different distributedInfo": (two_launches, "different distributedInfo"),
    "first steps hours apart": (hours_apart, "10,800 s apart"),
    "no collective at all": (no_collectives, "no rank issued a collective"),
}


@pytest.mark.parametrize("case", list(NOT_ONE_JOB))
@pytest.mark.parametrize("as_json", [False, True])
def test_traces_that_cannot_be_one_job_are_said_so(case, as_json, tmp_path, capsys):
    make, words = NOT_ONE_JOB[case]
    path = make(tmp_path)
    code, out, err = outcome(explain.main, [str(path)] + (["--json"] if as_json else []), capsys)
    assert code == 0 and err == ""
    assert words in out


def test_ranks_of_one_job_are_not_doubted(tmp_path, capsys):
    code, out, _ = outcome(explain.main, [str(rank_files(tmp_path))], capsys)
    assert code == 0 and "PROBLEM" not in out


# --- 2. numbers Python will not convert --------------------------------------------------------

HUGE = "9" * 5000


@pytest.mark.parametrize(
    "where",
    ["ts", "dur", "pid", "tid", "baseTimeNanoseconds", "args", "world_size"],
)
def test_a_number_past_the_int_digit_limit_is_a_malformed_event(where, tmp_path, capsys):
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events()}
    mm = doc["traceEvents"][1]
    if where == "baseTimeNanoseconds":
        doc[where] = "@HUGE@"
    elif where == "world_size":
        doc["distributedInfo"][where] = "@HUGE@"
    elif where == "args":
        mm["args"] = {"n": "@HUGE@"}
    else:
        mm[where] = "@HUGE@"
    text = json.dumps(doc).replace('"@HUGE@"', HUGE)
    path = tmp_path / "x_rank0.json"
    path.write_text(text)
    for argv in ([str(path)], [str(path), "--json"], [str(tmp_path)]):
        code, out, err = outcome(explain.main, argv, capsys)
        assert code == 0 and err == "" and "Traceback" not in out, err


# --- 2. the commands' own exits: Ctrl-C, a full disk, a closed pipe ---------------------------


@pytest.mark.parametrize("command", [explain, compare])
@pytest.mark.parametrize(
    ("raised", "want", "words"),
    [
        (KeyboardInterrupt, 130, "interrupted (Ctrl-C)"),
        (OSError(28, "No space left on device"), 2, "cannot write the output"),
        (OSError(5, "Input/output error"), 2, "cannot write the output"),
    ],
    ids=["ctrl-c", "disk full", "io error"],
)
def test_the_console_command_says_an_interrupt_or_a_failed_write_in_one_line(
    command, raised, want, words, monkeypatch, capsys
):
    def main():
        raise raised

    monkeypatch.setattr(command, "main", main)
    monkeypatch.setattr("tracereader.commands.shared.stdout_closed", lambda: 1)
    with pytest.raises(SystemExit) as exit_:
        command.cli()
    said_once(exit_.value.code, capsys.readouterr().err, want=want, words=words)


FIXTURE = "tests/fixtures/h100/02_linear/b1024_in32_out64_bf16_compile.json.gz"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["explain", "compare"])
def test_stdout_to_dev_full_is_one_line_exit_2(command):
    argv = ["-m", f"tracereader.commands.{command}", FIXTURE] + [FIXTURE] * (command == "compare")
    with open("/dev/full", "w") as full:
        proc = run_process(argv, stdout=full, timeout=60)
    said_once(proc.returncode, proc.stderr, words="No space left on device")


@pytest.mark.slow
def test_ctrl_c_in_explain_is_exit_130_and_one_line(tmp_path):
    """A real SIGINT while explain reads: a trace large enough to still be reading."""
    big = tmp_path / "big.json"
    step = events()
    many = [dict(e, ts=e["ts"] + i * 200) for i in range(60_000) for e in step]
    big.write_text(json.dumps({"traceEvents": many}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracereader.commands.explain", str(big)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.6)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("explain finished before the signal came")
    said_once(proc.returncode, err, want=130, words="interrupted")


# --- 2. the lessons: sizes past the float range, --traces-dir that cannot be written ----------

HUGE_SIZE = "9" * 400
LESSON_SIZES = [
    ("01_matmul_add", "--size"),
    ("02_linear", "--batch"),
    ("02_linear", "--in_dim"),
    ("02_linear", "--out_dim"),
    ("03_simple_mlp", "--batch"),
    ("03_simple_mlp", "--seq"),
    ("03_simple_mlp", "--dim"),
    ("03_simple_mlp", "--hidden"),
    ("04_a_naive_attention", "--seq"),
    ("04_a_naive_attention", "--head_dim"),
    ("04_b_inplace_ops_attention", "--batch"),
    ("04_b_inplace_ops_attention", "--heads"),
    ("04_c_sdpa_attention", "--seq"),
    ("04_c_sdpa_attention", "--batch"),
    ("06_train_step", "--batch"),
    ("06_train_step", "--seq"),
    ("06_train_step", "--dim"),
    ("06_train_step", "--hidden"),
    ("06_train_step", "--vocab"),
    ("06_train_step", "--layers"),
    ("08_generate", "--batch"),
    ("08_generate", "--prompt"),
    ("08_generate", "--new-tokens"),
    ("tools.shape_sweep", "--dim"),
    ("tools.shape_sweep", "--hidden"),
    ("tools.shape_sweep", "--shapes"),
]


def lesson(name: str, *argv: str, capsys) -> tuple[int, str]:
    from tests.helpers import run_script

    code = run_script(name, *argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("script", "flag"), LESSON_SIZES)
def test_a_size_past_the_float_range_is_refused_in_one_line(script, flag, tmp_path, capsys):
    value = f"{HUGE_SIZE}x128" if flag == "--shapes" else HUGE_SIZE
    if script == "06_train_step" and flag in ("--dim", "--heads"):
        value = "9" * 399 + "8"  # a multiple of --heads 2
    code, err = lesson(script, flag, value, "--traces-dir", str(tmp_path), capsys=capsys)
    positions = flag in ("--prompt", "--new-tokens")  # 08 says its preset's positions first
    said_once(code, err, words="do not fit" if positions else "choose smaller sizes")
    assert files(tmp_path) == set()


def traces_dir_loop(tmp_path: Path, script: str) -> Path:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return tmp_path / "loop"


def traces_dir_dangling(tmp_path: Path, script: str) -> Path:
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    return tmp_path / "gone"


def traces_dir_name_taken(tmp_path: Path, script: str) -> Path:
    """Every name the run could write, made a folder beforehand."""
    for name in TAKEN_NAMES[script]:
        (tmp_path / "t" / script / name).mkdir(parents=True)
    return tmp_path / "t"


TAKEN_NAMES = {
    "01_matmul_add": ["64_bf16_cold_eager_cpu.txt"],
    "02_linear": ["b1024_in32_out64_bf16_eager_cpu.json"],
    "04_c_sdpa_attention": ["b1_h2_s16_d16_bf16_eager_cpu_math.txt"],
    "06_train_step": ["b2_s16_d64_h128_n2_l2_autocast_foreach_eager_cpu.json"],
}
SMALL_ARGS = {
    "04_c_sdpa_attention": ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "16",
                            "--backend", "math"],
}  # fmt: skip
TRACES_DIRS = {
    "link loop": (traces_dir_loop, "leads nowhere"),
    "dangling link": (traces_dir_dangling, "leads nowhere"),
    "trace name is a folder": (traces_dir_name_taken, "is not a file"),
}


@pytest.mark.parametrize("case", list(TRACES_DIRS))
@pytest.mark.parametrize("script", list(TAKEN_NAMES))
def test_a_traces_dir_that_cannot_take_the_files_is_refused_up_front(
    script, case, tmp_path, capsys, monkeypatch
):
    make, words = TRACES_DIRS[case]
    folder = make(tmp_path, script)
    before = files(tmp_path)

    def no_work(*args, **kwargs):
        raise AssertionError("the run started its work before refusing")

    monkeypatch.setattr("torch.profiler.profile.__enter__", no_work)
    argv = [*SMALL_ARGS.get(script, []), "--traces-dir", str(folder)]
    code, err = lesson(script, *argv, capsys=capsys)
    said_once(code, err, words=words)
    assert files(tmp_path) == before


def test_07_counts_its_parameters_without_building_the_model():
    """50,000 layers: arithmetic, in a moment (the meta-device model took minutes); the count
    is TinyLM's own."""
    from argparse import Namespace

    from modules.models import TinyLM
    from tests.helpers import load_script

    fsdp = load_script("07_fsdp_train")
    small = Namespace(batch=1, seq=4, dim=16, hidden=40, heads=2, layers=3, vocab=100, ddp=True)
    model = TinyLM(100, 16, 40, 2, 3)
    params = sum(p.numel() for p in model.parameters())
    acts = (3 * (7 * 4 * 16 + 4 * 4 * 40) + 3 * 4 * 100) * 4
    assert fsdp.bytes_needed(small, 1) == params * 40 + acts * 2
    started = time.monotonic()
    huge = Namespace(**{**vars(small), "layers": 50_000, "dim": 4096, "hidden": 11008})
    assert fsdp.bytes_needed(huge, 2) > 2**40
    past_floats = Namespace(**{**vars(small), "dim": int(HUGE_SIZE)})
    assert fsdp.bytes_needed(past_floats, 2) > 10**400
    assert time.monotonic() - started < 1


# --- 2. torchrun's variables set by hand ------------------------------------------------------

ENVS = {
    "RANK=1 WORLD_SIZE=2": ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT not"),
    "RANK=0 WORLD_SIZE=1": ({"RANK": "0", "WORLD_SIZE": "1"}, "MASTER_ADDR and MASTER_PORT not"),
    "RANK=0 WORLD_SIZE=2 MASTER_ADDR=h": (
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"},
        "MASTER_PORT not",
    ),
    "RANK=3 WORLD_SIZE=2": ({"RANK": "3", "WORLD_SIZE": "2"}, "launch it with torchrun"),
    "RANK=x WORLD_SIZE=2": ({"RANK": "x", "WORLD_SIZE": "2"}, "launch it with torchrun"),
    "RANK=1 only": ({"RANK": "1"}, "launch it with torchrun"),
}


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize("script", ["05_tp_mlp", "07_fsdp_train"])
def test_torchrun_variables_set_by_hand_are_one_line(script, env, tmp_path, capsys, monkeypatch):
    from common import torchrun
    from tests.helpers import load_script

    variables, words = ENVS[env]
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", torchrun.TORCHRUN_ENV):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torchrun, "_quiet", lambda: None)  # would point fd 1 at /dev/null
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = torchrun.run_main(load_script(script).main, ["--traces-dir", str(tmp_path)])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    said_once(code, capsys.readouterr().err, words=words)
    assert files(tmp_path) == set()


# --- 2. the sweep's own flags -------------------------------------------------------------------

SWEEP = [
    (["--seed", str(2**70)], "--seed: must be at most"),
    (["--seed", "-1"], "--seed: must be at least 0"),
    (["--seed", "2**70"], "--seed: expected a whole number"),
    (["--traces-dir", ""], "--traces-dir/--traces_dir: is empty"),
    (["--traces-dir", "a\nb"], "control character"),
    (["--shapes", ""], "the shape list is empty"),
    (["--shapes", "8by128"], "is not BATCHxSEQ"),
    (["--shapes", "0x128"], "must be greater than 0"),
    (["--variants", "nope"], "unknown or no variants"),
    (["--dim", "nan"], "expected a whole number"),
]


@pytest.mark.parametrize(("argv", "words"), SWEEP, ids=lambda v: repr(v)[:30])
def test_the_sweep_refuses_its_flags_in_one_line(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = lesson("tools.shape_sweep", *argv, capsys=capsys)
    said_once(code, err.replace("python -m tools.shape_sweep: error:", "error:"), words=words)
    assert files(tmp_path) == set()


# --- 1. the trace benchmark's --mb ----------------------------------------------------------------

MBS = ["1e9", "1e400", "nan", "inf", "-inf", "-1", "0", "x", ""]


@pytest.mark.parametrize("mb", MBS)
def test_trace_bench_refuses_a_size_the_disk_cannot_hold(mb, tmp_path, capsys, monkeypatch):
    from tools.dev import trace_bench

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    code, _, err = outcome(trace_bench.main, ["--mb", mb], capsys)
    said_once(code, err.replace("python -m tools.dev.trace_bench: error:", "error:"), words="--mb")
    assert files(tmp_path) == set()


# --- 1. --bucket against a Hub that never answers ------------------------------------------------


@pytest.mark.parametrize("stuck", ["create_bucket", "sync_bucket"])
def test_a_hub_that_never_answers_times_out_naming_the_step(stuck, tmp_path, capsys, monkeypatch):
    import threading

    from huggingface_hub import BucketUrl

    from common import share

    never = threading.Event()
    calls = {
        "create_bucket": lambda *a, **k: BucketUrl("https://huggingface.co/buckets/alice/t"),
        "sync_bucket": lambda *a, **k: None,
    }
    calls[stuck] = lambda *a, **k: never.wait(30)
    for name, call in calls.items():
        monkeypatch.setattr(share.hf, name, call)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setattr(share, "TIMEOUTS_S", {"create": 0.2, "sync": 0.2})
    (tmp_path / "a.json").write_text("{}")
    started = time.monotonic()
    code, _, err = outcome(share.main, [str(tmp_path), "-b", "t"], capsys)
    never.set()
    step = "creating the bucket" if stuck == "create_bucket" else "uploading the traces"
    said_once(code, err, want=1, words=f"{step} got no answer within 0.2 s")
    assert time.monotonic() - started < 5 and "hf_secret" not in err


# --- 3. nothing left behind: signals, a full disk, a killed run's temporary folder ------------

LINEAR_SMALL = ["--batch", "8", "--in_dim", "4", "--out_dim", "6"]


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_during_the_export_leaves_nothing(sig, gz, tmp_path, capsys, monkeypatch):
    import tempfile

    import torch

    real = torch.profiler.profile.export_chrome_trace
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # TMPDIR, watched

    def export_then_signal(self, path):
        real(self, path)  # torch's own temporary JSON (gzip) written, then the signal comes
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(1)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_then_signal)
    argv = [*LINEAR_SMALL, "--traces-dir", str(tmp_path / "t")] + ["--gzip"] * gz
    code, err = lesson("02_linear", *argv, capsys=capsys)
    said_once(code, err, want=130, words="Ctrl-C")
    assert files(tmp_path) == {"tmp"}


@pytest.mark.parametrize(
    "errno_", ["ENOSPC", "EDQUOT", "EROFS", "EFBIG"], ids=lambda e: f"export {e}"
)
def test_a_refused_write_during_the_export_is_one_line(errno_, tmp_path, capsys, monkeypatch):
    import errno

    import torch

    def refuse(self, path):
        Path(f"{path}.tmp").write_text("{")  # what Kineto writes before it fails
        code = getattr(errno, errno_)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", refuse)
    code, err = lesson("02_linear", *LINEAR_SMALL, "--traces-dir", str(tmp_path), capsys=capsys)
    said_once(code, err, words="cannot write")
    assert files(tmp_path) == set()


def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run(tmp_path, capsys):
    folder = tmp_path / "02_linear"
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now
    for pid, name in ((dead.pid, "dead"), (os.getppid(), "alive")):
        (folder / f".partial-{pid}-x{name}").mkdir(parents=True)
        (folder / f".partial-{pid}-x{name}" / "t.json").write_text("{")
    (folder / ".partial-notapid-x").mkdir()  # not a run's: not touched
    code, _ = lesson("02_linear", *LINEAR_SMALL, "--traces-dir", str(tmp_path), capsys=capsys)
    assert code == 0
    left = {p.name for p in folder.iterdir() if p.name.startswith(".partial")}
    assert left == {f".partial-{os.getppid()}-xalive", ".partial-notapid-x"}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["closed pipe", "/dev/full"])
def test_a_lessons_stdout_that_fails_is_one_line_exit_2(where, tmp_path):
    argv = ["02_linear.py", *LINEAR_SMALL, "--device", "cpu", "--traces-dir", str(tmp_path)]
    if where == "/dev/full":
        with open("/dev/full", "w") as full:
            proc = run_process(argv, stdout=full, timeout=120)
        words = "No space left on device"
    else:
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        proc.stdout.readline()
        proc.stdout.close()  # `| head -1`
        proc.stderr_text = proc.stderr.read()
        proc.wait(timeout=120)
        proc.stderr = proc.stderr_text
        words = "reader went away"
    said_once(proc.returncode, proc.stderr, words=words)
    # stdout fails at its last flush, after the files were published whole: the pair or nothing
    left = files(tmp_path)
    assert not any(".partial" in name for name in left)
    assert len({n for n in left if n.endswith((".json", ".txt"))}) in (0, 2), left


# --- 3. tools/carry_wheels.py: every name and number in a manifest is hostile -----------------


def carry_outcome(argv: list, capsys) -> tuple[int, str]:
    from tools import carry_wheels

    code, _, err = outcome(carry_wheels.main, [str(a) for a in argv], capsys)
    return code, err.replace("carry_wheels.py: error:", "error:")


@pytest.fixture
def carried(tmp_path):
    """One small pack (two parts) in tmp_path/out, from fake wheels in tmp_path/wheels."""
    from tests.test_carry_wheels import fake_wheel
    from tools import carry_wheels

    fake_wheel(tmp_path / "wheels" / "main", "fakecute", os.urandom(60_000))
    fake_wheel(tmp_path / "wheels" / "fa4b18", "fakeflash", os.urandom(10_000))
    folders = carry_wheels.pack(tmp_path / "wheels", tmp_path / "out", part_mib=0.05)
    assert len(folders) == 2
    return folders[0]


def edit_manifest(folder: Path, change) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _part(i: int, **kw):
    def change(m):
        m["parts"][i].update(kw)

    return change


def _wheel_renamed(new: str):
    def change(m):
        m["wheels"][new] = m["wheels"].pop(next(iter(m["wheels"])))

    return change


def _drop(*keys):
    def change(m):
        target = m
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return change


def _set(key, value):
    def change(m):
        m[key] = value

    return change


HOSTILE_MANIFESTS = {
    "part named ../x": (_part(0, name="../x"), "must be named wheels.tar.1"),
    "part named /abs": (_part(0, name="/tmp/x"), "must be named wheels.tar.1"),
    "part named wheels.tar.1/../../x": (
        _part(0, name="wheels.tar.1/../../x"),
        "must be named wheels.tar.1",
    ),
    "part name an int": (_part(0, name=1), "must be named wheels.tar.1"),
    "parts out of order": (_part(0, name="wheels.tar.2"), "must be named wheels.tar.1"),
    "wheel ../../evil.whl": (_wheel_renamed("../../evil.whl"), "not a plain <group>/<name>.whl"),
    "wheel /abs/evil.whl": (_wheel_renamed("/tmp/evil.whl"), "not a plain <group>/<name>.whl"),
    "wheel main/../../x.whl": (_wheel_renamed("main/../../x.whl"), "not a plain"),
    "wheel in another group": (_wheel_renamed("elsewhere/x-1.0-py3-none-any.whl"), "not a plain"),
    "wheel .hidden": (_wheel_renamed("main/.x.whl"), "not a plain"),
    "bytes a string": (_part(0, bytes="12"), "whole number of bytes"),
    "bytes true": (_part(0, bytes=True), "whole number of bytes"),
    "bytes negative": (_part(0, bytes=-1), "whole number of bytes"),
    "bytes huge": (_part(0, bytes=2**70), "whole number of bytes"),
    "bytes a float": (_part(0, bytes=1.5), "whole number of bytes"),
    "sha256 uppercase": (_part(0, sha256="A" * 64), "64 lowercase hex digits"),
    "sha256 short": (_part(0, sha256="ab"), "64 lowercase hex digits"),
    "sha256 a number": (_part(0, sha256=7), "64 lowercase hex digits"),
    "bundle_sha256 missing": (_drop("bundle_sha256"), "expected an object with"),
    "part without sha256": (_drop("parts", 0, "sha256"), "must be an object with"),
    "parts a string": (_set("parts", "wheels.tar.1"), "parts must be a list"),
    "parts empty": (_set("parts", []), "parts must be a list"),
    "wheels a list": (_set("wheels", ["main/x.whl"]), "wheels must be an object"),
    "an extra key": (_set("mine", 1), "expected an object with"),
    "parts adding up past the bound": (
        lambda m: m["parts"].extend(
            {"name": f"wheels.tar.{i}", "bytes": 2**30, "sha256": "0" * 64} for i in (3, 4, 5)
        ),
        "add up to more than",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_MANIFESTS))
@pytest.mark.parametrize("command", ["gather", "install"])
def test_a_hostile_manifest_is_refused_and_nothing_is_written(
    case, command, carried, tmp_path, capsys
):
    change, words = HOSTILE_MANIFESTS[case]
    edit_manifest(carried, change)
    (tmp_path / "x").write_text("theirs")  # what ../x would overwrite
    before = files(tmp_path)
    argv = [command, carried, "--store", tmp_path / "store"]
    argv += ["--target", tmp_path / "site"] * (command == "install")
    code, err = carry_outcome(argv, capsys)
    said_once(code, err, words=words)
    assert files(tmp_path) == before and (tmp_path / "x").read_text() == "theirs"


def _raw(data: bytes):
    def write(folder: Path) -> None:
        (folder / "manifest.json").write_bytes(data)

    return write


def _folder_manifest(folder: Path) -> None:
    (folder / "manifest.json").unlink()
    (folder / "manifest.json").mkdir()


MALFORMED = {
    "not UTF-8": (_raw(b'{"parts": "\xff\xfe"}'), "is not UTF-8"),
    "nesting bomb": (_raw(b"[" * 200_000 + b"]" * 200_000), "maximum recursion depth"),
    "deep but small": (_raw(b"[" * 100_000), "not a manifest"),
    "5,000-digit number": (_raw(b'{"bundle_sha256": ' + b"9" * 5000 + b"}"), "not a manifest"),
    "over the size bound": (_raw(b" " * (2 << 20) + b"{}"), "larger than"),
    "NaN bytes": (_raw(b'{"parts": NaN}'), "expected an object with"),
    "empty": (_raw(b""), "not a manifest"),
    "a JSON list": (_raw(b"[]"), "expected an object with"),
    "a folder": (_folder_manifest, "cannot be read"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_manifest_is_one_line(case, carried, tmp_path, capsys):
    make, words = MALFORMED[case]
    make(carried)
    before = files(tmp_path)
    code, err = carry_outcome(["gather", carried, "--store", tmp_path / "store"], capsys)
    said_once(code, err, words=words)
    assert files(tmp_path) == before


def test_a_store_holding_someone_elses_manifest_is_left_whole(carried, tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text('{"mine": true}')
    (store / "thesis.tex").write_text("years of work")
    before = files(tmp_path)
    code, err = carry_outcome(["gather", carried, "--store", store], capsys)
    said_once(code, err, words="holds files this tool did not write")
    assert files(tmp_path) == before and (store / "thesis.tex").read_text() == "years of work"


def test_a_store_of_ours_loses_only_the_old_packs_own_files(carried, tmp_path, capsys):
    from tests.test_carry_wheels import fake_wheel
    from tools import carry_wheels

    store = tmp_path / "store"
    carry_wheels.gather(carried, store)
    (store / "notes.txt").write_text("kept")  # put there by hand later: not the tool's
    fake_wheel(tmp_path / "wheels" / "main", "fakeextra", b"x" * 1000)
    newer = carry_wheels.pack(tmp_path / "wheels", tmp_path / "newer", part_mib=0.05)
    carry_wheels.gather(newer[1], store)
    capsys.readouterr()
    assert sorted(p.name for p in store.iterdir()) == [
        ".carry_wheels_store", "manifest.json", "notes.txt", "wheels.tar.2"
    ]  # fmt: skip


def test_a_bundle_holding_more_than_its_manifest_lists_is_refused(tmp_path, capsys):
    """Checksums all sound, but the tar carries a file the manifest does not name."""
    import hashlib
    import io
    import tarfile

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    wheel, extra = b"wheel bytes", b"not listed"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("main/a-1.0-py3-none-any.whl", wheel), ("main/evil.pth", extra)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    bundle = buffer.getvalue()
    folder = tmp_path / "part1"
    folder.mkdir()
    (folder / "wheels.tar.1").write_bytes(bundle)
    (folder / "manifest.json").write_text(json.dumps({
        "bundle_sha256": sha(bundle),
        "parts": [{"name": "wheels.tar.1", "bytes": len(bundle), "sha256": sha(bundle)}],
        "wheels": {"main/a-1.0-py3-none-any.whl": {"bytes": len(wheel), "sha256": sha(wheel)}},
    }))  # fmt: skip
    store, target = tmp_path / "store", tmp_path / "site"
    code, err = carry_outcome(["install", folder, "--store", store, "--target", target], capsys)
    said_once(code, err, words="other files than the wheels its manifest lists")
    assert not target.exists() and not (tmp_path / "site-fa4b18").exists()
    assert {p.name for p in store.iterdir()} == {".carry_wheels_store", "manifest.json",
                                                  "wheels.tar.1"}  # fmt: skip


def test_a_side_target_of_someone_elses_is_not_replaced(carried, tmp_path, capsys):
    side = tmp_path / "site-fa4b18"
    side.mkdir()
    (side / "theirs.py").write_text("kept = True\n")
    argv = ["install", carried, "--store", tmp_path / "store", "--target", tmp_path / "site"]
    code, err = carry_outcome(argv, capsys)
    said_once(code, err, words="did not install")
    assert [p.name for p in side.iterdir()] == ["theirs.py"]


@pytest.mark.parametrize("mib", ["nan", "inf", "-1", "0", "1e400", "1e12", "x"])
def test_pack_refuses_a_part_size_in_one_line(mib, carried, tmp_path, capsys):
    before = files(tmp_path)
    argv = ["pack", "--wheels", tmp_path / "wheels", "--out", tmp_path / "o", "--part-mib", mib]
    code, err = carry_outcome(argv, capsys)
    said_once(code, err, words="--part-mib")
    assert files(tmp_path) == before


def test_pack_keeps_a_part_folder_it_did_not_write(carried, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "part1" / "thesis.tex").write_text("years of work")
    (out / "part7").mkdir()
    (out / "part7" / "manifest.json").write_text("{}")
    (out / "part7" / "notes.txt").write_text("mine")
    before = files(out)
    argv = ["pack", "--wheels", tmp_path / "wheels", "--out", out, "--part-mib", "0.05"]
    code, err = carry_outcome(argv, capsys)
    said_once(code, err, words="holds files pack did not write")
    assert {"part1/thesis.tex", "part7/notes.txt", "part7/manifest.json"} <= files(out)
    assert files(out) <= before


# --- 2. tools/tp_scaling.py: --run-timeout, and no torchrun left behind -----------------------


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "-1", "0", "1e400", "1e9", "x", ""])
def test_tp_scaling_refuses_a_run_timeout_that_is_not_finite_positive(timeout, tmp_path, capsys):
    from tools import tp_scaling

    argv = [str(tmp_path / "out"), "--device", "cpu", "--run-timeout", timeout]
    code, _, err = outcome(tp_scaling.main, argv, capsys)
    said_once(code, err.replace("tp_scaling.py: error:", "error:"), words="--run-timeout")
    assert files(tmp_path) == set()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie waits for its parent (init), it runs nothing


@pytest.mark.parametrize("raised", [RuntimeError("boom"), KeyboardInterrupt()], ids=repr)
def test_tp_scaling_stops_its_launch_on_any_exception(raised, tmp_path, monkeypatch):
    """A launch (a parent and a worker, as torchrun and its rank) and an exception while
    waiting for it: both stopped before the exception goes on."""
    from tools import tp_scaling

    pids = tmp_path / "pids"
    launch = [sys.executable, "-c",
              "import os, subprocess, sys, time\n"
              "worker = subprocess.Popen(['sleep', '60'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{worker.pid}}')\n"
              "time.sleep(60)\n"]  # fmt: skip

    def interrupted(self, timeout=None):
        while not pids.exists() or not pids.read_text():
            time.sleep(0.05)
        raise raised

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    monkeypatch.setattr(tp_scaling, "STOP_GRACE_S", 5)
    with pytest.raises(type(raised)):
        tp_scaling.run_one(launch, tmp_path / "log", timeout_s=30)
    parent, worker = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while not (_gone(parent) and _gone(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(parent) and _gone(worker)


def test_tp_scaling_says_an_interrupt_in_one_line(tmp_path, capsys, monkeypatch):
    from tools import tp_scaling

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tp_scaling, "run_one", interrupted)
    code, _, err = outcome(tp_scaling.main, [str(tmp_path / "o"), "--device", "cpu"], capsys)
    said_once(code, err.replace("tp_scaling.py: error:", "error:"), want=130, words="stopped")


# --- 3. the sweep: nothing left when stopped early, one writer per folder -----------------------

SWEEP_SMALL = ["--dim", "8", "--hidden", "16", "--shapes", "1x4", "--variants", "eager"]


@pytest.mark.parametrize("raised", [KeyboardInterrupt, MemoryError], ids=["ctrl-c", "error"])
def test_a_sweep_stopped_before_its_first_row_leaves_no_folder(raised, tmp_path, capsys,
                                                               monkeypatch):  # fmt: skip
    from tools import shape_sweep

    def stopped(*args, **kwargs):
        raise raised
        yield  # a generator, as the sweep is

    monkeypatch.setattr(shape_sweep, "sweep", stopped)
    argv = [*SWEEP_SMALL, "--traces-dir", str(tmp_path / "t" / "deeper")]
    if raised is KeyboardInterrupt:
        code, err = lesson("tools.shape_sweep", *argv, capsys=capsys)
        said_once(code, err, want=130, words="Ctrl-C")
    else:  # an error the sweep does not expect goes on up (a bug), the folders still removed
        with pytest.raises(raised):
            lesson("tools.shape_sweep", *argv, capsys=capsys)
    assert files(tmp_path) == set()


def test_a_second_sweep_into_a_folder_in_use_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch
):
    import fcntl

    from tools import shape_sweep

    folder = tmp_path / "shape_sweep"
    folder.mkdir()
    (folder / "d8_h16_bf16_cpu.csv").write_text("the first sweep's rows\n")
    before = files(tmp_path)

    def no_work(*args, **kwargs):
        raise AssertionError("the second sweep started measuring")
        yield

    monkeypatch.setattr(shape_sweep, "sweep", no_work)
    held = os.open(folder, os.O_RDONLY)  # the first sweep, still running
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, err = lesson("tools.shape_sweep", *SWEEP_SMALL, "--traces-dir", str(tmp_path),
                           capsys=capsys)  # fmt: skip
    finally:
        os.close(held)
    said_once(code, err, words="another run is writing into")
    assert files(tmp_path) == before
    assert (folder / "d8_h16_bf16_cpu.csv").read_text() == "the first sweep's rows\n"


# --- 5. a newcomer's first hour: a busy machine said, noise on stderr, the memory plot -------


@pytest.fixture
def fresh_busy_note(monkeypatch):
    from common.measuring import timing

    monkeypatch.setattr(timing, "_said_busy", False)
    return timing


@pytest.mark.parametrize("load", [0.1, 1.0, 1.01, 50.0])
def test_a_busy_machine_is_said_once_before_cpu_timings(load, fresh_busy_note, capsys,
                                                        monkeypatch):  # fmt: skip
    timing = fresh_busy_note
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    said = [timing.warn_if_cpu_busy(on_gpu=False) for _ in range(3)]
    assert not timing.warn_if_cpu_busy(on_gpu=True)
    out = capsys.readouterr().out
    if load > 1:
        assert said == [True, False, False] and out.count("\n") == 1
        assert f"load average {load:.1f}" in out and "cannot be trusted" in out
    else:
        assert said == [False] * 3 and out == ""


def test_a_lesson_on_a_busy_cpu_says_so_before_its_table(fresh_busy_note, tmp_path, capsys,
                                                         monkeypatch):  # fmt: skip
    from tests.helpers import run_script

    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * (os.cpu_count() or 1),) * 3)
    argv = [*LINEAR_SMALL, "--bench", "--traces-dir", str(tmp_path)]
    assert run_script("02_linear", *argv) == 0
    out = capsys.readouterr().out
    assert out.count("cannot be trusted") == 1  # once, though the table and --bench both ask
    assert out.index("cannot be trusted") < out.index("bench (profiler detached)")


def test_the_cuda_home_note_is_silenced_in_a_cpu_run(tmp_path, capsys, caplog):
    import logging
    from argparse import Namespace

    from common import cli

    args = Namespace(device="cpu", dtype="bf16", seed=0, compile=False)
    cli.resolve(args)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        logger = logging.getLogger("torch.utils.cpp_extension")
        logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local/cuda")
        logger.warning("another warning of cpp_extension")
    assert [r.getMessage() for r in caplog.records] == ["another warning of cpp_extension"]


def test_01s_cold_schedule_raises_no_warmup_warning(tmp_path, capsys):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, err = lesson("01_matmul_add", "--size", "8", "--traces-dir", str(tmp_path),
                           capsys=capsys)  # fmt: skip
    assert code == 0, err
    assert not [w for w in caught if "won't be using warmup" in str(w.message)]


def test_05s_docstring_names_the_cpu_runs_trace():
    from tests.helpers import load_script

    doc = load_script("05_tp_mlp").__doc__
    assert "explain traces/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager_cpu" in doc


@pytest.mark.parametrize(
    "phases",
    [
        [("forward", 0, 900), ("backward", 900, 903), ("optimizer", 903, 905)],
        [("forward", 0, 1), ("backward", 1, 2), ("optimizer", 2, 3)],
        [("forward", 0, 400), ("backward", 400, 800), ("optimizer", 800, 1000)],
    ],
    ids=["small backward and optimizer", "all three tiny", "wide"],
)
def test_the_memory_plots_phase_labels_never_overlap(phases):
    import matplotlib.pyplot as plt

    from common import memory

    times = [float(t) for t in range(0, 1001, 50)]
    sizes = [[1 << 20] * len(memory.CATEGORIES) for _ in times]
    fig = memory.draw(memory.StepMemory(times, sizes, phases), "a small step")
    try:
        renderer = fig.canvas.get_renderer()
        texts = [t for t in fig.axes[0].texts if t.get_text() in {p[0] for p in phases}]
        boxes = [t.get_window_extent(renderer) for t in texts]
        assert len(boxes) == 3
        for i, a in enumerate(boxes):
            assert not any(a.overlaps(b) for b in boxes[i + 1 :]), [t.get_text() for t in texts]
        title = fig.axes[0].title.get_window_extent(renderer)
        assert not any(title.overlaps(b) for b in boxes)
    finally:
        plt.close(fig)


# --- 1. --active: what the profiler will hold, bounded before profiling -----------------------

ATTENTION_SMALL = ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "16"]
TRAIN_SMALL = ["--batch", "2", "--seq", "16", "--dim", "64", "--hidden", "128", "--heads", "2",
               "--layers", "2"]  # fmt: skip
ACTIVE_LESSONS = {
    "01_matmul_add": ["--size", "16"],
    "02_linear": LINEAR_SMALL,
    "03_simple_mlp": ["--batch", "2", "--seq", "3", "--dim", "8", "--hidden", "16"],
    "04_a_naive_attention": ATTENTION_SMALL,
    "04_b_inplace_ops_attention": ATTENTION_SMALL,
    "04_c_sdpa_attention": [*ATTENTION_SMALL, "--backend", "math"],
    "06_train_step": TRAIN_SMALL,
}  # 03_fused, 03_kernels and 04_d run on a GPU only; 08 records at most --new-tokens - 1
# decode steps, which its context bounds (255 tokens of ~60 events for the tiny preset)


@pytest.mark.parametrize("script", list(ACTIVE_LESSONS))
def test_an_active_count_whose_events_do_not_fit_is_refused_before_profiling(
    script, tmp_path, capsys, monkeypatch
):
    """256 MiB of RAM and --active 10,000: the profiler's events (estimated a step, times the
    steps) would not fit; refused before the profiler starts, naming an --active that fits."""

    def no_work(*args, **kwargs):
        raise AssertionError("the run started profiling before refusing")

    monkeypatch.setattr("common.cli.available_ram", lambda: 256 << 20)
    monkeypatch.setattr("torch.profiler.profile.__enter__", no_work)
    argv = [*ACTIVE_LESSONS[script], "--active", "10000", "--traces-dir", str(tmp_path)]
    code, err = lesson(script, *argv, capsys=capsys)
    line = said_once(code, err, words="--active 10000 would hold about")
    assert "of profiler events" in line and "or fewer" in line
    assert files(tmp_path) == set()


def test_06_at_active_3000_is_refused_on_this_machine(tmp_path, capsys):
    """The issue's case: 3,000 recorded training steps of a tiny model grew past 23 GB."""
    from argparse import Namespace

    from common import cli
    from tests.helpers import load_script

    events = load_script("06_train_step").events_per_step(2)
    trace = cli.profiled(Namespace(warmup_steps=1, active=3000), events)
    ram = cli.available_ram()
    if (
        ram is None
        or trace.nbytes(cli.resolve(Namespace(device="cpu", dtype="bf16", seed=0))) < ram
    ):
        pytest.skip("this machine has the RAM for it")
    capsys.readouterr()
    argv = [*TRAIN_SMALL, "--active", "3000", "--traces-dir", str(tmp_path)]
    code, err = lesson("06_train_step", *argv, capsys=capsys)
    said_once(code, err, words="--active 3000 would hold about")
    assert files(tmp_path) == set()


def test_the_estimate_is_what_was_measured():
    """06's estimate covers its measured 1,302 and 4,113 events a step (1 and 4 layers) at
    the measured ~7.7 kB an event."""
    from common import cli
    from tests.helpers import load_script

    train = load_script("06_train_step")
    assert train.events_per_step(1) >= 1_302 and train.events_per_step(4) >= 4_113
    assert cli.TRACE_BYTES_PER_EVENT >= 7_712
