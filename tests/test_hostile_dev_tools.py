"""Hostile input (tests/hostile.py says the rules) against tools/dev: predict_scaling's inputs
(missing, malformed, NaN or negative times, a curve of 0 or -3 ranks, a FIFO or /dev/zero as a
curve), link_curve's OUT (a file) and a full disk under it or under the cache, step_memory's
lesson names. In-process: each answers in milliseconds, and link_curve's collectives (which
need a second rank's process) are replaced by the curve they would measure."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import pytest

from tests.hostile import files, outcome, said_once, time_bound  # noqa: F401  (autouse)
from tracereader import run

KINDS = ("all-reduce", "all-gather", "reduce-scatter")


def curve_text(world: int = 4) -> str:
    """A link curve as link_curve.py writes it, 1 MiB to 1 GiB, all three kinds."""
    rows = [f"{kind},{2**20 << i},{30 * (i + 1):.3f}" for kind in KINDS for i in range(11)]
    return f"# Test GPU | nccl | {world} ranks | made up\nkind,bytes,bus_GBps\n" + "\n".join(rows)


def tp_table(folder: Path, one: str = "1000", two: str = "700", reduce: str = "100") -> Path:
    """tools/tp_scaling.py's table: the 8x shape at N = 1 and N = 2."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tp_scaling.csv").write_text(
        "shape,mode,ranks,forward_us,allreduce_us,status\n"
        f"8x,eager,1,{one},,ok\n8x,eager,2,{two},{reduce},ok\n"
    )
    return folder


def predict(argv: list, capsys) -> tuple[int, str, str]:
    from tools.dev.ranks import predict_scaling

    def main(args):
        return run(lambda: predict_scaling.main(args))

    code, out, err = outcome(main, [str(a) for a in argv], capsys)
    return code, out, err.replace("predict_scaling.py: error:", "error:")


def _curve(world: int):
    def make(tmp: Path) -> list:
        (tmp / "c.csv").write_text(curve_text(world))
        return ["--tp", tp_table(tmp / "tp"), "--curve", tmp / "c.csv"]

    return make


def _tp(**values):
    def make(tmp: Path) -> list:
        (tmp / "c.csv").write_text(curve_text())
        return ["--tp", tp_table(tmp / "tp", **values), "--curve", tmp / "c.csv"]

    return make


def _table(text: str):
    def make(tmp: Path) -> list:
        (tmp / "c.csv").write_text(curve_text())
        (tmp / "tp").mkdir()
        (tmp / "tp" / "tp_scaling.csv").write_text(text)
        return ["--tp", tmp / "tp", "--curve", tmp / "c.csv"]

    return make


def _train_log(line: str):
    def make(tmp: Path) -> list:
        (tmp / "c.csv").write_text(curve_text())
        runs = tmp / "fsdp"
        runs.mkdir()
        for n in (1, 2):
            (runs / f"n{n}_eager.log").write_text(
                f"07 b8_s128_d256_h1024_n4_l4\ntrain-scaling: {line.format(n=n)}\n"
            )
        return ["--train", runs, "--curve", tmp / "c.csv"]

    return make


def _special(kind: str):
    def make(tmp: Path) -> list:
        if kind == "fifo":
            os.mkfifo(tmp / "c.csv")
        else:
            (tmp / "c.csv").symlink_to(kind)
        return ["--tp", tp_table(tmp / "tp"), "--curve", tmp / "c.csv"]

    return make


def _out_a_file(tmp: Path) -> list:
    (tmp / "c.csv").write_text(curve_text())
    (tmp / "p").write_text("mine")
    return ["--tp", tp_table(tmp / "tp"), "--curve", tmp / "c.csv", "--out", tmp / "p"]


PREDICTIONS = {
    "a missing tp table": (lambda t: ["--tp", t / "none", "--curve", _curve(4)(t)[-1]],
                           "cannot read --tp's table"),
    "a table of other columns": (_table("a,b\n1,2\n"), "has no allreduce_us, forward_us"),
    "a time that is a word": (_tp(one="fast"), "forward_us is not a number: 'fast'"),
    "a NaN time": (_tp(one="nan"), "forward_us must be a finite time above 0"),
    "an infinite time": (_tp(two="inf"), "forward_us must be a finite time above 0"),
    "a negative time": (_tp(one="-1000"), "forward_us must be a finite time above 0"),
    "a negative all-reduce": (_tp(reduce="-100"), "allreduce_us must be a finite time"),
    "an all-reduce longer than the forward": (_tp(reduce="800"), "not part of the forward"),
    "an unknown shape": (_table("shape,mode,ranks,forward_us,allreduce_us,status\n"
                                "9x,eager,1,5,,ok\n"), "unknown shape '9x'"),
    "a row of 0 ranks": (_table("shape,mode,ranks,forward_us,allreduce_us,status\n"
                                "8x,eager,0,5,,ok\n"), "must be a whole number of ranks, got 0"),
    "a log's NaN step": (_train_log("ranks={n} step_us=nan exposed_us=1"), "step_us must be"),
    "a log's negative step": (_train_log("ranks={n} step_us=-5 exposed_us=1"), "step_us must be"),
    "a log without ranks": (_train_log("step_us=5"), "n1_eager.log: ranks is missing"),
    "a curve of 0 ranks": (_curve(0), "a curve of 0 ranks: a link joins 2 or more"),
    "a curve of -3 ranks": (_curve(-3), "a curve of -3 ranks: a link joins 2 or more"),
    "a FIFO as the curve": (_special("fifo"), "is not a regular file"),
    "/dev/zero as the curve": (_special("/dev/zero"), "is not a regular file"),
    "--out a file": (_out_a_file, "--out"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(PREDICTIONS))
def test_a_hostile_input_to_the_prediction_is_one_line(case, tmp_path, capsys):
    make, words = PREDICTIONS[case]
    argv = make(tmp_path)
    before, started = files(tmp_path), time.monotonic()
    code, out, err = predict(argv, capsys)
    said_once(code, err, words=words)
    assert out == "" and files(tmp_path) == before and time.monotonic() - started < 2


def test_a_log_with_a_word_for_ranks_names_the_log(tmp_path, capsys):
    code, _, err = predict(_train_log("ranks=two step_us=5")(tmp_path), capsys)
    said_once(code, err, words="n1_eager.log: ranks is not a number: 'two'")


# --- link_curve: OUT, and a full disk -------------------------------------------------------


@pytest.fixture
def rank0(tmp_path, monkeypatch) -> list:
    """link_curve as torchrun's rank 0 of two, in this process: the collectives, which need the
    other rank, replaced by the curve they measure. Returns the measure calls made."""
    from common import torchrun
    from tools.dev.ranks import link_curve
    from tracereader import LinkCurve

    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls = []

    def measure(run, **kwargs):
        calls.append(kwargs)
        return LinkCurve.from_csv(curve_text(2))

    monkeypatch.setattr(link_curve.link, "measure", measure)
    monkeypatch.setattr(
        torchrun, "init_process_group", lambda *a, **k: torchrun.Group(0, 2, "gloo")
    )
    return calls


def link_outcome(argv: list, capsys) -> tuple[int, str, str]:
    """As `torchrun ... -m tools.dev.ranks.link_curve ARGV` ends on rank 0; run_main's signal
    handlers are put back after (it leaves SIGINT ignored, as a rank's last act)."""
    from common import torchrun
    from tools.dev.ranks import link_curve

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return outcome(lambda a: torchrun.run_main(link_curve.main, a), [*map(str, argv)], capsys)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("where", ["out", "out/deeper"])
def test_link_curve_refuses_a_file_as_out_before_measuring(where, rank0, tmp_path, capsys):
    (tmp_path / "out").write_text("mine")
    code, _, err = link_outcome([tmp_path / where, "--device", "cpu"], capsys)
    said_once(code, err, words="is not a folder")
    assert rank0 == [] and (tmp_path / "out").read_text() == "mine"


@pytest.mark.parametrize("full", ["out", "cache"])
def test_a_full_disk_is_one_line_and_leaves_no_partial_file(
    full, rank0, tmp_path, capsys, monkeypatch
):
    from tools.dev.ranks import link_curve

    write = Path.write_text

    def half_then_full(self, data, *args, **kwargs):  # what a disk that fills up does
        if not str(self).startswith(str(tmp_path / full)):
            return write(self, data, *args, **kwargs)
        write(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", half_then_full)
    # The plot is not this case (tests/test_link_curve.py draws it, end to end): its matplotlib
    # import alone takes seconds on two busy cores.
    monkeypatch.setattr(link_curve, "plot", lambda curve, png: png.write_bytes(b"png"))
    code, _, err = link_outcome([tmp_path / "out", "--device", "cpu"], capsys)
    said_once(code, err, words="No space left on device")
    if full == "cache":  # the measurement is kept, and the line says where
        assert "the curve is in" in err
        assert sorted(files(tmp_path / "out")) == [
            "link_curve_CPU_gloo_n2.csv", "link_curve_CPU_gloo_n2.png"
        ]  # fmt: skip
    else:
        assert files(tmp_path / "out") == set()
    assert files(tmp_path / "cache" / "profiling-pytorch") == set()


# --- step_memory: the lessons it knows --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [(["09_nope"], "no such lesson here: '09_nope'"),
     (["02_linear", "../../etc/passwd"], "no such lesson here: '../../etc/passwd'"),
     (["--low", "0"], "--low: must be greater than 0"),
     (["--low", "5", "--high", "5"], "--high 5 must be above --low 5")],
)  # fmt: skip
def test_step_memory_refuses_what_it_cannot_measure(argv, words, capsys, monkeypatch):
    from tools.dev import step_memory

    def no_run(*args):
        raise AssertionError("a lesson ran")

    monkeypatch.setattr(step_memory, "one_run", no_run)
    code, _, err = outcome(lambda a: run(lambda: step_memory.main(a)), argv, capsys)
    said_once(code, err.replace("python -m tools.dev.step_memory: error:", "error:"), words=words)
