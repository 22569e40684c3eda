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

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

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
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:")
PLATFORM_TAGS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64")
BUNDLE = "wheels.tar"
MANIFEST = "manifest.json"
MiB = 1 << 20


class Refusal(Exception):
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
    wheels = sorted(wheels_dir.glob("*/*.whl"))
    if not wheels:
        raise Refusal(f"no wheels under {wheels_dir}/<group>/ to pack")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=f"{wheel.parent.name}/{wheel.name}")
    bundle = buffer.getvalue()
    size = int(part_mib * MiB)
    if size <= 0:
        raise Refusal(f"--part-mib must be positive, got {part_mib}")
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
    for old in out.glob("part*"):  # an earlier pack's parts; nothing else of the folder's
        if (old / MANIFEST).exists():
            shutil.rmtree(old)
    folders = []
    for i, chunk in enumerate(chunks, 1):
        folder = out / f"part{i}"
        folder.mkdir(parents=True)
        (folder / f"{BUNDLE}.{i}").write_bytes(chunk)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        folders.append(folder)
        print(f"pack: {folder} ({len(chunk) / MiB:.1f} MiB)")
    return folders


# --- gather and install (on the GPU machine) --------------------------------------------------


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise Refusal(f"{path} is missing: pass a part folder that `pack` wrote") from None
    except json.JSONDecodeError as err:
        raise Refusal(f"{path} is not a manifest that `pack` wrote ({err})") from None


def gather(folder: Path, store: Path) -> dict:
    """Check the part(s) in `folder` against the manifest and copy them into `store`; returns
    the manifest. A part whose checksum differs is refused, not kept."""
    manifest = read_manifest(folder)
    stored = store / MANIFEST
    if stored.exists() and json.loads(stored.read_text()) != manifest:
        # another pack's parts: start over rather than join parts of two bundles
        print(f"gather: {store} held another pack's parts; cleared")
        shutil.rmtree(store)
    store.mkdir(parents=True, exist_ok=True)
    found = 0
    for part in manifest["parts"]:
        path = folder / part["name"]
        if not path.exists():
            continue
        if file_sha256(path) != part["sha256"]:
            raise Refusal(f"{path}: sha256 differs from the manifest (a damaged or stale part)")
        shutil.copyfile(path, store / part["name"])
        found += 1
        print(f"gather: {part['name']} ok ({part['bytes'] / MiB:.1f} MiB) -> {store}")
    if not found:
        raise Refusal(f"{folder} holds no part that its manifest lists")
    (store / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
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
        tar.extractall(dest, filter="data")
    groups: dict[str, list[Path]] = {}
    for name, want in manifest["wheels"].items():
        wheel = dest / name
        if not wheel.exists() or file_sha256(wheel) != want["sha256"]:
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
    stamp = target / ".carry_wheels_installed"
    if target.is_dir() and any(target.iterdir()) and not stamp.exists():  # not ours to replace
        raise Refusal(f"--target {target} holds files this tool did not install: choose another")
    if stamp.exists() and stamp.read_text() == manifest["bundle_sha256"]:
        print(f"install: already installed in {target} (same bundle)")
    else:
        with tempfile.TemporaryDirectory(dir=store) as tmp:
            groups = reassemble(manifest, store, Path(tmp))
            for group, wheels in sorted(groups.items()):
                into = target_for(target, group)
                if into.exists():
                    shutil.rmtree(into)
                cmd = [*pip, "install", "--no-index", "--no-deps", "--target", str(into)]
                print(f"install: {len(wheels)} wheel(s) -> {into}", flush=True)
                done = subprocess.run([*cmd, *map(str, wheels)], capture_output=True, text=True)
                if done.returncode != 0:
                    tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
                    raise Refusal(f"pip install into {into} failed: {' '.join(tail)}")
        stamp.write_text(manifest["bundle_sha256"])
    print(f"install: export PYTHONPATH={python_path(target)}")
    for group in SIDE_WHEELS:
        side = target_for(target, group)
        print(f"install: for {SIDE_WHEELS[group]} first: PYTHONPATH={side}:{python_path(target)}")


def parse(argv):
    parser = argparse.ArgumentParser(
        prog="carry_wheels.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="download the set (or take --wheels) and cut it into parts")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu" / "wheels")
    p.add_argument("--part-mib", type=float, default=48.0, help="largest part (default 48)")
    p.add_argument("--wheels", type=Path, help="use wheels already in WHEELS/<group>/*.whl")
    for name, what in [("gather", "keep a part"), ("install", "keep a part, then install all")]:
        q = sub.add_parser(name, help=what)
        q.add_argument("part", type=Path, help="a part folder that pack wrote (e.g. part1)")
        q.add_argument("--store", type=Path, default=Path("/tmp/profiling-pytorch-wheels/parts"))
        if name == "install":
            q.add_argument(
                "--target", type=Path, default=Path("/tmp/profiling-pytorch-wheels/site")
            )
            q.add_argument("--pip", help="the pip to run (default: python -m pip, else uv pip)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    try:
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
    except Refusal as err:
        print(f"carry_wheels.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
