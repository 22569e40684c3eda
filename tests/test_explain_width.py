"""explain's text fits 100 columns: a long line (a finding, the launches, a footprint) wraps at
spaces under its own item, a table keeps its columns (a long name cut with an ellipsis), and a
path stays whole (copied as the user typed it). Read on fixtures of every kind: each lesson,
real models, generation, the labelled set, rank folders, and the largest trace there is."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tracereader.commands import explain
from tracereader.render.lines import WIDTH, wrap

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRACES = sorted(
    p.relative_to(FIXTURES).as_posix()
    for p in [*FIXTURES.rglob("*.json"), *FIXTURES.rglob("*.json.gz")]
    if not p.name.endswith(".label.json") and not p.name.startswith("provenance")
)
LARGEST = max(TRACES, key=lambda p: (FIXTURES / p).stat().st_size)
SAMPLE = [
    "h100/01_matmul_add/4096_bf16_warm_compile.json.gz",  # a footprint and its reading
    "h100/01_matmul_add/33_fp32_warm_eager.json.gz",
    "h100/02_linear/b1024_in32_out64_bf16_eager.json.gz",
    "h100/03_kernels_mlp/b2_s8_d64_h128_bf16_eager.json.gz",  # CPU ops that launch nothing
    "h100/04_c_sdpa_attention/b8_h16_s1024_d64_bf16_eager_flash.json.gz",
    "h100/08_generate/8b_b1_p512_n256_bf16_static_graphs_fused_split_autotune_compile.json.gz",
    "h200/08_generate/8b_b1_p512_n256_bf16_hf_eager.json.gz",  # generation's headline
    "h100/models/llama_infer_l8_h2048_b4_s1024_bf16_compile.json.gz",  # compiled kernels' names
    "h100/models/llama_train_l8_h2048_b4_s1024_bf16_modules.json.gz",  # nn.Module table
    "h100/fsdp_train/b4_s2048_d2048_h5632_n16_l8_bf16_fsdp1_eager_rank0.json.gz",
    "h100/train_step/b2_s128_d256_h512_n4_l2_autocast_fused_compile_w1-1-2.json.gz",
    "h200x2/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_compile_rank0.json.gz",  # collectives
    "labelled/fp32_mlp.json.gz",
    "labelled/nonzero_sync.json.gz",
    "labelled/generate_processor.json.gz",
    "labelled/memory_cat.json.gz",
    "labelled/ranks/compute_straggler/compute_straggler_rank0.json.gz",  # CPU only
    "h200x2/05_tp_mlp",  # rank folders: the run's reading
    "labelled/ranks/uneven_all_to_all",
    "h100/fsdp_train",
    LARGEST,
]


def explained(monkeypatch, path: str, *flags: str) -> str:
    monkeypatch.chdir(FIXTURES)  # the path as the user types it, from where the traces are
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert explain.main([path, *flags]) == 0
    return out.getvalue()


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def test_the_sample_covers_the_kinds_of_fixtures():
    assert len(TRACES) > 100 and set(SAMPLE) - {LARGEST} <= {
        *TRACES,
        *{str(Path(p).parent) for p in TRACES},
    }


@pytest.mark.parametrize("path", SAMPLE)
def test_no_line_of_explain_is_over_100_characters(path, monkeypatch):
    assert not too_wide(explained(monkeypatch, path))


def test_the_listing_in_full_fits_too(monkeypatch):
    """Every step's GPU work and CPU chain: the table keeps its columns, the names are cut."""
    path = "h100/models/llama_infer_l8_h2048_b4_s1024_bf16_compile.json.gz"
    text = explained(monkeypatch, path, "--all-steps", "--max-ops", "0", "--all-findings")
    assert not too_wide(text)
    rows = [line for line in text.splitlines() if line.startswith("    ") and "..." in line]
    assert rows  # compiled kernels' names, longer than their column, cut with an ellipsis


def test_a_finding_wraps_under_its_item(monkeypatch):
    text = explained(monkeypatch, "h100/01_matmul_add/33_fp32_warm_eager.json.gz")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  [cause] "))
    assert lines[at + 1].startswith("      ") and not lines[at + 1].startswith("       ")
    first = next(i for i, line in enumerate(lines) if line.startswith("first: "))
    assert lines[first + 1].startswith("    ") and lines[first + 1][4] != " "


def test_a_path_longer_than_the_width_stays_whole_on_its_line():
    path = "/very/long/" + "x" * 120 + ".json.gz"
    name = "triton_per_fused_" + "y" * 120
    header = wrap([f"trace: {path} (CPU only; 3 recorded steps)"])
    (whole,) = [line for line in header if path in line.split()]  # copied as it was typed
    assert all(len(line) <= WIDTH for line in header if line is not whole)
    broken = wrap([f"  [compile] the kernel {name} runs"])  # a name: broken at the line's end
    assert all(len(line) <= WIDTH for line in broken)
    assert "".join(line.strip() for line in broken).count(name) == 1


@pytest.mark.slow
def test_no_line_of_explain_is_over_100_characters_on_any_fixture(monkeypatch):
    for path in TRACES:
        assert not too_wide(explained(monkeypatch, path)), path
