"""08_generate's lines around its loop, as a person reads them: sizes in binary units with three
significant digits (never 0.00024 GB), and the decode steps the profiler recorded told apart
from the tokens generated; and --bucket without what sharing needs (a Hugging Face token,
huggingface_hub) refused in one line before any work, not after the whole run."""

from __future__ import annotations

import contextlib
import io
import re
import sys

import pytest
import torch

from common import generation
from modules import llama
from tests.helpers import run_script

# a size as the lesson prints it: 234 KiB, 96.0 MiB, 15.0 GiB
SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB)\b")


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1000, "1000 B"), (5120, "5.00 KiB"), (240_000, "234 KiB"),
     (96 * 2**20, "96.0 MiB"), (1 << 20, "1.00 MiB"), (16_060_522_496, "15.0 GiB")],
)  # fmt: skip
def test_a_size_is_in_binary_units_with_three_significant_digits(n, text):
    assert generation.size(n) == text


def test_the_guess_of_a_tiny_model_says_its_bytes_in_kib_not_in_a_fraction_of_a_gb(capsys):
    v = generation.Variant(llama.PRESETS["tiny"], 1, 16, 32, "static", "ours", False, False)
    assert generation.print_guess(v, 8, 2, None) is None  # a CPU: no floor
    line = capsys.readouterr().out.strip()
    assert line.startswith("guess: a decode token reads ")
    assert " GB" not in line and "e-" not in line and "0.0" not in line, line
    assert len(SIZE.findall(line)) == 3 and "KiB" in line, line


def test_the_guess_of_an_8b_model_says_gib():
    v = generation.Variant(llama.PRESETS["8b"], 1, 512, 768, "static", "ours", False, True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        generation.print_guess(v, 256, 2, 4.8e12)
    first = printed.getvalue().splitlines()[0]
    assert re.search(r"reads 1[45]\.\d GiB: the weights", first), first


def test_the_reading_says_its_tokens_are_the_profiled_decode_steps_of_those_generated(capsys):
    g = {"decode": {"tokens": 3, "per_token_us": {"median": 1500.0}}, "prefill": None}
    generation.print_reading({**g, "bound": None}, None, generated=8)
    line = capsys.readouterr().out.strip()
    assert line == (
        "generation: decode 1.500 ms per token over the 3 profiled decode steps of the 7 "
        "decoded (8 generated)"
    )
    generation.print_reading({**g, "bound": None}, None)  # the caller gave no count
    assert "over the 3 profiled decode steps" in capsys.readouterr().out


@pytest.mark.slow
def test_the_lesson_says_what_its_token_counts_are(tmp_path):
    """The tiny model on the CPU, in-process: the reference's tokens are the generated ones
    (prefill's, then one a decode step); the sizes are readable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # shared cores: OpenMP's spinning threads cost more than they give
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            code = run_script(
                "08_generate", "--prompt", "12", "--new-tokens", "6", "--wait", "0",
                "--warmup-steps", "1", "--traces-dir", str(tmp_path),
            )  # fmt: skip
    finally:
        torch.set_num_threads(before)
    out = printed.getvalue()
    assert code == 0, out
    assert "reference's 6 greedy tokens exactly (the first by prefill, then 5 decode steps)" in out
    guess = next(line for line in out.splitlines() if line.startswith("guess:"))
    assert " GB" not in guess and "e-" not in guess and len(SIZE.findall(guess)) == 3, guess
    kv = next(line for line in out.splitlines() if line.startswith("KV cache:"))
    assert "the weights 0.000" not in kv and SIZE.search(kv.split("the weights ")[1]), kv


# --- --bucket: what sharing needs, checked before the run -------------------------------------


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    """No HF_TOKEN and no token saved by `hf auth login` (the Hub's token file is elsewhere)."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))


def bucket_run(folder, capsys) -> tuple[int, str, str]:
    code = run_script("08_generate", "--traces-dir", str(folder), "--bucket", "my-traces")
    out, err = capsys.readouterr()
    return code, out, err


def test_bucket_without_a_token_is_refused_before_any_work(no_token, tmp_path, capsys):
    code, out, err = bucket_run(tmp_path / "traces", capsys)
    assert code == 2 and out == ""  # not a token of the model was generated
    assert err.count("\n") == 1 and err.startswith("error: --bucket my-traces: no Hugging Face")
    assert "hf auth login" in err and "HF_TOKEN" in err
    assert not (tmp_path / "traces").exists()


def test_bucket_without_huggingface_hub_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import` raises ImportError
    code, out, err = bucket_run(tmp_path / "traces", capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: --bucket my-traces: huggingface_hub does not import")
    assert not (tmp_path / "traces").exists()
