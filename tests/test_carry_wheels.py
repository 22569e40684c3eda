"""tools/carry_wheels.py: the wheel set cut into parts, carried one call at a time, joined and
installed; a missing or damaged part refused in one line. Small fake wheels stand in for the
real set (PyPI is not needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import ROOT, load_script

carry = load_script("tools.carry_wheels")


def fake_wheel(folder, name: str, payload: bytes):
    """A wheel pip accepts: one module holding `payload` (incompressible, so parts are real)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-1.0.dist-info"
    path = folder / f"{name}-1.0-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"ORIGIN = 'fake-wheel'\n",
        f"{name}/blob.bin": payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{dist}/RECORD", record)
    return path


@pytest.fixture
def packed(tmp_path):
    import os

    wheels = tmp_path / "wheels"
    fake_wheel(wheels / "main", "fakecute", os.urandom(300_000))
    fake_wheel(wheels / "main", "fakequack", os.urandom(50_000))
    fake_wheel(wheels / "fa4b18", "fakeflash", os.urandom(20_000))
    folders = carry.pack(wheels, tmp_path / "out", part_mib=0.15)
    return wheels, folders


def run(*argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.carry_wheels", *map(str, argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_parts_fit_the_limit_and_rejoin_into_the_same_wheels(packed, tmp_path):
    wheels, folders = packed
    assert len(folders) == 3  # 370 kB in parts of at most 0.15 MiB
    assert all(f.stat().st_size <= 0.15 * (1 << 20) for d in folders for f in d.glob("*.tar.*"))
    store = tmp_path / "store"
    for folder in folders:
        manifest = carry.gather(folder, store)
    joined = carry.reassemble(manifest, store, tmp_path / "joined")
    assert sorted(joined) == ["fa4b18", "main"]
    for group, paths in joined.items():
        for path in paths:
            assert path.read_bytes() == (wheels / group / path.name).read_bytes()


def test_install_refuses_while_a_part_is_missing(packed, tmp_path):
    _, folders = packed
    store, target = tmp_path / "store", tmp_path / "site"
    proc = run("install", folders[0], "--store", store, "--target", target)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "missing part(s) wheels.tar.2, wheels.tar.3" in (
        proc.stderr
    )
    assert not target.exists()


def test_install_leaves_a_folder_it_did_not_fill_alone(packed, tmp_path):
    """--target pointed at a folder of someone else's (a site-packages): refused, untouched."""
    _, folders = packed
    store, target = tmp_path / "store", tmp_path / "site-packages"
    target.mkdir()
    (target / "theirs.py").write_text("kept = True\n")
    for folder in folders:
        proc = run("install", folder, "--store", store, "--target", target)
    assert proc.returncode == 2 and "did not install" in proc.stderr
    assert sorted(p.name for p in target.iterdir()) == ["theirs.py"]


def test_a_damaged_part_is_refused_and_not_kept(packed, tmp_path):
    _, folders = packed
    part = next(folders[1].glob("wheels.tar.*"))
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    store = tmp_path / "store"
    proc = run("gather", folders[1], "--store", store)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "sha256 differs" in proc.stderr
    assert not (store / part.name).exists()


def test_parts_of_another_pack_are_not_joined(packed, tmp_path):
    wheels, folders = packed
    store = tmp_path / "store"
    carry.gather(folders[0], store)
    fake_wheel(wheels / "main", "fakeextra", b"x" * 1000)  # a new pack: other parts
    newer = carry.pack(wheels, tmp_path / "newer", part_mib=0.15)
    manifest = carry.gather(newer[1], store)
    assert carry.missing_parts(manifest, store) == ["wheels.tar.1", "wheels.tar.3"]


def test_gathered_parts_install_with_pip_into_two_targets(packed, tmp_path):
    if shutil.which("uv") is None:
        try:
            import pip  # noqa: F401
        except ImportError:
            pytest.skip("neither pip nor uv to install with")
    _, folders = packed
    store, target = tmp_path / "store", tmp_path / "site"
    for folder in folders[:-1]:
        assert run("gather", folder, "--store", store).returncode == 0
    proc = run("install", folders[-1], "--store", store, "--target", target)
    assert proc.returncode == 0, proc.stderr
    assert (target / "fakecute" / "__init__.py").exists()
    assert (target / "fakequack" / "blob.bin").exists()
    assert not (target / "fakeflash").exists()  # the side wheel has a target of its own
    assert (tmp_path / "site-fa4b18" / "fakeflash" / "__init__.py").exists()
    assert f"export PYTHONPATH={target}:" in proc.stdout
    again = run("install", folders[-1], "--store", store, "--target", target)
    assert again.returncode == 0 and "already installed" in again.stdout


def test_pack_of_an_empty_folder_is_refused_and_writes_nothing(tmp_path):
    proc = run("pack", "--wheels", tmp_path / "none", "--out", tmp_path / "out")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()
