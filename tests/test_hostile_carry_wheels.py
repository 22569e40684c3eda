"""Hostile input (tests/hostile.py says the rules) against tools/carry_wheels.py's files and
folders: a link at its temporary name, the user's files in its target, a manifest that is a
FIFO, a store or target another user planted in /tmp, SIGTERM while pip runs. (Its manifests'
names and numbers: tests/test_hostile_tools.py.)"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.hostile import files, said_once, time_bound  # noqa: F401  (autouse: a hang fails)
from tests.test_hostile_tools import carry_outcome


@pytest.fixture
def pack(tmp_path) -> list[Path]:
    """Two part folders in tmp_path/out, from fake wheels in tmp_path/wheels."""
    from tests.test_carry_wheels import fake_wheel
    from tools import carry_wheels

    fake_wheel(tmp_path / "wheels" / "main", "fakecute", os.urandom(60_000))
    fake_wheel(tmp_path / "wheels" / "fa4b18", "fakeflash", os.urandom(10_000))
    return carry_wheels.pack(tmp_path / "wheels", tmp_path / "out", part_mib=0.05)


def _needs_pip():
    from tools import carry_wheels

    try:
        return carry_wheels.pip_command()
    except carry_wheels.Refusal:
        pytest.skip("neither pip nor uv to install with")


def test_a_link_planted_at_a_temporary_name_is_never_written_through(pack, tmp_path, capsys):
    store, victim = tmp_path / "store", tmp_path / "victim"
    assert carry_outcome(["gather", pack[0], "--store", store], capsys)[0] == 0
    victim.write_text("theirs")
    for name in ("wheels.tar.1", "manifest.json"):  # the names it wrote through before
        (store / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    code, err = carry_outcome(["gather", pack[0], "--store", store], capsys)
    assert code == 0, err
    assert victim.read_text() == "theirs"
    part = store / "wheels.tar.1"
    assert not part.is_symlink() and part.read_bytes() == (pack[0] / "wheels.tar.1").read_bytes()


@pytest.mark.parametrize(
    ("theirs", "named"),
    [("mine.txt", "mine.txt"), ("myproject/x.py", "myproject"),
     ("fakecute/mine.py", "fakecute/mine.py")],  # in a folder the install made
)  # fmt: skip
def test_install_over_its_own_target_never_deletes_the_users_files(
    theirs, named, pack, tmp_path, capsys
):
    from tests.test_carry_wheels import fake_wheel
    from tools import carry_wheels

    _needs_pip()
    store, target = tmp_path / "store", tmp_path / "site"
    first, last = pack
    assert carry_outcome(["gather", first, "--store", store], capsys)[0] == 0
    code, err = carry_outcome(["install", last, "--store", store, "--target", target], capsys)
    assert code == 0, err
    (target / theirs).parent.mkdir(exist_ok=True)
    (target / theirs).write_text("years of work")
    fake_wheel(tmp_path / "wheels" / "main", "fakeextra", b"x" * 1000)  # a newer pack
    newer = carry_wheels.pack(tmp_path / "wheels", tmp_path / "newer", part_mib=0.05)
    for folder in newer[:-1]:
        carry_wheels.gather(folder, store)
    before = files(target)
    code, err = carry_outcome(["install", newer[-1], "--store", store, "--target", target], capsys)
    said_once(code, err, words=f"holds {named}, which this tool did not install")
    assert files(target) == before and (target / theirs).read_text() == "years of work"
    mine = target / named  # moved out: the newer pack replaces the older, all of it
    shutil.rmtree(mine) if mine.is_dir() else mine.unlink()
    code, err = carry_outcome(["install", newer[-1], "--store", store, "--target", target], capsys)
    assert code == 0, err
    assert (target / "fakeextra").is_dir() and (target / "fakecute").is_dir()  # all replaced
    assert not [p for p in tmp_path.iterdir() if ".carry_wheels." in p.name]  # no work folder


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("command", ["gather", "install"])
def test_a_manifest_that_is_no_regular_file_is_refused_at_once(
    kind, command, pack, tmp_path, capsys
):
    manifest = pack[0] / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest) if kind == "fifo" else manifest.symlink_to(kind)
    before, started = files(tmp_path), time.monotonic()
    argv = [command, pack[0], "--store", tmp_path / "store"]
    argv += ["--target", tmp_path / "site"] * (command == "install")
    code, err = carry_outcome(argv, capsys)
    said_once(code, err, words="not a regular file")
    assert time.monotonic() - started < 2 and files(tmp_path) == before


def _owned_by_another(folder: Path, monkeypatch) -> None:
    """Made here, then reported by lstat as another user's (chown needs root)."""
    folder.mkdir()
    lstat = os.lstat

    def theirs(path, *args, **kwargs):
        found = lstat(path, *args, **kwargs)
        if os.path.abspath(path) != str(folder):
            return found
        return os.stat_result((*found[:4], found.st_uid + 1, *found[5:10]))

    monkeypatch.setattr(os, "lstat", theirs)


PLANTED = {  # what another user can put in /tmp before the first run
    "a folder of another user's": _owned_by_another,
    "a folder anyone can write": lambda f, _: (f.mkdir(), f.chmod(0o777)),
    "a link to elsewhere": lambda f, _: (f.with_name("elsewhere").mkdir(),
                                         f.symlink_to(f.with_name("elsewhere"))),
}  # fmt: skip


@pytest.fixture
def shared(tmp_path) -> Path:
    """A folder anyone can write, as /tmp is."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


@pytest.mark.parametrize("case", list(PLANTED))
@pytest.mark.parametrize("flag", ["default", "--store", "--target"])
def test_a_store_or_target_in_a_shared_folder_must_be_the_users_own(
    case, flag, pack, shared, tmp_path, capsys, monkeypatch
):
    from tools import carry_wheels

    home = shared / "profiling-pytorch-wheels"
    PLANTED[case](home, monkeypatch)
    before = files(tmp_path)
    monkeypatch.setattr(carry_wheels, "HOME", home)
    argv = {
        "default": ["gather", pack[0]],
        "--store": ["gather", pack[0], "--store", home / "parts"],
        "--target": ["install", pack[0], "--store", tmp_path / "own", "--target", home / "s"],
    }
    code, err = carry_outcome(argv[flag], capsys)  # fmt: skip
    said_once(code, err, words="--target" if flag == "--target" else "--store")
    assert files(tmp_path) - before <= {"own", "own/manifest.json", "own/wheels.tar.1",
                                         "own/.carry_wheels_store"}  # fmt: skip


def test_the_default_store_is_made_private_in_a_shared_folder(pack, shared, capsys, monkeypatch):
    from tools import carry_wheels

    monkeypatch.setattr(carry_wheels, "HOME", shared / "profiling-pytorch-wheels")
    code, err = carry_outcome(["gather", pack[0]], capsys)
    assert code == 0, err
    for folder in (shared / "profiling-pytorch-wheels", shared / "profiling-pytorch-wheels/parts"):
        assert folder.stat().st_mode & 0o077 == 0  # nobody else can read, swap or plant there


def test_sigterm_while_pip_runs_leaves_no_temporary_folder(pack, tmp_path, capsys, monkeypatch):
    """pip, killed, leaves its pip-* folders in TMPDIR: the fake one here does as pip does."""
    import signal
    import threading

    temp, started = tmp_path / "tmp", tmp_path / "pip-started"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    pip = tmp_path / "pip.sh"
    pip.write_text(f'mktemp -d "$TMPDIR/pip-target-XXXXXX" >/dev/null\ntouch {started}\n'
                   "exec sleep 30\n")  # fmt: skip
    store, target = tmp_path / "store", tmp_path / "site"
    first, last = pack
    assert carry_outcome(["gather", first, "--store", store], capsys)[0] == 0
    main = threading.main_thread().ident

    def stop():
        deadline = time.monotonic() + 10
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if started.exists():  # pip runs: the runner's handler is in place
            signal.pthread_kill(main, signal.SIGTERM)

    killer = threading.Thread(target=stop)
    killer.start()
    argv = ["install", last, "--store", store, "--target", target, "--pip", f"sh {pip}"]
    code, err = carry_outcome(argv, capsys)
    killer.join()
    said_once(code, err, want=130, words="SIGTERM")
    assert list(temp.iterdir()) == [] and not target.exists()
    assert not [p for p in tmp_path.iterdir() if ".carry_wheels." in p.name]
    assert {p.name for p in store.iterdir()} == {".carry_wheels_store", "manifest.json",
                                                  "wheels.tar.1", "wheels.tar.2"}  # fmt: skip
