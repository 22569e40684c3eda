"""Hostile input (tests/hostile.py says the rules) against the lessons: sizes past the float
range, --traces-dir that cannot take the files, torchrun's variables set by hand, signals and a
full disk during the export, a newcomer's first hour, an --active that does not fit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.hostile import (
    STOP_SIGNALS,
    default_signals,
    files,
    lesson,
    run_process,
    said_once,
    signals_at_default,
    time_bound,  # noqa: F401  (autouse: a hang fails, never blocks)
)

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

    from common import fsdp
    from modules.models import TinyLM

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
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        code = torchrun.run_main(load_script(script).main, ["--traces-dir", str(tmp_path)])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    said_once(code, capsys.readouterr().err, words=words)
    assert files(tmp_path) == set()


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_a_torchrun_rank_is_exit_130_said_by_rank_0(sig, rank, monkeypatch, capsys):
    """torchrun passes the signal it gets to every rank (Ctrl-C: SIGINT, `kill`: SIGTERM, a
    closed terminal: SIGHUP): each rank exits 130, rank 0 alone says why, in one line."""
    from tests.helpers import torchrun_in_process

    def main(argv):
        handler = signal.getsignal(getattr(signal, sig))
        assert callable(handler), f"{sig} would end the rank without a word"
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(5)

    with signals_at_default():  # as torchrun starts a rank
        code, quiet = torchrun_in_process(monkeypatch, main, rank=rank)
    err = capsys.readouterr().err
    if rank == 0:
        said_once(code, err, want=130, words="Ctrl-C" if sig == "SIGINT" else f"by {sig}")
    else:
        assert (code, err, quiet) == (130, "", "")


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
    with signals_at_default():  # as in a terminal, also where this test run ignores some
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


GZIP_LESSONS = {"01_matmul_add": ["--size", "64"], "08_generate": ["--new-tokens", "3"]}


@pytest.mark.parametrize(
    "script", ["01_matmul_add", pytest.param("08_generate", marks=pytest.mark.slow)]
)  # 08: a generation and its float32 reference, seconds on two busy cores
def test_a_disk_that_fills_during_a_gzip_export_is_one_line_exit_2(
    script, tmp_path, capsys, monkeypatch
):
    """Room for the profiler's gzip stream and no more: the trace stamped with torch's version,
    a second gzip file, meets a full disk (it was published unstamped, exit 0)."""
    import errno
    import gzip

    real, first = gzip.GzipFile.write, []

    def full_after_the_first_file(self, data):
        first[:] = first or [id(self)]
        if id(self) != first[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", full_after_the_first_file)
    argv = [*GZIP_LESSONS[script], "--gzip", "--traces-dir", str(tmp_path)]
    code, err = lesson(script, *argv, capsys=capsys)
    said_once(code, err, words="No space left on device")
    assert files(tmp_path) == set()


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_an_export_cut_short_by_a_full_disk_is_one_line_exit_2(gz, tmp_path, capsys, monkeypatch):
    """On a full disk the profiler's exporter stops writing and says nothing: its JSON ends
    mid-event (and torch gzips what there is). It was published, and its read-back failed in
    a traceback."""
    import gzip

    import torch

    real = torch.profiler.profile.export_chrome_trace

    def cut_short(self, path):
        whole = tmp_path / "whole.json"
        real(self, str(whole))
        text = whole.read_bytes()
        whole.unlink()
        with (gzip.open if path.endswith(".gz") else open)(path, "wb") as out:
            out.write(text[: len(text) // 2])

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", cut_short)
    argv = [*GZIP_LESSONS["01_matmul_add"], "--traces-dir", str(tmp_path / "t")] + ["--gzip"] * gz
    code, err = lesson("01_matmul_add", *argv, capsys=capsys)
    said_once(code, err, words="stopped short of the trace's end")
    assert files(tmp_path) == set()


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_the_trace_is_named_by_its_final_path(gz, tmp_path, capsys):
    """Chrome's traceName: where the trace is, not the temporary folder it was written in."""
    import gzip
    import json

    argv = [*LINEAR_SMALL, "--traces-dir", str(tmp_path)] + ["--gzip"] * gz
    code, _ = lesson("02_linear", *argv, capsys=capsys)
    (trace,) = (tmp_path / "02_linear").glob("*.json*")
    with (gzip.open if gz else open)(trace, "rt") as f:
        assert (code, json.load(f)["traceName"]) == (0, str(trace))


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


# A lesson's `python -c` stand-in: the script run as __main__ (as `python 08_generate.py` runs
# it), torch's import (seconds: 08's imports took ~10 s on two busy cores) held open instead.
IMPORTING = """
import runpy, sys, time
class SlowTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("importing torch", flush=True)
            time.sleep(60)
sys.meta_path.insert(0, SlowTorch())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "sig", "rank"),
    [("08_generate", "SIGINT", None), ("08_generate", "SIGTERM", None),
     ("08_generate", "SIGHUP", None), ("07_fsdp_train", "SIGINT", 0),
     ("07_fsdp_train", "SIGINT", 1)],
)  # fmt: skip
def test_a_signal_while_a_lesson_imports_is_one_line_exit_130(script, sig, rank, tmp_path):
    """Ctrl-C before the lesson's main runs, while torch loads: one line (a traceback of the
    import chain before), exit 130, nothing written; under torchrun rank 0 alone says it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if rank is not None:
        env.update(RANK=str(rank), WORLD_SIZE="2", TORCHELASTIC_RUN_ID="test")
    proc = subprocess.Popen(
        [sys.executable, "-c", IMPORTING, f"{script}.py", "--traces-dir", str(tmp_path)],
        cwd=ROOT, env=env, preexec_fn=default_signals, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "importing torch\n"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    if rank == 1:
        assert (proc.returncode, err) == (130, "")
    else:
        said_once(proc.returncode, err, want=130, words="Ctrl-C")
    assert files(tmp_path) == set()


def test_every_lesson_imports_its_signal_guard_before_torch():
    """common.startup is what makes the case above one line: above torch, in every lesson."""

    def first(lines, *starts):
        return next((i for i, line in enumerate(lines) if line.startswith(starts)), len(lines))

    late = []
    for path in sorted(ROOT.glob("[0-9][0-9]_*.py")):
        lines = path.read_text().splitlines()
        if not first(lines, "import common.startup") < first(lines, "import torch", "from torch"):
            late.append(path.name)
    assert late == []


def test_impl_hf_without_transformers_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as where it is not installed
    argv = ["--impl", "hf", "--traces-dir", str(tmp_path)]
    code, err = lesson("08_generate", *argv, capsys=capsys)
    said_once(code, err, words="`uv sync --extra hf` installs it")
    assert files(tmp_path) == set()


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

    from common import cli, training

    events = training.events_per_step(2)
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
    from common import cli, training

    assert training.events_per_step(1) >= 1_302 and training.events_per_step(4) >= 4_113
    assert cli.TRACE_BYTES_PER_EVENT >= 7_712
