"""04_d's FlashAttention loader without the Hub: LOCAL_KERNELS, a warm offline cache, then an
installed FlashAttention-4 (a stand-in `flash_attn.cute` put in sys.modules), and the one-line
refusal when none answers (PyPI has no ready-built FlashAttention-2 or -3 to fall back on).
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


def load(env_extra, tmp_path, variant="fa2", fa4=False, kernels_library=True):
    args = [variant, *(["--fake-fa4"] if fa4 else [])]
    args += [] if kernels_library else ["--no-kernels-library"]
    return run_kernel_loader("load_flash", *args, env_extra=env_extra, tmp_path=tmp_path)


def warm_cache(hub):
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = hub / "kernels--kernels-community--flash-attn2"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "v3").write_text(commit)  # version=3 resolves through the v3 branch
    tiny_flash_repo(cached / "snapshots" / commit)
    return hub


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
    lines = load({"HF_HUB_CACHE": str(warm_cache(tmp_path / "hub"))}, tmp_path)
    assert lines["ORIGIN"] == "tiny-test-repo"
    assert lines["SOURCE"] == (
        "kernels-community/flash-attn2 from the local Hub cache (HF_HUB_OFFLINE=1)"
    )


@pytest.mark.slow
def test_cold_cache_says_how_to_get_the_kernel_in_one_line(tmp_path):
    lines = load({}, tmp_path)
    refused = lines["REFUSED"]
    assert "\n" not in refused and "SOURCE" not in lines
    assert refused.startswith("could not load kernels-community/flash-attn2 (")
    assert "PyPI has no ready-built FlashAttention-2 or -3" in refused
    assert "FlashAttention-4 (flash-attn-4, `uv sync --extra hopper`) is not installed" in refused
    assert "run once with network access" in refused
    assert "LOCAL_KERNELS=kernels-community/flash-attn2=" in refused


@pytest.mark.slow
def test_an_installed_flashattention_4_answers_after_the_hub_sources(tmp_path):
    lines = load({}, tmp_path, fa4=True)  # cold cache, no LOCAL_KERNELS
    assert lines["ORIGIN"] == "fake-flash-attn-4"
    assert lines["SOURCE"].startswith("flash_attn.cute.flash_attn_func from ")
    assert (
        "(FlashAttention-4), because kernels-community/flash-attn2 could not be loaded"
        in (lines["SOURCE"])
    )


@pytest.mark.slow
def test_the_hub_sources_come_before_an_installed_flashattention_4(tmp_path):
    repo = tiny_flash_repo(tmp_path / "flash-checkout")
    local = load({"LOCAL_KERNELS": f"kernels-community/flash-attn2={repo}"}, tmp_path, fa4=True)
    cached = load({"HF_HUB_CACHE": str(warm_cache(tmp_path / "hub"))}, tmp_path, fa4=True)
    for lines in (local, cached):
        assert lines["ORIGIN"] == "tiny-test-repo"


@pytest.mark.slow
def test_without_the_kernels_library_one_line_or_flashattention_4(tmp_path):
    """A Python with torch but not the kernels library (seen on a GPU machine): no traceback at
    import; the refusal names the missing library (no cache was read), and an installed
    FlashAttention-4 still answers."""
    refused = load({}, tmp_path, kernels_library=False)["REFUSED"]
    assert "\n" not in refused
    assert "(the kernels library is not installed in this Python)" in refused
    assert refused.endswith(
        "To get it: install the kernels library (`uv sync`; elsewhere `pip install kernels`)"
    )
    assert "cache holds no copy" not in refused and "LOCAL_KERNELS" not in refused
    lines = load({}, tmp_path, fa4=True, kernels_library=False)
    assert lines["ORIGIN"] == "fake-flash-attn-4"
    assert "could not be loaded (the kernels library is not installed" in lines["SOURCE"]
