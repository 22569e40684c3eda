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

    from models import TinyLM
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
