"""The kernels library without the Hub: LOCAL_KERNELS, a warm offline cache, and the PyPI
fallback. A tiny local kernel repository is built in each test; the kernels library and
huggingface_hub run for real, in a subprocess so their environment variables act as a user's."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_kernel_loader

pytestmark = pytest.mark.slow  # each test loads the kernels library in a fresh interpreter

REPO = "kernels-community/liger-kernels"


def tiny_kernel_repo(root):
    """The layout LOCAL_KERNELS and the Hub cache hold: build/<variant>/<package> + metadata."""
    package = root / "build" / "torch-universal" / "liger_kernels"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import layers\n")
    (package / "layers.py").write_text("class LigerGEGLUMLP:\n    ORIGIN = 'tiny-test-repo'\n")
    (package.parent / "metadata.json").write_text(
        json.dumps(
            {
                "id": "liger-kernels",
                "name": "liger-kernels",
                "version": 1,
                "license": "apache-2.0",
                "python-depends": [],
                "backend": {"type": "cpu"},
            }
        )
    )
    return root


def load(env_extra, tmp_path):
    lines = run_kernel_loader("load_liger", env_extra=env_extra, tmp_path=tmp_path)
    return lines["SOURCE"], lines["ORIGIN"]


def test_local_kernels_override_wins(tmp_path):
    repo = tiny_kernel_repo(tmp_path / "liger-checkout")
    source, origin = load({"LOCAL_KERNELS": f"{REPO}={repo}"}, tmp_path)
    assert origin == "tiny-test-repo"
    assert source == f"{REPO} from the LOCAL_KERNELS override ({repo})"


def test_offline_mode_reads_a_warm_hub_cache(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = tmp_path / "hub" / "kernels--kernels-community--liger-kernels"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "v1").write_text(commit)  # version=1 resolves through the v1 branch
    tiny_kernel_repo(cached / "snapshots" / commit)
    source, origin = load({"HF_HUB_CACHE": str(tmp_path / "hub")}, tmp_path)
    assert origin == "tiny-test-repo"
    assert source == f"{REPO} from the local Hub cache (HF_HUB_OFFLINE=1)"


def test_cold_cache_falls_back_to_the_pypi_liger_kernel(tmp_path):
    source, origin = load({}, tmp_path)
    assert origin == "liger_kernel.transformers.geglu"
    assert source.startswith("LigerGEGLUMLP from liger-kernel ")
    assert f"because {REPO} could not be loaded" in source


def tiny_repo(root, name: str, version: int):
    """Any publisher's kernel repository, as the Hub cache holds it: build/<variant>/..."""
    package = root / "build" / "torch-universal" / name.replace("-", "_")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("ORIGIN = 'tiny-test-repo'\n")
    metadata = {
        "id": name,
        "name": name,
        "version": version,
        "license": "apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu"},
    }
    (package.parent / "metadata.json").write_text(json.dumps(metadata))


def warm_cache(hub, repo_id: str, version: int):
    """The layout huggingface_hub's cache gives a kernel fetched once: refs/v<N> -> snapshot."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    cached = hub / f"kernels--{repo_id.replace('/', '--')}"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / f"v{version}").write_text(commit)
    tiny_repo(cached / "snapshots" / commit, repo_id.split("/")[1], version)
    return hub


# A closed port on this machine: the Hub does not answer, as on a GPU machine with no network.
NO_HUB = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
SOMEONE = "some-lab/tiny-kernel"  # a publisher no trust list names


def load_any(env_extra, tmp_path):
    return run_kernel_loader("load_kernel", SOMEONE, "2", env_extra=env_extra, tmp_path=tmp_path)


def test_online_a_warm_cache_answers_when_the_hub_does_not(tmp_path):
    hub = warm_cache(tmp_path / "hub", SOMEONE, 2)
    lines = load_any({**NO_HUB, "HF_HUB_CACHE": str(hub)}, tmp_path)
    assert lines["ORIGIN"] == "tiny-test-repo"
    source = lines["SOURCE"]
    assert source.startswith(f"{SOMEONE} from the local Hub cache (the Hub did not answer: ")
    assert "could not verify publisher trust status" in source  # the online resolver's refusal


def test_online_a_cold_cache_fails_with_both_reasons(tmp_path):
    lines = load_any(NO_HUB, tmp_path)
    assert lines["ORIGIN"] == "None"
    assert lines["SOURCE"].startswith("FAILED ")
    assert "could not verify publisher trust status" in lines["SOURCE"]
    assert lines["SOURCE"].endswith("the local Hub cache holds no copy either")


def test_offline_a_warm_cache_answers_for_any_publisher(tmp_path):
    hub = warm_cache(tmp_path / "hub", SOMEONE, 2)
    lines = load_any({"HF_HUB_CACHE": str(hub)}, tmp_path)  # HF_HUB_OFFLINE=1 by default
    assert lines["ORIGIN"] == "tiny-test-repo"
    assert lines["SOURCE"] == f"{SOMEONE} from the local Hub cache (HF_HUB_OFFLINE=1)"


def test_a_refusal_the_hub_gave_is_not_read_around_from_the_cache(monkeypatch):
    """The Hub answered "not from a trusted publisher": no second try from the cache (which
    skips the trust check); the fallback gets the Hub's reason. Only the Hub is stood in for."""
    from common import kernel_source

    monkeypatch.setattr(kernel_source.constants, "HF_HUB_OFFLINE", False)
    tries = []

    def fetch():
        tries.append(1)
        raise ValueError(f"Kernel repository '{SOMEONE}' is not from a trusted publisher.")

    got = kernel_source.load(fetch, SOMEONE, fallback=lambda reason: (None, reason))
    assert tries == [1] and "not from a trusted publisher" in got[1]


def test_without_kernels_library_or_liger_one_line_the_smoke_run_calls_unavailable(tmp_path):
    """The GPU machines' Python has torch but neither the kernels library nor liger-kernel:
    03_kernels_mlp refuses in one line that says how to get the kernel, which
    tools/dev/gpu_runs/smoke.py reports as this machine's gap (unavailable), not the lesson's
    failure."""
    from tests.test_smoke import smoke

    args = ("--no-kernels-library", "--no-liger")
    lines = run_kernel_loader("load_liger", *args, env_extra={}, tmp_path=tmp_path)
    refused = lines["REFUSED"]
    assert "SOURCE" not in lines and "\n" not in refused
    assert "the kernels library is not installed in this Python" in refused
    assert "liger-kernel package is not installed" in refused
    # only advice that can work without the library (LOCAL_KERNELS and the cache need it)
    assert "To get it: install the kernels library (`uv sync`" in refused
    assert "LOCAL_KERNELS" not in refused and "network" not in refused
    assert smoke.UNAVAILABLE.search(refused)
