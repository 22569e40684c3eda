"""Where a Hub kernel came from, and what happens when the Hub cannot be reached.

The kernels library's `get_kernel` (0.17) looks at the LOCAL_KERNELS override first, then at
one of two resolvers, picked from huggingface_hub's `constants.HF_HUB_OFFLINE`, which is read
from the environment once, when huggingface_hub is imported: with HF_HUB_OFFLINE=1 the cache
resolver (it skips the publisher trust check, with a warning, since trust cannot be verified
offline), else the online resolver, whose first step asks the Hub whether the publisher is
trusted and raises "could not verify publisher trust status" when the Hub cannot be reached,
before the cache is ever looked at. So on a machine without a network a warm cache served
nothing unless HF_HUB_OFFLINE=1 was set before the import.

`load` calls a lesson's own fetch (the post's `get_kernel(...)` line, kept in the lesson); when
the online resolver fails, it calls it again with the cache resolver (the library's own offline
mode, switched on for that one call), which a warm cache answers without trust_remote_code.
When all of that fails, the reason goes to the lesson's fallback: a PyPI package with the same
code (`liger_layers`: the liger-kernel package), or the lesson's own next source, or one line
saying how to get the kernel (`no_fallback`).
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

from common.cli import UsageError, one_line, require_gpu

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


@contextmanager
def _hub_offline() -> Iterator[None]:
    """huggingface_hub's offline mode for one call: the constant that HF_HUB_OFFLINE set at
    import, which get_kernel reads on each call to pick its resolver."""
    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was


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


# What the kernels library raises when the Hub answered no (kernels 0.17.2, hf_hub.py): the
# cache must not be read around it, unlike "could not verify publisher trust status" (no answer).
_HUB_REFUSALS = ("is not from a trusted publisher",)


def _short(reason: str, limit: int = 160) -> str:
    return reason if len(reason) <= limit else reason[: limit - 3].rsplit(" ", 1)[0] + "..."


NO_LIBRARY = "the kernels library is not installed in this Python"


class KernelsMissing(ImportError):
    """The kernels library itself is not installed: no Hub, cache or LOCAL_KERNELS to try."""


def get_kernel_missing(*_args, **_kwargs):
    """Stands in for kernels.get_kernel where the library does not import (a Python with torch
    but not this project's environment): the lesson refuses in one line instead of a traceback,
    and 04_d can still fall back to FlashAttention-4."""
    raise KernelsMissing(NO_LIBRARY)


def how_to_get(repo_id: str, reason: str) -> str:
    """The ways to get the kernel onto this machine that can work given why loading failed:
    the Hub's cache and LOCAL_KERNELS both go through the kernels library."""
    if NO_LIBRARY in reason:
        return "To get it: install the kernels library (`uv sync`; elsewhere `pip install kernels`)"
    return (
        "To get it: run once with network access (the Hub cache then serves HF_HUB_OFFLINE=1 "
        "runs), or point LOCAL_KERNELS at a local copy of the kernel repository: "
        f"LOCAL_KERNELS={repo_id}=/path/to/it"
    )


def load(
    fetch: Callable[[], T], repo_id: str, *, fallback: Callable[[str], tuple[T, str]]
) -> tuple[T, str]:
    """Return (what `fetch` returned, where it came from), or `fallback(reason)` when `fetch`
    fails; the fallback returns the same pair or raises UsageError (one line, exit 2). What
    the kernels library logs is printed as a note on success and dropped on failure, where the
    reason says it."""
    online = not constants.HF_HUB_OFFLINE
    with _kernels_logs_held() as held:
        try:
            return _noted(fetch(), held), hub_source(repo_id)
        except KernelsMissing as err:  # no source of the library's to try
            return fallback(str(err))
        except Exception as err:  # no network, cold cache, refused trust check, no build variant
            reason = _short(one_line(err, 1000))
        # the Hub did not answer: a warm cache still can; a refusal the Hub gave stands
        if online and not any(s in reason for s in _HUB_REFUSALS):
            held.records.clear()
            try:
                with _hub_offline():
                    found = fetch()
            except Exception:
                reason += "; the local Hub cache holds no copy either"
            else:
                source = f"{repo_id} from the local Hub cache (the Hub did not answer: {reason})"
                return _noted(found, held), source
    return fallback(reason)


def _noted(found: T, held: _Held) -> T:
    for record in held.records:
        print(f"kernels: note: {record.getMessage()}")
    return found


def no_fallback(repo_id: str, why: str) -> Callable[[str], tuple]:
    """A fallback that refuses in one line: what failed, why nothing else stands in, and the
    two ways to get the kernel onto this machine."""

    def refuse(reason: str) -> tuple:
        raise UsageError(
            f"could not load {repo_id} ({reason}); {why}. {how_to_get(repo_id, reason)}"
        )

    return refuse


def flash_attn_4(repo_id: str, why: str) -> Callable[[str], tuple]:
    """A fallback for FlashAttention: FlashAttention-4's flash_attn_func (flash-attn-4: CuTe DSL
    kernels, JIT-compiled on the GPU, q, k, v in [batch, seq, heads, head_dim], returns
    (out, lse)) where `flash_attn.cute` imports, else no_fallback's one line."""

    def fall_back(reason: str) -> tuple:
        missing = "FlashAttention-4 (flash-attn-4, `uv sync --extra hopper`) is not installed"
        try:
            from flash_attn.cute import flash_attn_func
        except ImportError:
            return no_fallback(repo_id, f"{why}; {missing}")(reason)
        except Exception as err:  # installed, but e.g. the CuTe DSL's CUDA library is missing
            broken = f"FlashAttention-4 is installed but does not import: {one_line(err, 200)}"
            return no_fallback(repo_id, f"{why}; {broken}")(reason)
        try:
            release = f"flash-attn-4 {version('flash-attn-4')}"
        except PackageNotFoundError:
            release = "flash_attn.cute (no flash-attn-4 distribution found)"
        return flash_attn_func, (
            f"flash_attn.cute.flash_attn_func from {release} (FlashAttention-4), because "
            f"{repo_id} could not be loaded ({reason})"
        )

    return fall_back


def _liger_from_pypi(repo_id: str, reason: str) -> tuple[ModuleType, str]:
    try:
        from liger_kernel.transformers.geglu import LigerGEGLUMLP

        release = version("liger-kernel")
    except (ImportError, PackageNotFoundError):
        raise UsageError(
            f"could not load {repo_id} ({reason}), and the liger-kernel package is not "
            f"installed to fall back on (`uv sync` installs both). {how_to_get(repo_id, reason)}"
        ) from None
    return (
        SimpleNamespace(LigerGEGLUMLP=LigerGEGLUMLP),
        f"LigerGEGLUMLP from liger-kernel {release} (PyPI), because {repo_id} could not "
        f"be loaded ({reason})",
    )


def liger_layers(fetch: Callable[[], ModuleType], repo_id: str) -> tuple[ModuleType, str]:
    """Return (layers, where they came from): the Hub's via `fetch`, else liger-kernel's."""
    return load(fetch, repo_id, fallback=lambda reason: _liger_from_pypi(repo_id, reason))


def require_flash_gpu(script: str, args) -> None:
    """04_d on a machine without a CUDA GPU: one line (exit 2) before the run resolves its
    device, saying which lesson runs flash attention on a CPU."""
    require_gpu(
        script,
        args,
        "FlashAttention's kernels are CUDA code with no CPU build "
        "(04_c_sdpa_attention.py --backend flash runs on a CPU)",
    )


def refuse_flash(variant: str, run) -> None:
    """What 04_d's FlashAttention kernels cannot run, refused in one line (exit 2): float32
    (they compute in bf16 or fp16 only), and FlashAttention-3 off Hopper."""
    import torch

    if run.dtype_name == "fp32":
        raise UsageError(
            "FlashAttention computes in bf16 or fp16 only: choose --dtype bf16 or fp16 "
            "(04_c_sdpa_attention.py --backend math or efficient runs fp32)"
        )
    major, minor = torch.cuda.get_device_capability(run.device)
    if variant == "fa3" and major != 9:
        raise UsageError(
            f"--variant fa3 needs a Hopper GPU (compute capability 9.x); this one is "
            f"{major}.{minor}: use --variant fa2"
        )


# --- Liger's GeGLU MLP (03_kernels_mlp.py, the sweep) ---------------------------------------

LIGER_REPO = "kernels-community/liger-kernels"


def fetch_liger_layers():
    """Part 2's line: a pre-built kernel package from the Hub, pinned to version 1 (whose
    LigerGEGLUMLP takes a config), downloaded once and cached."""
    try:
        from kernels import get_kernel  # Hugging Face's kernels library
    except ImportError:  # not installed: one line when the kernel is asked for
        get_kernel = get_kernel_missing
    return get_kernel(LIGER_REPO, version=1).layers


def liger_geglu_mlp(dim: int, hidden: int) -> tuple[object, str]:
    """Liger's GeGLU MLP (gate, up, down created in GeGLUMLP's order, so the same seed gives
    the same weights) and where it came from: the Hub, the offline cache, LOCAL_KERNELS, else
    the liger-kernel package (liger_layers tries them in that order)."""
    from modules.models import GeGLUConfig

    layers, source = liger_layers(fetch_liger_layers, LIGER_REPO)
    config = GeGLUConfig(hidden_size=dim, intermediate_size=hidden)
    return layers.LigerGEGLUMLP(config), source
