"""Hostile input (tests/hostile.py says the rules) against the tools: the sweep's flags and
its early stop, trace_bench's --mb, --bucket against a Hub that never answers, carry_wheels'
manifests, tp_scaling's --run-timeout and its launch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile import (
    files,
    lesson,
    outcome,
    said_once,
    time_bound,  # noqa: F401  (autouse: a hang fails, never blocks)
)

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
    from tools.dev.reader_validation import trace_bench

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    code, _, err = outcome(trace_bench.main, ["--mb", mb], capsys)
    prog = "python -m tools.dev.reader_validation.trace_bench"
    said_once(code, err.replace(f"{prog}: error:", "error:"), words="--mb")
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


# --- 3. tools/carry_wheels.py: every name and number in a manifest is hostile -----------------


def carry_outcome(argv: list, capsys) -> tuple[int, str]:
    from tools import carry_wheels

    code, _, err = outcome(carry_wheels.main, [str(a) for a in argv], capsys)
    # argparse's own refusals name the program (and its sub-command): `carry_wheels.py pack:`
    return code, re.sub(r"^carry_wheels\.py( \w+)?: error:", "error:", err)


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


@pytest.mark.parametrize("raised", [KeyboardInterrupt, ZeroDivisionError], ids=["ctrl-c", "bug"])
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


# --- tools/startup_breakdown.py: its flags, and where the lesson's runs write --------------------

STARTUP = [
    (["--runs", "-1"], "argument --runs: must be greater than 0"),
    (["--runs", "0"], "argument --runs: must be greater than 0"),
    (["--runs", "x"], "argument --runs: expected a whole number"),
    (["--out", ""], "is empty or holds a control character"),
    (["--out", "a\nb"], "is empty or holds a control character"),
    (["--out", "afile/deeper"], "afile is there and is not a folder"),
    (["--traces-dir", "afile"], "afile is there and is not a folder"),
    (["--json", "none/b.json"], "--json none/b.json: not a file in a folder that is there"),
    (["--repo", "."], "no lesson '02_linear.py' in"),  # a checkout without the lesson
]


def breakdown(argv: list[str], capsys) -> tuple[int, str, str]:
    from tools import startup_breakdown
    from tracereader import run

    code, out, err = outcome(lambda a: run(lambda: startup_breakdown.main(a)), argv, capsys)
    return code, out, err.replace("python -m tools.startup_breakdown: error:", "error:")


@pytest.mark.parametrize(("argv", "words"), STARTUP, ids=repr)
def test_startup_breakdown_refuses_its_flags_before_any_run(
    argv, words, tmp_path, capsys, monkeypatch
):
    from tools import startup_breakdown

    def no_run(*args, **kwargs):
        raise AssertionError("a lesson ran")

    monkeypatch.setattr(startup_breakdown, "one_run", no_run)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    code, _, err = breakdown(["02_linear.py", *argv], capsys)
    said_once(code, err, words=words)
    assert files(tmp_path) == {"afile"}


@pytest.mark.parametrize(
    ("flags", "into"),
    [([], "traces/startup_breakdown"), (["--out", "mine"], "mine"),
     (["--traces-dir", "mine"], "mine")],
)  # fmt: skip
def test_startup_breakdown_runs_the_lesson_into_the_folder_asked(
    flags, into, tmp_path, capsys, monkeypatch
):
    """The lesson's process, whose writing is the case, stands in: its breakdown line."""
    from tools import startup_breakdown

    launched = []

    def lesson_process(argv, **kwargs):
        launched.append(argv)
        marks = {"import torch": 1.0, "_until_main_returned": 2.0}
        return subprocess.CompletedProcess(argv, 0, "", f"BREAKDOWN {json.dumps(marks)}\n")

    monkeypatch.setattr(startup_breakdown.subprocess, "run", lesson_process)
    monkeypatch.chdir(tmp_path)
    code, out, err = breakdown(["02_linear.py", "--runs", "1", *flags], capsys)
    assert code == 0, err
    assert len(launched) == 2 and "median of 1 runs" in out
    for argv in launched:
        assert argv[argv.index("--traces-dir") + 1] == str(tmp_path / into)
