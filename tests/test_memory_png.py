"""`explain --memory`'s PNG never damages what is there: the trace it reads, a link, a device or
a FIFO named as the output is refused in one line before any work; an existing regular file is
replaced whole, by rename, with the user's umask; nothing is written beside the trace."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from tests.test_memory_timeline import PNG_MAGIC, TRACE
from tracereader.commands import explain


def refused(capsys, *argv) -> str:
    assert explain.main([*map(str, argv)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    return captured.err


def test_the_trace_itself_is_never_overwritten(tmp_path, capsys):
    trace = tmp_path / "t.json.gz"
    shutil.copy(TRACE, trace)
    before = trace.read_bytes()
    err = refused(capsys, trace, "--memory", "--memory-png", trace)
    assert "is the trace being read" in err
    assert trace.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["t.json.gz"]


def test_a_link_is_refused_and_what_it_points_at_stays(tmp_path, capsys):
    target = tmp_path / "mine.txt"
    target.write_text("keep me")
    link = tmp_path / "plot.png"
    link.symlink_to(target)
    assert "is a link" in refused(capsys, TRACE, "--memory", "--memory-png", link)
    assert link.is_symlink() and target.read_text() == "keep me"


def test_a_fifo_and_a_device_are_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(capsys, TRACE, "--memory", "--memory-png", fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert "not a regular file" in refused(capsys, TRACE, "--memory", "--memory-png", os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # /dev/null is still the device


def test_an_empty_name_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "is empty" in refused(capsys, TRACE, "--memory", "--memory-png", "")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_the_png_replaces_a_regular_file_with_the_users_umask(tmp_path, capsys, umask):
    png = tmp_path / "plot.png"
    png.write_bytes(b"the previous plot")
    old = os.umask(umask)
    try:
        assert explain.main([str(TRACE), "--memory", "--memory-png", str(png)]) == 0
    finally:
        os.umask(old)
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert stat.S_IMODE(png.stat().st_mode) == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["plot.png"]
