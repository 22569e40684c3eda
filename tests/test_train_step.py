"""06_train_step on the CPU: one step checked against the float32 reference step, the trace
cut into the forward, backward and optimizer phases, bad input refused."""

from __future__ import annotations

import pytest
import torch

import tracereader
from common import check, training
from tests.helpers import ROOT, load_script, read_trace, run_script
from tracereader.analyses.phases import step as phases_of
from tracereader.judge import expectations
from tracereader.trace import load as trace_reader

TINY = ["--batch", "1", "--seq", "8", "--dim", "16", "--hidden", "32", "--heads", "2"]
TINY += ["--layers", "1", "--vocab", "32", "--wait", "0", "--warmup-steps", "0", "--active", "1"]


def trace_of(folder):
    (path,) = (folder / "06_train_step").glob("*.json")
    return trace_reader.load(path)


def run_step(folder, *argv):
    return run_script("06_train_step", *TINY, "--strict", "--traces-dir", str(folder), *argv)


@pytest.mark.parametrize(
    ("optimizer", "precision"),
    [
        ("foreach", "autocast"),
        pytest.param("forloop", "fp32", marks=pytest.mark.slow),
        pytest.param("fused", "bf16", marks=pytest.mark.slow),
        pytest.param("forloop", "autocast", marks=pytest.mark.slow),
        pytest.param("fused", "fp32", marks=pytest.mark.slow),
        pytest.param("foreach", "bf16", marks=pytest.mark.slow),
    ],
)
def test_one_step_matches_the_reference_and_each_phase_its_guess(
    optimizer, precision, tmp_path, capsys
):
    assert run_step(tmp_path, "--optimizer", optimizer, "--precision", precision) == 0
    printed = capsys.readouterr().out
    assert "correctness: loss" in printed and ": ok" in printed
    phases = tracereader.phase_steps(trace_of(tmp_path), ("forward", "backward", "optimizer"))
    names = {phase: {op.name for op in steps[0].cpu_ops} for phase, steps in phases.items()}
    # each phase holds its own work and none of the others'
    assert "aten::cross_entropy_loss" in names["forward"]
    assert any(n.startswith("autograd::engine::evaluate_function") for n in names["backward"])
    assert "Optimizer.step#AdamW.step" in names["optimizer"]
    assert not any(n.startswith("autograd::engine") for n in names["forward"] | names["optimizer"])
    assert not any(n.startswith("Optimizer.") for n in names["forward"] | names["backward"])
    kernel = {"forloop": "aten::lerp_", "foreach": "aten::_foreach_lerp_"}
    assert kernel.get(optimizer, "aten::_fused_adamw_") in names["optimizer"]
    # and the reader, given the trace alone, finds the same three phases, in order; time the
    # step spent outside them after the backward (the loop's own code: on a loaded CPU it
    # can pass the reader's threshold) is "other", and comes last
    read = [p["phase"] for p in phases_of(trace_of(tmp_path).steps[0])]
    assert read in (
        ["forward", "backward", "optimizer"],
        ["forward", "backward", "optimizer", "other"],
    )


@pytest.mark.slow
def test_compiled_step_matches_the_reference(tmp_path, capsys):
    assert run_step(tmp_path, "--compile", "--optimizer", "fused") == 0
    phases = tracereader.phase_steps(trace_of(tmp_path), ("forward", "backward", "optimizer"))
    assert "CompiledFunctionBackward" in {op.name for op in phases["backward"][0].cpu_ops}


def test_a_step_that_does_not_update_is_a_mismatch():
    torch.manual_seed(0)
    before = {"w": torch.randn(64, 64)}
    ref_after = {"w": before["w"] - 1e-3 * torch.sign(torch.randn(64, 64))}
    with pytest.raises(check.MismatchError, match="stepped unlike the reference"):
        training.against_reference_step(
            2.0, 2.0, before, dict(before), ref_after, lr=1e-3, precision="bf16"
        )
    with pytest.raises(check.MismatchError, match="loss"):
        training.against_reference_step(
            2.5, 2.0, before, ref_after, ref_after, lr=1e-3, precision="autocast"
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dim", "30", "--heads", "4"], "--heads 4 does not divide --dim 30"),
        (["--optimizer", "sgd"], "invalid choice: 'sgd'"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--dtype", "fp32"], "takes --precision"),
        (["--batch", "100000", "--seq", "100000"], "choose smaller sizes"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(argv, message, tmp_path, capsys):
    assert run_script("06_train_step", *argv, "--traces-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_memory_by_category_agrees_with_the_arithmetic_and_draws_the_step(tmp_path, capsys):
    assert run_step(tmp_path, "--precision", "fp32", "--memory") == 0
    printed = capsys.readouterr().out
    for category in ("parameters", "gradients", "optimizer state", "activations"):
        (line,) = [ln for ln in printed.splitlines() if ln.strip().startswith(category)]
        assert "(ok:" in line, line
    for phase in ("forward", "backward", "optimizer"):
        assert f"peak during {phase}" in printed
    (png,) = (tmp_path / "06_train_step").glob("*_memory.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the allocator's history is CUDA's: no snapshot from a CPU run
    assert not list(tmp_path.rglob("*.pickle"))


@pytest.mark.slow  # two runs of the lesson, one with memory events: seconds on two busy cores
def test_memory_runs_trace_holds_the_allocations_beside_the_plain_trace(tmp_path, capsys):
    """--memory's profiled steps carry every allocation and free, what `explain --memory`
    reads, in a trace named ..._memory: a plain run's trace of the same flags stays as it was."""
    from tracereader.commands import explain

    assert run_step(tmp_path, "--precision", "fp32") == 0
    (plain,) = (tmp_path / "06_train_step").glob("*.json")
    before = plain.read_bytes()
    assert run_step(tmp_path, "--precision", "fp32", "--memory") == 0
    with_memory = plain.with_name(f"{plain.stem}_memory.json")
    assert plain.read_bytes() == before and with_memory.is_file()
    allocations = [e for e in read_trace(with_memory) if e.get("name") == "[memory]"]
    assert allocations and not [e for e in read_trace(plain) if e.get("name") == "[memory]"]
    png = tmp_path / "memory.png"
    assert explain.main([str(with_memory), "--memory", "--memory-png", str(png)]) == 0
    assert png.is_file() and "peak allocated" in capsys.readouterr().out


H100 = sorted((ROOT / "tests/fixtures/h100/train_step").glob("*.json.gz"))


@pytest.mark.parametrize("path", H100, ids=lambda p: p.name.split("_")[-2])
def test_the_lessons_guess_holds_on_a_real_h100_step(path):
    """The lesson's per-phase EXPECT, held against steps it recorded on an H100 (fixtures:
    --batch 2 --seq 128 --dim 256 --hidden 512 --heads 4 --layers 2 --vocab 1024, autocast)."""
    lesson = load_script("06_train_step")
    compiled = "_compile_" in path.name
    optimizer = "fused" if "_fused_" in path.name else "foreach"
    model = lesson.TinyLM(vocab=1024, dim=256, hidden=512, heads=4, layers=2)
    variant = lesson.Variant(
        gemms=5 * 2 + 1,
        tensors=len(list(model.parameters())),
        optimizer=optimizer,
        precision="autocast",
        compiled=compiled,
    )
    trace = trace_reader.load(path)
    phases = tracereader.phase_steps(trace, lesson.PHASES)
    for phase, cut in phases.items():
        expect = lesson.EXPECT[phase](variant)
        verdict = expectations.check(trace.with_steps(cut), expect)
        assert verdict.ok, (phase, verdict.text)
    assert tracereader.launched_under(phases["optimizer"], "Optimizer.zero_grad#") == 0
    # the attention's backward is attention, cuDNN's helpers included, not a convolution
    assert not any(item.klass.cls == "conv" for s in phases["backward"] for item in s.gpu)
