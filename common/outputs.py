"""Where a run's files go, and writing them so that a failure leaves nothing behind.

A run's folder is checked before any work (can it be created, are the names legal there) but
only created when the files are written. Files are written into a private temporary folder
beside their final place, checked, then renamed into place together; on any failure the
temporary folder, and any folder the run created, are removed.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from common.cli import Run, UsageError, failure

DEFAULT_SCHEDULE = (1, 1, 3)  # wait, warmup, active: the posts' schedule
PARTIAL_PREFIX = ".partial-"  # the temporary folder's name starts with this
# The profiler writes the path it was given as the trace's name, its last key: the temporary one
TRACE_NAME = re.compile(r'"traceName"\s*:\s*"(?:[^"\\]|\\.)*"')
TAIL = 1 << 16  # characters held back at the end of a trace while stamping: the name is there


@dataclass(frozen=True)
class Outputs:
    trace: Path
    table: Path


def run_tag(
    shape: str,
    args: argparse.Namespace,
    run: Run,
    *,
    extra: str | None = None,
    default_schedule: tuple[int, int, int] = DEFAULT_SCHEDULE,
) -> str:
    """The file stem: the script's shape, then everything else that changes the trace.

    On a GPU with the lesson's default schedule this is exactly the posts' naming,
    e.g. `64_bf16_cold_eager`; CPU runs and other schedules get a suffix so
    they never overwrite a GPU trace. Every lesson names its files before any work: where
    --bucket asks to share them, what sharing needs is checked here too (check_sharing).
    """
    check_sharing(args)
    parts = [shape, run.dtype_name] + ([extra] if extra else [])
    parts.append("compile" if args.compile else "eager")
    schedule = (args.wait, args.warmup_steps, args.active)
    if schedule != default_schedule:
        parts.append("w{}-{}-{}".format(*schedule))
    if not run.on_gpu:
        parts.append("cpu")
    return "_".join(parts)


def check_sharing(args: argparse.Namespace) -> None:
    """--bucket NAME: huggingface_hub imports and a Hugging Face token is there (HF_TOKEN, or
    the one `hf auth login` saved), checked before any work; UsageError (one line, exit code 2)
    where not, rather than after a whole run. The Hub itself is reached only after the run."""
    bucket = getattr(args, "bucket", None)
    if bucket is None:
        return
    try:
        import huggingface_hub as hf
    except ImportError as err:
        raise UsageError(
            f"--bucket {bucket}: huggingface_hub does not import ({err}); install it "
            "(uv sync) or run without --bucket"
        ) from None
    if not hf.get_token():
        raise UsageError(
            f"--bucket {bucket}: no Hugging Face token (run `hf auth login` or set HF_TOKEN); "
            "checked before the run, nothing was done"
        )


def stamp(trace: Path, meta: dict, *, name: str | None = None) -> bool:
    """Add top-level keys to an exported Chrome trace, in place, and give its traceName as
    `name` (the final path: the profiler wrote the temporary one); False (and the file
    untouched) when it does not start as a JSON object, which the read-back then reports. The
    profiler records the device but not torch's version, and a compiled run is checked against
    an eager trace only when both came from the same device and torch (common.profiling.look).

    Raises UsageError for a trace cut short (no closing brace, or a gzip stream that stops): on
    a full disk the profiler's exporter stops writing without an error. A write the disk
    refused raises its OSError (the runner says it in one line)."""
    opener = gzip.open if trace.name.endswith(".gz") else open
    keys = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in meta.items())
    stamped = trace.with_name(f".stamped-{trace.name}")
    cut_short = UsageError(
        f"cannot write {name or trace}: the profiler's export stopped short of the trace's end "
        "(a full disk?)"
    )
    try:
        with opener(trace, "rt", encoding="utf-8") as src:
            head = src.read(4096)
            if not head.lstrip().startswith("{"):
                return False
            with opener(stamped, "wt", encoding="utf-8") as dst:
                brace = head.index("{")
                rest = head[brace + 1 :]
                empty = rest.lstrip().startswith("}")  # only a stand-in is ever empty
                dst.write(head[: brace + 1] + keys + ("" if empty else ", "))
                tail = _copy_but_the_tail(rest, src, dst)
                if not tail.rstrip().endswith("}"):
                    raise cut_short
                dst.write(_renamed(tail, name))
    except EOFError:  # a gzip stream that stops before its end
        stamped.unlink(missing_ok=True)
        raise cut_short from None
    except (OSError, UnicodeDecodeError) as err:  # not gzip after all, or not text
        stamped.unlink(missing_ok=True)
        if isinstance(err, OSError) and failure(err) is not None:
            raise  # a full disk, a quota: the stamp could not be written
        return False
    except BaseException:
        stamped.unlink(missing_ok=True)
        raise
    os.replace(stamped, trace)
    return True


def _copy_but_the_tail(first: str, src, dst) -> str:
    """`first`, then the rest of src, into dst, all but the last TAIL characters: returned."""
    held = first
    while chunk := src.read(1 << 20):
        held += chunk
        if len(held) > TAIL:
            dst.write(held[:-TAIL])
            held = held[-TAIL:]
    return held


def _renamed(tail: str, name: str | None) -> str:
    """The end of a trace with its (last) traceName set to `name`."""
    found = list(TRACE_NAME.finditer(tail)) if name is not None else []
    if not found:
        return tail
    last = found[-1]
    return f'{tail[: last.start()]}"traceName": {json.dumps(name)}{tail[last.end() :]}'


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # e.g. a name too long to even look up
        return False


def _existing_ancestor(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if _exists(candidate):
            return candidate
    return Path(".")


def check_writable(folder: Path, names: list[str]) -> None:
    """Prove, before expensive work and without leaving anything, that `names` can be written
    into `folder` (which may not exist yet): the nearest existing ancestor is a writable
    folder, and every name that would be created fits the file system's limits."""
    where = f"cannot write to {folder}"
    for candidate in [folder.absolute(), *folder.absolute().parents]:
        if os.path.islink(candidate) and not _exists(candidate):
            raise UsageError(
                f"{where}: {candidate} is a link that leads nowhere (dangling, or a loop of links)"
            )
    for name in names:  # what is there now is replaced: a file may be, a folder cannot
        there = folder / name
        if os.path.lexists(there) and not os.path.isfile(there):
            raise UsageError(f"{where}: {there} is there and is not a file; move it away")
    base = _existing_ancestor(folder.absolute())
    if not base.is_dir():
        raise UsageError(f"{where}: {base} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
        name_max = os.pathconf(base, "PC_NAME_MAX")
        path_max = os.pathconf(base, "PC_PATH_MAX")
    except OSError as err:
        raise UsageError(f"{where}: {err.strerror or err}") from None
    temp_dir = f"{PARTIAL_PREFIX}{os.getpid()}-xxxxxxxx"
    created = folder.absolute().relative_to(base).parts
    for name in [*created, temp_dir, *names]:
        if len(os.fsencode(name)) > name_max:
            raise UsageError(
                f"{where}: the name {name[:40]!r}... is longer than the {name_max} bytes "
                "this file system allows; use shorter sizes or a shorter folder"
            )
    longest = folder.absolute() / temp_dir / max(names, key=len)
    if len(os.fsencode(str(longest))) >= path_max:
        raise UsageError(f"{where}: the path would exceed {path_max} bytes; use a shorter folder")


def prepare(traces_dir: str, script: str, tag: str, *, gzip: bool) -> Outputs:
    folder = Path(traces_dir) / script
    suffix = ".json.gz" if gzip else ".json"
    outputs = Outputs(trace=folder / f"{tag}{suffix}", table=folder / f"{tag}.txt")
    check_writable(folder, [outputs.trace.name, outputs.table.name])
    return outputs


@contextmanager
def folder_for_rows(traces_dir: str, script: str) -> Iterator[Path]:
    """A folder for outputs written as they come (the sweep's rows): checked, created, and held
    by this run alone while the block runs; the folders it created are removed again if the
    run left nothing in them (a sweep stopped before its first row).

    One writer at a time: a second run into the same folder is refused in one line, before
    any work, rather than writing its rows into the same CSV between the first one's (and
    two sweeps at once on one machine would also time each other). The hold is an flock on
    the folder itself: no lock file to leave behind, released by the kernel when the process
    ends however it ends.
    """
    folder = Path(traces_dir) / script
    check_writable(folder, ["x" * 64])
    created = _missing_folders(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        held = os.open(folder, os.O_RDONLY)
    except OSError as err:
        raise UsageError(f"cannot write to {folder}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"another run is writing into {folder} now (its rows and these would "
                "interleave): wait for it to finish, or give another --traces-dir"
            ) from None
        yield folder
    finally:
        os.close(held)
        for made in created:  # deepest first; a folder with anything in it stays
            try:
                made.rmdir()
            except OSError:
                break


def _missing_folders(folder: Path) -> list[Path]:
    """The folders that `mkdir(parents=True)` would create, deepest first."""
    missing = []
    for candidate in [folder, *folder.parents]:
        if _exists(candidate):
            break
        missing.append(candidate)
    return missing


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def remove_dead_partials(folder: Path) -> None:
    """Remove the temporary folders (`.partial-<pid>-*`) that runs killed outright (SIGKILL, a
    power cut) left in `folder`: those whose process is gone. A live run's is never touched."""
    for partial in folder.glob(f"{PARTIAL_PREFIX}*-*"):
        pid = partial.name.removeprefix(PARTIAL_PREFIX).partition("-")[0]
        if pid.isdigit() and len(pid) < 10 and partial.is_dir() and not partial.is_symlink():
            if int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def publishing(
    *finals: Path, agree: Callable[[BaseException | None], None] | None = None
) -> Iterator[list[Path]]:
    """Yield temporary paths for `finals`; publish them all only if the block succeeds.

    Each temporary path keeps its final name (torch gzips a trace whose name ends in .gz),
    inside a private folder beside the finals, so whatever a writer leaves next to its file
    (the profiler writes `<name>.tmp` first) is removed with the folder. After the block each
    file must exist and be non-empty: the profiler's exporter can fail without raising. The
    renames are undone if one of them fails, and folders the run created are removed again.

    `agree` is for one process of many that publish together (the ranks of a torchrun
    launch): it is called with None once this process's files are written and checked, and
    must return only if every process's were too (raising otherwise); it is called with the
    error when this process's block fails, to tell the others. Nothing is renamed into place
    until it has returned.
    """
    folder = finals[0].parent
    created = _missing_folders(folder.absolute())
    published: list[Path] = []
    temp_dir = None
    asked = False  # agree was called: it must not be called a second time
    tempdir_before = tempfile.tempdir
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_dead_partials(folder)
        temp_dir = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{os.getpid()}-", dir=folder))
        temps = [temp_dir / final.name for final in finals]
        # The profiler gzips through an uncompressed temporary JSON in TMPDIR: made here, it
        # goes with the folder whatever stops the run, and lands on the traces' own disk.
        tempfile.tempdir = str(temp_dir)
        try:
            yield temps
        finally:
            tempfile.tempdir = tempdir_before
        for temp, final in zip(temps, finals, strict=True):
            if not temp.is_file() or temp.stat().st_size == 0:
                raise OSError(f"{temp.name} was not written (the writer reported no error)")
            if temp.name.endswith((".json", ".json.gz")):
                stamp(temp, {"torch_version": torch.__version__}, name=str(final))
        if agree is not None:
            asked = True
            agree(None)
        for temp, final in zip(temps, finals, strict=True):
            os.replace(temp, final)
            published.append(final)
    except BaseException as err:
        for path in published:
            path.unlink(missing_ok=True)
        if agree is not None and not asked:
            try:
                agree(err)
            except Exception:
                pass  # the others time out instead; this process's own error is the one to raise
        raise
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        if len(published) < len(finals):
            for path in created:  # deepest first; only if nothing else was put there
                try:
                    path.rmdir()
                except OSError:
                    break
