"""07_fsdp_train.py --ddp: the same model and step under DistributedDataParallel. What a user
relies on: the bucket count the lesson predicts is the one DDP makes (its own assignment and
the trace of a real run), the all-reduces sit in the backward only, the step is checked
against one process, and FSDP's flags are refused with --ddp in one line."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist

from modules.models import TinyLM
from tests.helpers import ROOT, load_script
from tests.test_fsdp_train import SMALL, _in_process, torchrun_launch
from tests.test_tp_mlp import check
from tracereader import load

lesson = load_script("07_fsdp_train")
MIB = 2**20


def ddps_own_count(model: torch.nn.Module, limits: list[int]) -> int:
    """How many buckets DDP's own assignment (the C++ Reducer's, as it rebuilds its buckets
    after the first step) makes of the gradients, last parameter first."""
    grads = [torch.empty_like(p) for p in reversed(list(model.parameters()))]
    buckets, _ = dist._compute_bucket_assignment_by_size(grads, limits, [False] * len(grads))
    return len(buckets)


@pytest.mark.parametrize(
    ("shape", "cap_mb", "first_mb"),
    [
        ((256, 64, 128, 2, 2), 25, 1),  # the lesson's default shape: one bucket
        ((256, 64, 128, 2, 2), 0.05, 0.05),  # a cap the user gave applies to the first too
        ((1024, 256, 704, 4, 6), 1, 1),
        ((32000, 512, 1408, 8, 4), 25, 1),  # the head alone is larger than a bucket
        ((32000, 512, 1408, 8, 4), 100, 100),
    ],
)
def test_the_bucket_arithmetic_is_ddps_own(shape, cap_mb, first_mb):
    with torch.device("meta"):
        model = TinyLM(*shape)
    sizes = [p.numel() * 4 for p in model.parameters()]  # fp32 gradients
    ours = lesson.ddp_buckets(sizes, cap_bytes=int(cap_mb * MIB), first_bytes=int(first_mb * MIB))
    assert ours == ddps_own_count(model, [int(first_mb * MIB), int(cap_mb * MIB)])


def test_a_smaller_bucket_means_more_all_reduces_and_only_in_the_backward():
    sizes = [p.numel() * 4 for p in TinyLM(256, 64, 128, 2, 2).parameters()]
    counts = [lesson.ddp_buckets(sizes, cap_bytes=int(mb * MIB), first_bytes=int(mb * MIB))
              for mb in (25, 0.1, 0.01)]  # fmt: skip
    assert counts[0] == 1 and counts[0] < counts[1] < counts[2]
    expect, per_phase = lesson.ddp_expectation(counts[1], world=2)
    assert expect.gpu == {"collective": counts[1]}
    assert per_phase["backward"]["all-reduce"] == counts[1]
    assert not per_phase["forward"] and not per_phase["optimizer"]
    assert lesson.ddp_expectation(counts[1], world=1)[1]["backward"]["all-reduce"] == 0


@pytest.mark.slow
def test_two_gloo_ranks_bucket_as_predicted_and_match_one_process(tmp_path):
    """A real run: 0.05 MiB buckets, --strict (each rank's all-reduces per phase counted from
    its trace against the arithmetic), the step against a single-process float32 step."""
    argv = [*SMALL, "--ddp", "--bucket-cap-mb", "0.05", "--strict", "--traces-dir", str(tmp_path)]
    proc, logs = torchrun_launch(tmp_path, *argv)
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[0][1][-3000:]
    out = logs[0][0]
    with torch.device("meta"):
        model = TinyLM(64, 32, 64, 2, 2)
    want = ddps_own_count(model, [int(0.05 * MIB)] * 2)
    assert want > 1
    for rank in range(2):
        block = out.split(f"rank {rank}: collectives per step, expected vs seen")[1]
        assert re.search(rf"ok +backward +all-reduce +{want} per step +seen: {want}", block)
    assert re.search(r"correctness: loss \S+ vs float32 reference .*: ok", out)
    assert "MISMATCH" not in out and "all as expected" in out
    (trace,) = (tmp_path / "07_fsdp_train").glob("*_ddp2_bucket0.05mb_eager_cpu_rank1.json")
    names = load(trace).steps[-1].op_names_any_thread()
    assert not any(n.startswith("FSDP::") for n in names)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--ddp", "--prefetch"], "error: --prefetch and --no-reshard-after-forward are FSDP's"),
        (["--ddp", "--no-reshard-after-forward"], "error: --prefetch and --no-reshard-after"),
        (["--bucket-cap-mb", "5"], "error: --bucket-cap-mb is DDP's: add --ddp"),
    ],
)
def test_flags_of_the_other_strategy_are_one_line(flags, line, monkeypatch, tmp_path, capsys):
    argv = [*SMALL, *flags, "--traces-dir", str(tmp_path)]
    code, _ = _in_process(monkeypatch, *argv, rank=0)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(line) and "Traceback" not in err
    assert check.files_under(tmp_path) == []


@pytest.mark.parametrize("size", ["nan", "0", "-1", "inf", "1e400", "ten"])
def test_a_bucket_size_that_is_no_size_is_one_line(size, capsys):
    with pytest.raises(SystemExit) as exit_:
        lesson.parse([*SMALL, "--ddp", "--bucket-cap-mb", size])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert "argument --bucket-cap-mb" in err


H200X4 = ROOT / "tests/fixtures/h200x4/07_fsdp_train"


def test_a_real_h200_ddp_rank_all_reduces_beside_the_backward_gemms():
    """Two H200s, the documented GPU shape (8 blocks, dim 2048, vocab 32000, 542 M fp32
    parameters, DDP's default 25 MiB buckets): the lesson's bucket count holds on the trace,
    every all-reduce is launched in the backward, on a stream apart from the GEMMs', and most
    of their time runs while a GEMM runs."""
    (path,) = H200X4.glob("*_ddp2_eager_rank1.json.gz")
    trace = load(path)
    with torch.device("meta"):
        model = TinyLM(32000, 2048, 5632, 16, 8)
    sizes = [p.numel() * 4 for p in model.parameters()]
    buckets = lesson.ddp_buckets(sizes, cap_bytes=25 * MIB, first_bytes=MIB)
    assert buckets == ddps_own_count(model, [MIB, 25 * MIB])
    ok, lines = lesson.check_rank(trace, *lesson.ddp_expectation(buckets, world=2))
    assert ok, lines
    step = trace.steps[-1]
    comm = [i for i in step.gpu if i.klass.cls == "collective"]
    gemms = sorted((i.ts, i.end) for i in step.gpu if i.klass.cls == "gemm")
    under = sum(max(0.0, min(c.end, e) - max(c.ts, s)) for c in comm for s, e in gemms)
    assert under > 0.5 * sum(c.dur for c in comm)
