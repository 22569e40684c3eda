"""Where a Hub kernel came from, and what happens when the Hub cannot be reached.

The kernels library's `get_kernel` looks, in order, at the LOCAL_KERNELS override, then (with
HF_HUB_OFFLINE=1) the local Hub cache, else the Hub itself. `load` calls a lesson's own fetch
(the post's `get_kernel(...)` line, kept in the lesson) and, when all of that fails, hands the
reason to the lesson's fallback: a PyPI package with the same code (`liger_layers`: the
liger-kernel package), or one line saying how to get the kernel (`no_fallback`: FlashAttention,
which PyPI has only as source to compile).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType, SimpleNamespace
from typing import TypeVar

from huggingface_hub import constants

from common.cli import UsageError, one_line

T = TypeVar("T")


def hub_source(repo_id: str) -> str:
    """Say which of get_kernel's sources answered, the way the kernels library picks them."""
    for entry in os.environ.get("LOCAL_KERNELS", "").split(":"):
        name, _, path = entry.partition("=")
        if name == repo_id and path:
            return f"{repo_id} from the LOCAL_KERNELS override ({path})"
    if constants.HF_HUB_OFFLINE:
        return f"{repo_id} from the local Hub cache (HF_HUB_OFFLINE=1)"
    return f"{repo_id} from the Hugging Face Hub"


class _Held(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _kernels_logs_held() -> Iterator[_Held]:
    """Hold back what the kernels library logs while loading: with no logging configured,
    Python would print it to stderr, a second line beside a refusal's one."""
    logger = logging.getLogger("kernels")
    held, propagate = _Held(), logger.propagate
    logger.addHandler(held)
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(held)
        logger.propagate = propagate


def _short(reason: str, limit: int = 160) -> str:
    return reason if len(reason) <= limit else reason[: limit - 3].rsplit(" ", 1)[0] + "..."


def load(
    fetch: Callable[[], T], repo_id: str, *, fallback: Callable[[str], tuple[T, str]]
) -> tuple[T, str]:
    """Return (what `fetch` returned, where it came from), or `fallback(reason)` when `fetch`
    fails; the fallback returns the same pair or raises UsageError (one line, exit 2). What
    the kernels library logs is printed as a note on success and dropped on failure, where the
    reason says it."""
    with _kernels_logs_held() as held:
        try:
            found = fetch()
        except Exception as err:  # no network, cold cache, refused trust check, no build variant
            reason = _short(one_line(err, 1000))
        else:
            for record in held.records:
                print(f"kernels: note: {record.getMessage()}")
            return found, hub_source(repo_id)
    return fallback(reason)


def no_fallback(repo_id: str, why: str) -> Callable[[str], tuple]:
    """A fallback that refuses in one line: what failed, why nothing else stands in, and the
    two ways to get the kernel onto this machine."""

    def refuse(reason: str) -> tuple:
        raise UsageError(
            f"could not load {repo_id} ({reason}); {why}. To get it: run once with network "
            f"access (the Hub cache then serves HF_HUB_OFFLINE=1 runs), or point LOCAL_KERNELS "
            f"at a local copy of the kernel repository: LOCAL_KERNELS={repo_id}=/path/to/it"
        )

    return refuse


def _liger_from_pypi(repo_id: str, reason: str) -> tuple[ModuleType, str]:
    try:
        from liger_kernel.transformers.geglu import LigerGEGLUMLP

        release = version("liger-kernel")
    except (ImportError, PackageNotFoundError):
        raise UsageError(
            f"could not load {repo_id} ({reason}), and the liger-kernel package "
            "is not installed to fall back on"
        ) from None
    return (
        SimpleNamespace(LigerGEGLUMLP=LigerGEGLUMLP),
        f"LigerGEGLUMLP from liger-kernel {release} (PyPI), because {repo_id} could not "
        f"be loaded ({reason})",
    )


def liger_layers(fetch: Callable[[], ModuleType], repo_id: str) -> tuple[ModuleType, str]:
    """Return (layers, where they came from): the Hub's via `fetch`, else liger-kernel's."""
    return load(fetch, repo_id, fallback=lambda reason: _liger_from_pypi(repo_id, reason))
