"""Where a Hub kernel came from, and the PyPI fallback when the Hub cannot be reached.

The kernels library's `get_kernel` looks, in order, at the LOCAL_KERNELS override, then (with
HF_HUB_OFFLINE=1) the local Hub cache, else the Hub itself. When all of that fails (no network,
a cold cache) the same LigerGEGLUMLP class ships in the `liger-kernel` package on PyPI.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType, SimpleNamespace

from huggingface_hub import constants

from common.cli import UsageError, one_line


def hub_source(repo_id: str) -> str:
    """Say which of get_kernel's sources answered, the way the kernels library picks them."""
    for entry in os.environ.get("LOCAL_KERNELS", "").split(":"):
        name, _, path = entry.partition("=")
        if name == repo_id and path:
            return f"{repo_id} from the LOCAL_KERNELS override ({path})"
    if constants.HF_HUB_OFFLINE:
        return f"{repo_id} from the local Hub cache (HF_HUB_OFFLINE=1)"
    return f"{repo_id} from the Hugging Face Hub"


def liger_layers(fetch: Callable[[], ModuleType], repo_id: str) -> tuple[ModuleType, str]:
    """Return (layers, where they came from): the Hub's via `fetch`, else liger-kernel's."""
    try:
        return fetch(), hub_source(repo_id)
    except Exception as err:  # no network, cold cache, refused trust check, ...
        reason = one_line(err, 160)
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
