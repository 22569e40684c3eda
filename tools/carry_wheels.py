"""Carry the Hopper wheel set (FlashAttention-4, QuACK, CuTe DSL) to a GPU machine that has no
network, in parts small enough for one call each, and install it there.

The set is pinned to what ran on torch 2.11 + CUDA 13 (the lent GPU machines' image, Python 3.12).
Its CUDA 13 CuTe-DSL library wheel alone is 84 MiB, more than one call carries beside the
working tree, so `pack` bundles the wheels into one uncompressed tar (the wheels are already
zip-compressed) and cuts it into parts of at most --part-mib, each in its own folder with a
manifest of every part's and every wheel's sha256:

    uv run python -m tools.carry_wheels pack              # here, with PyPI: .gpu/wheels/part1 ...

On the GPU machine, one call per part, while the machine stays warm (files under /tmp outlive a
call there; the working tree is sent afresh each time, carried paths replaced):

    python3 -m tools.carry_wheels gather .gpu/wheels/part1    (call 1, carry .gpu/wheels/part1)
    python3 -m tools.carry_wheels install .gpu/wheels/part2   (call 2, carry .gpu/wheels/part2)

`gather` checks a part against the manifest and keeps it in --store; `install` does the same,
then refuses (exit 2) unless every part is there and matches, joins them, checks each wheel and
installs with `pip install --no-index --no-deps --target`: flash-attn-4 4.0.0b36 with the rest
into --target, 4.0.0b18 alone into --target + "-fa4b18" (torch 2.11's SDPA route unpacks two
values from FA4's forward, which b19 and later no longer return). It prints the PYTHONPATH to
use: nvidia-cutlass-dsl puts its `cutlass` package on sys.path from a .pth file, which
PYTHONPATH does not read, so its dsl_packages folder is named there too.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tracereader import NotRegular, Parser, UsageError, one_line, read_regular, run

ROOT = Path(__file__).resolve().parent.parent
# What ran on an H100 with torch 2.11.0+cu130 (see README, "Hopper's own kernels"). cu13 only:
# the GPU machines run CUDA 13; a CUDA 12 user installs the -libs-cu12 wheel instead.
WHEELS = (
    "nvidia-cutlass-dsl==4.6.2",
    "nvidia-cutlass-dsl-libs-base==4.6.2",
    "nvidia-cutlass-dsl-libs-core==4.6.2",
    "nvidia-cutlass-dsl-libs-cu13==4.6.2",
    "quack-kernels==0.6.4",
    "flash-attn-4==4.0.0b36",
    "apache-tvm-ffi==0.1.15.post2",
    "torch-c-dlpack-ext==0.1.5",
    # Not in the GPU image either: the kernels library, which 04_d imports (as the post does).
    "kernels==0.17.2",
    "tomlkit==0.15.2",
)
# Installed into a target of its own: two versions of one package in one target break it.
SIDE_WHEELS = {"fa4b18": "flash-attn-4==4.0.0b18"}
GROUPS = ("main", *SIDE_WHEELS)  # the folders of a bundle; each is one install target
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:")
PLATFORM_TAGS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64")
BUNDLE = "wheels.tar"
MANIFEST = "manifest.json"
MiB = 1 << 20
# A manifest is treated as hostile input: every name in it becomes a path, every number a size.
MAX_MANIFEST_BYTES = MiB  # pack writes ~2 kB; a larger file is not one of its manifests
MAX_BUNDLE_BYTES = 2 << 30  # the set is ~200 MiB; the parts are joined in memory
MAX_PARTS = 1_000
PART_NAME = re.compile(rf"{re.escape(BUNDLE)}\.([1-9][0-9]{{0,3}})")  # wheels.tar.N, nothing else
# <group>/<file>.whl: one folder level, plain names (no `..`, no `/`, no leading dot or dash)
WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*/[A-Za-z0-9][A-Za-z0-9_.+-]*\.whl")
SHA256 = re.compile(r"[0-9a-f]{64}")
HOME = Path("/tmp/profiling-pytorch-wheels")  # the defaults: /tmp outlives a call there
STORE_MARK = ".carry_wheels_store"  # written into a --store this tool made; nothing else is ours
INSTALLED = ".carry_wheels_installed"  # in each target: the files install made, all it removes
MAX_RECORD_BYTES = 64 * MiB  # the set installs ~10,000 files; a record is a list of their paths


class Refusal(UsageError):
    """One line on stderr, exit 2."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(MiB), b""):
            digest.update(block)
    return digest.hexdigest()


# --- pack (here, with PyPI) -------------------------------------------------------------------


def download(dest: Path) -> None:
    """pip download the pinned set for linux x86_64 / CPython 3.12, no dependencies (the GPU
    image already holds torch, numpy, einops, cuda-bindings, protobuf and typing-extensions)."""
    tags = [arg for tag in PLATFORM_TAGS for arg in ("--platform", tag)]
    for group, specs in [("main", WHEELS), *((g, (s,)) for g, s in SIDE_WHEELS.items())]:
        cmd = [*download_command(), "download", "--no-deps", *PLATFORM, *tags, "--platform", "any"]
        cmd += ["-d", str(dest / group), *specs]
        print(f"download: {' '.join(specs)}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise Refusal(f"pip download {' '.join(specs)} failed: {' '.join(tail)}")


def download_command() -> list[str]:
    """A pip that can download (uv has no `pip download`): this Python's, else one on PATH."""
    candidates = [[sys.executable, "-m", "pip"]]
    candidates += [[found] for found in map(shutil.which, ("pip3", "pip")) if found]
    for cmd in candidates:
        if subprocess.run([*cmd, "--version"], capture_output=True).returncode == 0:
            return cmd
    raise Refusal("pack needs pip to download: run it with a Python that has pip (python3 ...)")


def pip_command() -> list[str]:
    """`python -m pip` where pip is importable, else uv's pip (uv venvs ship without pip)."""
    try:
        import pip  # noqa: F401
    except ImportError:
        if shutil.which("uv"):
            return ["uv", "pip"]
        raise Refusal("neither pip nor uv is available to install or download wheels") from None
    return [sys.executable, "-m", "pip"]


def pack(wheels_dir: Path, out: Path, part_mib: float) -> list[Path]:
    """Bundle wheels_dir/<group>/*.whl into parts of at most part_mib MiB under out/partN/, each
    with the manifest; returns the part folders."""
    size = part_bytes(part_mib)
    wheels = sorted(wheels_dir.glob("*/*.whl"))
    if not wheels:
        raise Refusal(f"no wheels under {wheels_dir}/<group>/ to pack")
    for wheel in wheels:
        if not WHEEL_NAME.fullmatch(f"{wheel.parent.name}/{wheel.name}"):
            raise Refusal(f"{wheel}: not a name pack carries (<group>/<name>.whl, plain names)")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=f"{wheel.parent.name}/{wheel.name}")
    bundle = buffer.getvalue()
    chunks = [bundle[i : i + size] for i in range(0, len(bundle), size)]
    manifest = {
        "bundle_sha256": sha256(bundle),
        "parts": [
            {"name": f"{BUNDLE}.{i}", "bytes": len(c), "sha256": sha256(c)}
            for i, c in enumerate(chunks, 1)
        ],
        "wheels": {
            f"{w.parent.name}/{w.name}": {"bytes": w.stat().st_size, "sha256": file_sha256(w)}
            for w in wheels
        },
    }
    if len(chunks) > MAX_PARTS:
        raise Refusal(
            f"{len(chunks)} parts of {part_mib} MiB: more than {MAX_PARTS}, raise --part-mib"
        )
    for old in out.glob("part*"):  # an earlier pack's parts; nothing else of the folder's
        remove_own_part(old)
    for i in range(1, len(chunks) + 1):
        if (out / f"part{i}").exists():
            raise Refusal(
                f"{out / f'part{i}'} holds files pack did not write: choose another --out"
            )
    folders = []
    for i, chunk in enumerate(chunks, 1):
        folder = out / f"part{i}"
        folder.mkdir(parents=True)
        (folder / f"{BUNDLE}.{i}").write_bytes(chunk)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        folders.append(folder)
        print(f"pack: {folder} ({len(chunk) / MiB:.1f} MiB)")
    return folders


def part_bytes(part_mib: float) -> int:
    if not (math.isfinite(part_mib) and 0 < part_mib * MiB <= MAX_BUNDLE_BYTES):
        raise Refusal(
            f"--part-mib must be a finite number above 0 and at most {MAX_BUNDLE_BYTES // MiB}, "
            f"got {part_mib}"
        )
    return max(1, int(part_mib * MiB))


def remove_own_part(folder: Path) -> None:
    """Remove a part folder an earlier pack wrote: only a real folder holding exactly a
    manifest and wheels.tar.N files; anything else is left as it is."""
    if folder.is_symlink() or not folder.is_dir():
        return
    names = {p.name for p in folder.iterdir()}
    ours = MANIFEST in names and all(n == MANIFEST or PART_NAME.fullmatch(n) for n in names)
    if ours and not any((folder / n).is_symlink() or not (folder / n).is_file() for n in names):
        for name in names:
            (folder / name).unlink()
        folder.rmdir()


# --- gather and install (on the GPU machine) --------------------------------------------------


def read_manifest(folder: Path) -> dict:
    """The part folder's manifest, refused in one line unless it is exactly what pack writes:
    names that stay inside the folders they name, sizes and checksums of the right form."""
    path = folder / MANIFEST
    try:
        raw = read_small(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise Refusal(f"{path} is missing: pass a part folder that `pack` wrote") from None
    except OSError as err:
        raise Refusal(f"{path} cannot be read ({err.strerror or err})") from None
    if raw is None:
        raise Refusal(f"{path} cannot be read: not a regular file (a FIFO, a device, a folder)")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise Refusal(f"{path} is larger than {MAX_MANIFEST_BYTES // 1024} kB: not a manifest")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refusal(f"{path} is not UTF-8: not a manifest that `pack` wrote") from None
    except (ValueError, RecursionError) as err:  # bad JSON, nesting bombs, 5,000-digit numbers
        raise Refusal(f"{path} is not a manifest that `pack` wrote ({one_line(err)})") from None
    problem = manifest_problem(manifest)
    if problem:
        raise Refusal(f"{path} is not a manifest that `pack` wrote: {problem}")
    return manifest


def read_small(path: Path, limit: int) -> bytes | None:
    """At most limit + 1 bytes of `path`; None where it is no regular file (a FIFO would hang
    the open, /dev/zero never end: tracereader.read_regular)."""
    try:
        return read_regular(path, limit)
    except NotRegular:
        return None


def _size_problem(where: str, value) -> str | None:
    if type(value) is not int or not 0 <= value <= MAX_BUNDLE_BYTES:
        return f"{where} must be a whole number of bytes from 0 to {MAX_BUNDLE_BYTES}"
    return None


def _sha_problem(where: str, value) -> str | None:
    if not isinstance(value, str) or not SHA256.fullmatch(value):
        return f"{where} must be 64 lowercase hex digits"
    return None


def manifest_problem(manifest) -> str | None:
    """What makes `manifest` other than pack's: its types, keys, names, sizes; None if sound."""
    if not isinstance(manifest, dict) or set(manifest) != {"bundle_sha256", "parts", "wheels"}:
        return "expected an object with bundle_sha256, parts and wheels"
    parts, wheels = manifest["parts"], manifest["wheels"]
    if problem := _sha_problem("bundle_sha256", manifest["bundle_sha256"]):
        return problem
    if not isinstance(parts, list) or not 0 < len(parts) <= MAX_PARTS:
        return f"parts must be a list of 1 to {MAX_PARTS} parts"
    for i, part in enumerate(parts, 1):
        if not isinstance(part, dict) or set(part) != {"name", "bytes", "sha256"}:
            return f"part {i} must be an object with name, bytes and sha256"
        if part["name"] != f"{BUNDLE}.{i}":
            return f"part {i} must be named {BUNDLE}.{i}, not {str(part['name'])[:60]!r}"
        if problem := _size_problem(f"part {i}'s bytes", part["bytes"]):
            return problem
        if problem := _sha_problem(f"part {i}'s sha256", part["sha256"]):
            return problem
    if sum(p["bytes"] for p in parts) > MAX_BUNDLE_BYTES:
        return f"the parts add up to more than {MAX_BUNDLE_BYTES} bytes"
    if not isinstance(wheels, dict) or not wheels:
        return "wheels must be an object of <group>/<name>.whl entries"
    for name, want in wheels.items():
        if not WHEEL_NAME.fullmatch(name) or name.split("/")[0] not in GROUPS:
            return f"wheel {name[:60]!r} is not a plain <group>/<name>.whl inside the bundle"
        if not isinstance(want, dict) or set(want) != {"bytes", "sha256"}:
            return f"wheel {name} must be an object with bytes and sha256"
        if problem := _size_problem(f"wheel {name}'s bytes", want["bytes"]) or _sha_problem(
            f"wheel {name}'s sha256", want["sha256"]
        ):
            return problem
    return None


def open_store(store: Path, manifest: dict) -> None:
    """Make `store` ready for `manifest`'s parts, deleting nothing this tool did not write.

    A new store gets a mark; an existing folder without the mark holds someone else's files
    and is refused. A store of ours that holds another pack's parts loses those parts (the
    names its own, checked, manifest lists) and that manifest, one file at a time.
    """
    private_folder(store, "--store", make=False)
    if store.is_symlink() or (store.exists() and not store.is_dir()):
        raise Refusal(f"--store {store} is not a folder this tool made: choose another")
    mark = store / STORE_MARK
    if store.is_dir() and any(store.iterdir()) and not (mark.is_file() and not mark.is_symlink()):
        raise Refusal(f"--store {store} holds files this tool did not write: choose another")
    private_folder(store, "--store", make=True)
    mark.touch()
    stored = store / MANIFEST
    if not stored.exists():
        return
    try:
        old = read_manifest(store)
    except Refusal:
        old = None
    if old == manifest:
        return
    # another pack's parts: start over rather than join parts of two bundles
    for part in old["parts"] if old else []:
        path = store / part["name"]
        if path.is_file() or path.is_symlink():
            path.unlink()
    stored.unlink()
    print(f"gather: {store} held another pack's parts; removed them")


def private_folder(path: Path, flag: str, *, make: bool) -> None:
    """Below a folder anyone can write (/tmp: sticky, root's), every folder down to `path` must
    be a real folder of this user that nobody else can write: another user could have made it
    first, to swap the wheels. Refused naming `flag`; made so (0700) where `make`."""
    path = Path(os.path.abspath(path))
    chain = [path, *path.parents]
    anyone = [p.exists() and p.stat().st_mode & stat.S_IWOTH for p in chain]
    shared = next((i for i, yes in enumerate(anyone) if i and yes), None)
    if shared is None:
        if make:
            path.mkdir(parents=True, exist_ok=True)
        return
    for folder in reversed(chain[: shared + 1]):
        top = folder == chain[shared]  # where anyone can write: a temp folder, or refused
        if make and not top:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            return  # nor anything below it: made private when it is made
        mode = info.st_mode
        why = (
            "is a link" if stat.S_ISLNK(mode)
            else "is not a folder" if not stat.S_ISDIR(mode)
            else "belongs to another user" if info.st_uid not in (os.getuid(), *[0] * top)
            else "can be written by others" if mode & 0o022 and not (top and mode & stat.S_ISVTX)
            else None
        )  # fmt: skip
        if why:
            raise Refusal(f"{folder} {why}, and {chain[shared]} by anyone: pass a {flag} "
                          "folder of your own (e.g. under your home)")  # fmt: skip


def write_atomically(path: Path, data_from: Path | None = None, text: str | None = None) -> None:
    """Write (copy `data_from`, or `text`) to path through a new file in its folder, then rename
    it over path. mkstemp creates it (O_CREAT | O_EXCL, a random name): a link planted at a
    predictable temporary name would be written through, to anywhere. No half file stays."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            if data_from is not None:
                with data_from.open("rb") as source:
                    shutil.copyfileobj(source, out, MiB)
            else:
                out.write((text or "").encode())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def gather(folder: Path, store: Path) -> dict:
    """Check the part(s) in `folder` against the manifest and copy them into `store`; returns
    the manifest. A part whose checksum differs is refused, not kept."""
    manifest = read_manifest(folder)
    present = []
    for part in manifest["parts"]:
        path = folder / part["name"]
        if not path.exists():
            continue
        if not path.is_file() or path.stat().st_size != part["bytes"]:
            raise Refusal(f"{path}: not a file of the manifest's {part['bytes']} bytes")
        if file_sha256(path) != part["sha256"]:
            raise Refusal(f"{path}: sha256 differs from the manifest (a damaged or stale part)")
        present.append((path, part))
    if not present:
        raise Refusal(f"{folder} holds no part that its manifest lists")
    open_store(store, manifest)
    found = 0
    for path, part in present:
        write_atomically(store / part["name"], data_from=path)
        found += 1
        print(f"gather: {part['name']} ok ({part['bytes'] / MiB:.1f} MiB) -> {store}")
    write_atomically(store / MANIFEST, text=json.dumps(manifest, indent=1) + "\n")
    missing = missing_parts(manifest, store)
    print(
        f"gather: {len(manifest['parts']) - len(missing)} of {len(manifest['parts'])} parts in "
        f"{store}" + (f"; still missing: {', '.join(missing)}" if missing else "")
    )
    return manifest


def missing_parts(manifest: dict, store: Path) -> list[str]:
    return [p["name"] for p in manifest["parts"] if not (store / p["name"]).exists()]


def reassemble(manifest: dict, store: Path, dest: Path) -> dict[str, list[Path]]:
    """Join the stored parts, check every checksum, extract the wheels into dest/<group>/."""
    missing = missing_parts(manifest, store)
    if missing:
        raise Refusal(
            f"missing part(s) {', '.join(missing)} in {store}: run `gather` with each part's "
            "folder first (one call per part, while the machine stays warm)"
        )
    bundle = bytearray()
    for part in manifest["parts"]:
        data = (store / part["name"]).read_bytes()
        if sha256(data) != part["sha256"]:
            raise Refusal(f"{store / part['name']}: sha256 differs from the manifest")
        bundle += data
    if sha256(bytes(bundle)) != manifest["bundle_sha256"]:
        raise Refusal("the joined parts' sha256 differs from the manifest (parts out of order?)")
    with tarfile.open(fileobj=io.BytesIO(bytes(bundle)), mode="r") as tar:
        members = tar.getmembers()
        names = {m.name for m in members if m.isfile()}
        if names != set(manifest["wheels"]) or len(members) != len(names):
            raise Refusal("the bundle holds other files than the wheels its manifest lists")
        tar.extractall(dest, filter="data")
    groups: dict[str, list[Path]] = {}
    for name, want in manifest["wheels"].items():
        wheel = dest / name
        if not wheel.is_file() or wheel.is_symlink() or file_sha256(wheel) != want["sha256"]:
            raise Refusal(f"{name}: missing from the bundle or its sha256 differs")
        groups.setdefault(wheel.parent.name, []).append(wheel)
    print(f"install: {len(manifest['wheels'])} wheels joined and checked")
    return groups


def target_for(target: Path, group: str) -> Path:
    return target if group == "main" else target.with_name(f"{target.name}-{group}")


def python_path(target: Path) -> str:
    """What PYTHONPATH needs: the target, and the folder cutlass-dsl's .pth file would add."""
    return f"{target}:{target / 'nvidia_cutlass_dsl' / 'dsl_packages'}"


def install(folder: Path, store: Path, target: Path, pip: list[str]) -> None:
    manifest = gather(folder, store)
    bundle = manifest["bundle_sha256"]
    intos = {group: target_for(target, group) for group in GROUPS}
    records = {group: installed(into) for group, into in intos.items()}  # ours, empty or absent
    if all(records[name.split("/")[0]] == bundle for name in manifest["wheels"]):
        print(f"install: already installed in {target} (same bundle)")
    else:
        private_folder(target.parent, "--target", make=True)
        # One folder for everything temporary (the wheels, pip's install and its TMPDIR, the
        # replaced install), beside the targets so that a rename moves a whole install; removed
        # however the run ends, SIGTERM included (the runner raises it here as an interrupt).
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.carry_wheels.", dir=target.parent))
        try:
            groups = reassemble(manifest, store, work / "wheels")
            for group, wheels in sorted(groups.items()):
                into, staged = intos[group], work / group
                print(f"install: {len(wheels)} wheel(s) -> {into}", flush=True)
                pip_install(pip, wheels, staged, work / "tmp")
                record = {"bundle": bundle, "paths": _tree(staged)}  # all it may remove later
                write_atomically(staged / INSTALLED, text=json.dumps(record))
                os.chmod(staged, stat.S_IMODE(os.stat(staged).st_mode) & ~0o022)  # as checked
                with signals_held():  # both renames or none: never no install between them
                    if into.exists():  # all of it ours (installed() checked): moved aside,
                        os.replace(into, work / f"old-{group}")  # removed with `work`
                    os.replace(staged, into)
        finally:
            with signals_held():  # a second Ctrl-C must not cut the removal short
                shutil.rmtree(work, ignore_errors=True)
    print(f"install: export PYTHONPATH={python_path(target)}")
    for group in SIDE_WHEELS:
        side = target_for(target, group)
        print(f"install: for {SIDE_WHEELS[group]} first: PYTHONPATH={side}:{python_path(target)}")


def pip_install(pip: list[str], wheels: list[Path], staged: Path, tmp: Path) -> None:
    """pip install `wheels` into `staged`, with TMPDIR at `tmp`: pip stopped by a signal leaves
    its pip-* folders behind, and there they go with the work folder."""
    tmp.mkdir(exist_ok=True)
    cmd = [*pip, "install", "--no-index", "--no-deps", "--target", str(staged), *map(str, wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TMPDIR": tmp})
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise Refusal(f"pip install of {len(wheels)} wheel(s) failed: {' '.join(tail)}")


@contextlib.contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP wait (blocked, not lost) until the block is done."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def installed(into: Path) -> str | None:
    """The bundle install put in `into`; None for an absent or empty folder. Refused in one
    line: a folder holding any file the record of the install there does not list (the
    user's), or no record this tool can read. So replacing it deletes only the tool's files."""
    private_folder(into, "--target", make=False)
    if into.is_symlink() or (into.exists() and not into.is_dir()):
        raise Refusal(f"{into} is not a folder this tool installed: choose another --target")
    if not into.is_dir() or not any(into.iterdir()):
        return None
    record = into / INSTALLED
    if not os.path.lexists(record):
        raise Refusal(f"{into} holds files this tool did not install: choose another --target")
    try:
        found = json.loads(read_small(record, MAX_RECORD_BYTES) or b"null")
    except (OSError, ValueError, RecursionError):
        found = None
    paths = found.get("paths") if isinstance(found, dict) and len(found) == 2 else None
    if not isinstance(paths, list) or "bundle" not in found or {type(p) for p in paths} - {str}:
        raise Refusal(f"{record} is not a record of an install by this tool (an older one's?): "
                      f"empty {into} by hand, or choose another --target")  # fmt: skip
    theirs = sorted(set(_tree(into)) - set(paths) - {INSTALLED})
    if theirs:
        raise Refusal(f"{into} holds {theirs[0]}, which this tool did not install: move it out, "
                      "or choose another --target")  # fmt: skip
    return found["bundle"]


def _tree(root: Path) -> list[str]:
    """Every path under root, relative, sorted; links are listed, never followed."""
    found = []
    for top, folders, names in os.walk(root):
        found += [(Path(top).relative_to(root) / name).as_posix() for name in folders + names]
    return sorted(found)


def parse(argv):
    parser = Parser(prog="carry_wheels.py", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="download the set (or take --wheels) and cut it into parts")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu" / "wheels")
    p.add_argument("--part-mib", type=float, default=48.0, help="largest part (default 48)")
    p.add_argument("--wheels", type=Path, help="use wheels already in WHEELS/<group>/*.whl")
    for name, what in [("gather", "keep a part"), ("install", "keep a part, then install all")]:
        q = sub.add_parser(name, help=what)
        q.add_argument("part", type=Path, help="a part folder that pack wrote (e.g. part1)")
        q.add_argument("--store", type=Path, default=HOME / "parts")
        if name == "install":
            q.add_argument("--target", type=Path, default=HOME / "site")
            q.add_argument("--pip", help="the pip to run (default: python -m pip, else uv pip)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Through the one runner (tracereader.commandline.run): a refusal, a file system that
    refuses a write (a full disk, a read-only store, a folder where a file should be) and
    Ctrl-C are one line each."""
    args = parse(argv)
    return run(lambda: carry(args), known=_file_system)


def _file_system(err: BaseException) -> tuple[int, str] | None:
    if isinstance(err, OSError) and not isinstance(err, BrokenPipeError):
        where = f" ({err.filename})" if err.filename else ""
        return 2, f"{err.strerror or err}{where}"
    return None


def carry(args) -> int:
    if args.command == "pack":
        if args.wheels:
            pack(args.wheels, args.out, args.part_mib)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                download(Path(tmp))
                pack(Path(tmp), args.out, args.part_mib)
    elif args.command == "gather":
        gather(args.part, args.store)
    else:
        pip = args.pip.split() if args.pip else pip_command()
        install(args.part, args.store, args.target, pip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
