"""04_d's FlashAttention loader without the Hub: LOCAL_KERNELS, a warm offline cache, and the
one-line refusal when neither answers (PyPI has no ready-built FlashAttention to fall back on).
A tiny local kernel repository is built in each test; the kernels library and huggingface_hub
run for real, in a subprocess, so their environment variables act as a user's."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_kernel_loader

REPOS = {"fa2": ("kernels-community/flash-attn2", 3), "fa3": ("kernels-community/flash-attn3", 1)}


def tiny_flash_repo(root, variant="fa2"):
    """The layout LOCAL_KERNELS and the Hub cache hold: build/<variant>/<package> + metadata."""
    repo_id, version = REPOS[variant]
    name = repo_id.split("/")[1]
    package = root / "build" / "torch-universal" / name.replace("-", "_")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "def flash_attn_func(q, k, v, causal=False):\n"
        "    raise NotImplementedError('a stand-in: only its origin is checked')\n\n\n"
        "flash_attn_func.ORIGIN = 'tiny-test-repo'\n"
    )
    (package.parent / "metadata.json").write_text(
        json.dumps(
            {
                "id": name,
                "name": name,
                "version": version,
                "license": "bsd-3-clause",
                "python-depends": [],
                "backend": {"type": "cpu"},
            }
        )
    )
    return root


def load(env_extra, tmp_path, variant="fa2"):
    return run_kernel_loader("load_flash", variant, env_extra=env_extra, tmp_path=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["fa2", "fa3"])
def test_local_kernels_override_wins(variant, tmp_path):
    repo_id, _ = REPOS[variant]
    repo = tiny_flash_repo(tmp_path / "flash-checkout", variant)
    lines = load({"LOCAL_KERNELS": f"{repo_id}={repo}"}, tmp_path, variant)
    assert lines["ORIGIN"] == "tiny-test-repo"
    assert lines["SOURCE"] == f"{repo_id} from the LOCAL_KERNELS override ({repo})"


@pytest.mark.slow
def test_offline_mode_reads_a_warm_hub_cache_at_the_pinned_version(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "hub" / "kernels--kernels-community--flash-attn2"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "v3").write_text(commit)  # version=3 resolves through the v3 branch
    tiny_flash_repo(cached / "snapshots" / commit)
    lines = load({"HF_HUB_CACHE": str(tmp_path / "hub")}, tmp_path)
    assert lines["ORIGIN"] == "tiny-test-repo"
    assert (
        lines["SOURCE"]
        == "kernels-community/flash-attn2 from the local Hub cache (HF_HUB_OFFLINE=1)"
    )


@pytest.mark.slow
def test_cold_cache_says_how_to_get_the_kernel_in_one_line(tmp_path):
    lines = load({}, tmp_path)
    refused = lines["REFUSED"]
    assert "\n" not in refused and "SOURCE" not in lines
    assert refused.startswith("could not load kernels-community/flash-attn2 (")
    assert "PyPI has no ready-built FlashAttention" in refused
    assert "run once with network access" in refused
    assert "LOCAL_KERNELS=kernels-community/flash-attn2=" in refused
