"""compare's text fits 100 columns, as explain's does: an extra kernel's row stays one line (its
name, then its reading, cut with an ellipsis; its bytes whole), a list (names not counted, CPU
ops gone, kernel groups, modules) wraps under its line without breaking a name, and the verdict
wraps between its clauses. --json is untouched: every name whole. Read on pairs of every kind:
a lesson eager against compiled, models, generations, CPU-only traces, and kineto's own."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

import pytest

from tests.helpers import EXTERNAL_TRACES
from tracereader.analyses.diff import compare as diff
from tracereader.commands import compare
from tracereader.render.compare import NAME_LEAST, NAME_WIDTH, text
from tracereader.render.lines import WIDTH, clauses, cut, wrap_items
from tracereader.trace.load import load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODELS = "h200/models"
MIXTRAL = f"{MODELS}/mixtral_train_l4_h1024_e8k2_b4_s1024_bf16.json.gz"
LLAMA = f"{MODELS}/llama_train_wrapped_l8_h2048_b4_s1024_bf16.json.gz"
GENERATE = "h200/08_generate/8b_b1_p512_n256_bf16_static_graphs_{}.json.gz"
PAIRS = [
    ("h100/01_matmul_add/4096_bf16_warm_eager.json.gz",  # a lesson, eager against compiled
     "h100/01_matmul_add/4096_bf16_warm_compile.json.gz"),
    ("h100/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz",  # bytes moved, per kernel
     "h100/03_simple_mlp/b64_s128_d768_h3072_bf16_compile.json.gz"),
    pytest.param(GENERATE.format("compile"), GENERATE.format("eager"),  # a verdict's "but"
                 marks=pytest.mark.slow),
    pytest.param("h100/models/llama_train_l8_h2048_b4_s1024_bf16_modules.json.gz",
                 "h100/models/resnet50_train_b64_i224_bf16_modules.json.gz",  # nn.Modules
                 marks=pytest.mark.slow),
    ("labelled/autocast_train.json.gz", "labelled/bert_vocab.json.gz"),
    ("labelled/ranks/compute_straggler/compute_straggler_rank0.json.gz",  # CPU only
     "labelled/ranks/exposed_all_reduce/exposed_all_reduce_rank0.json.gz"),
    ("labelled/ranks/compute_straggler", "labelled/ranks/exposed_all_reduce"),  # rank folders
]  # fmt: skip
KINETO = EXTERNAL_TRACES / "kineto"
EXTERNAL = [  # 40 lines over 100, and a verdict of 154, before
    ("resnet50_w0_run1.pt.trace.json.gz", "resnet50_w4.pt.trace.json.gz"),
    ("before_fix_trace.json", "after_fix_trace.json"),
]


def compared(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert compare.main(list(argv)) == 0
    return out.getvalue()


def too_wide(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("a, b", PAIRS)
def test_no_line_of_compare_is_over_100_characters(a, b):
    assert not too_wide(compared(str(FIXTURES / a), str(FIXTURES / b)))


@pytest.mark.slow  # another project's traces
@pytest.mark.skipif(not KINETO.is_dir(), reason="no ../shared/external-traces")
@pytest.mark.parametrize("a, b", EXTERNAL)
def test_kinetos_pairs_fit_too(a, b):
    screen = compared(str(KINETO / a), str(KINETO / b))
    assert not too_wide(screen)
    assert "verdict: B is " in screen


@pytest.fixture(scope="module")
def mixtral_llama() -> tuple[dict, str]:
    """The widest pair there is: rows with long readings and bytes, long lists of names."""
    result = diff(load(FIXTURES / MIXTRAL), load(FIXTURES / LLAMA))
    return result, text(result)


@pytest.mark.slow  # two model traces of 600 KB
def test_a_row_is_one_line_its_name_cut_and_its_bytes_whole(mixtral_llama):
    result, screen = mixtral_llama
    lines = screen.splitlines()
    assert not too_wide(screen)
    for side in ("a", "b"):
        start = lines.index(f"only in {side.upper()}:") + 1
        shown = result[f"only_in_{side}"][:12]
        for e, line in zip(shown, lines[start : start + len(shown)], strict=True):
            assert line.startswith(f"  {e['us']:7.1f} us")  # one line a row
            assert e["name"][: NAME_LEAST - 3] in line  # its start, whatever its cut
            if e["bytes"]:
                assert line.endswith(f", moves >= {e['bytes'] / 1e6:.1f} MB")
    assert any("... [" in line for line in lines)  # a long name cut before its reading


@pytest.mark.slow  # two model traces of 600 KB
def test_a_list_wraps_without_breaking_a_name(mixtral_llama):
    result, screen = mixtral_llama
    lines = screen.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  not counted in A ("))
    assert "no byte estimate: no recorded shapes" in lines[at]
    for name in result["extra_bytes_unknown"]["a"]:  # each whole on one line, under the first
        assert any(cut(name, NAME_WIDTH) in line for line in lines[at + 1 :])
    ops = next(i for i, line in enumerate(lines) if line.startswith("CPU ops only in A"))
    assert lines[ops + 1].startswith("    aten::")  # a hanging indent, an op whole after it
    assert "but at::native::multi_tensor_apply_kernel is 1.9x slower" in screen


@pytest.mark.slow  # two model traces of 600 KB
def test_json_keeps_every_name_whole(monkeypatch):
    monkeypatch.chdir(FIXTURES)
    found = json.loads(compared(MIXTRAL, LLAMA, "--json"))
    longest = max((e["name"] for e in found["only_in_a"]), key=len)
    assert len(longest) > WIDTH and not longest.endswith("...")


def test_items_stay_whole_and_a_verdict_splits_between_its_clauses():
    items = [f"void f<float, {i}>(int, long)" for i in range(12)]
    lines = wrap_items("  not counted in A: ", items)
    assert all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith("      ") for line in lines[1:])  # under the line's own indent
    assert " ".join(line.strip() for line in lines).count("void f<float, ") == 12
    assert all(any(item in line for line in lines) for item in items)  # none split
    verdict = "B is faster: step 9 ms -> 8 ms (0.89x; per step the longer), GPU busy 4 ms; both"
    assert clauses(verdict) == [
        "B is faster: step 9 ms -> 8 ms (0.89x; per step the longer),",
        "GPU busy 4 ms;",
        "both",
    ]


@pytest.mark.parametrize("where", ["repository", "elsewhere"])
def test_the_rank_folders_command_to_copy_runs_where_it_was_printed(where, monkeypatch, tmp_path):
    """The "kernel by kernel" command names rank 0's files relative to the folder it was printed
    in when they lie under it (short, whatever the checkout's depth), whole and quoted when not;
    pasted there, it runs."""
    folder = tmp_path / "my runs"  # a space: the shell must get one word
    folder.mkdir()
    for name in ("compute_straggler", "exposed_all_reduce"):
        src = FIXTURES / "labelled/ranks" / name
        (folder / name).mkdir()
        for f in src.glob("*_rank*.json.gz"):
            (folder / name / f.name).write_bytes(f.read_bytes())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path if where == "repository" else tmp_path / "elsewhere")
    screen = compared(str(folder / "compute_straggler"), str(folder / "exposed_all_reduce"))
    assert not too_wide(screen.replace(str(folder), "F"))  # only the user's own path is long
    command = " ".join(screen.split("kernel by kernel, rank 0: ")[1].split())
    assert command.startswith("uv run compare ")
    argv = shlex.split(command.removeprefix("uv run compare "))
    assert len(argv) == 2 and all(Path(a).is_file() for a in argv)
    assert Path(argv[0]).is_absolute() == (where == "elsewhere")
    assert "verdict" in compared(*argv)
