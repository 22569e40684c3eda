"""compare's verdict against noisy steps (issue: "noisy timings reach verdicts"): where the
steps' spread (each side's band: robust to one slow step from 4 steps a side) is larger than
the difference of the medians, compare says so instead of "faster" or "slower", so that one or
two outlier steps on a busy CPU (02_linear eager against compiled read 0.02x and 82.87x) are
no verdict; a change larger than the spread still is one. On CPU-only traces a run slowed
throughout by a busy machine (no step stands out) shows in its ops: the same op on the same
inputs far apart between the runs, or a copy slower than any CPU copies."""

from __future__ import annotations

import json
from pathlib import Path

from tracereader.analyses import diff
from tracereader.commands.compare import main
from tracereader.trace.load import load

BIAS = [[1024, 64], [1024, 64], []]  # addmm's copy of the bias into its output


def steps_file(path: Path, durations_us: list[float], copy_us: float = 0, dims=BIAS) -> Path:
    """A CPU-only trace of 02_linear's shape: one ProfilerStep per duration, its ops inside,
    with addmm's aten::copy_ of the bias (its recorded inputs) where `copy_us` is given."""
    found, now = [], 0.0
    for i, dur in enumerate(durations_us):
        found += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": now,
             "dur": dur, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": now + 1, "dur": dur - 2,
             "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": now + 2, "dur": dur - 4,
             "pid": 1, "tid": 1},
        ]  # fmt: skip
        if copy_us:
            types = ["c10::BFloat16", "c10::BFloat16", "Scalar"]
            found.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": now + 3, "dur": copy_us,
                 "pid": 1, "tid": 1, "args": {"Input Dims": dims, "Input type": types}}
            )  # fmt: skip
        now += dur + 10
    path.write_text(json.dumps({"traceEvents": found}))
    return path


def verdict(tmp_path: Path, a: list[float], b: list[float], capsys) -> str:
    pa, pb = steps_file(tmp_path / "a.json", a), steps_file(tmp_path / "b.json", b)
    assert main([str(pa), str(pb)]) == 0
    return verdict_of(capsys.readouterr().out)


def verdict_of(out: str) -> str:
    """The verdict as one line: compare wraps it at 100 columns, its continuations indented."""
    lines = out.splitlines()
    (at,) = [i for i, x in enumerate(lines) if x.startswith("verdict: ")]
    end = next((i for i in range(at + 1, len(lines)) if not lines[i].startswith("    ")), None)
    return " ".join(x.strip() for x in lines[at:end]).removeprefix("verdict: ")


def test_two_outlier_steps_of_three_are_no_verdict(tmp_path, capsys):
    # B's median is an outlier step (82x A's): its band reaches from it down to the fast step
    said = verdict(tmp_path, [100, 101, 102], [100, 8287, 8300], capsys)
    assert said.startswith("B is not measurably different: the steps' spread (8187.0 us) exceeds ")
    assert "the difference (8186.0 us)" in said
    assert "slower" not in said and "x;" not in said  # no ratio where noise sets it


def test_outlier_steps_on_the_baseline_are_no_faster(tmp_path, capsys):
    said = verdict(tmp_path, [4500, 4600, 100], [90, 95, 100], capsys)  # 0.02x by the medians
    # noise only adds time: the fastest steps, 100 and 90 us, did not move as the medians did
    assert said.startswith(
        "B is not measurably different: the fastest steps (100.0 us -> 90.0 us) did not move "
        "with the medians (4500.0 us -> 95.0 us)"
    )
    assert "faster" not in said


def test_one_outlier_step_of_six_does_not_hide_a_real_change(tmp_path, capsys):
    said = verdict(tmp_path, [100, 101, 99, 100, 8000, 100], [50, 51, 49, 50, 50, 52], capsys)
    assert said.startswith("B is faster: step 100.0 us -> 50.0 us (0.50x")


def test_a_change_beyond_the_spread_is_a_verdict(tmp_path, capsys):
    said = verdict(tmp_path, [100, 101, 102], [200, 201, 203], capsys)
    assert said.startswith("B is slower: step 101.0 us -> 201.0 us (1.99x")


def test_the_spread_is_the_wider_band_and_the_difference_the_medians():
    spread, difference = diff.spread_and_difference([100, 101, 102], [100, 8287, 8300])
    assert (spread, difference) == (8187, 8186)  # B's band: its fastest step to its median
    assert not diff.measurably_different([100, 101, 102], [100, 8287, 8300])
    # under 4 steps the band drops the slowest (a first step slowed by the profiler's start):
    # 03_simple_mlp compiled against eager on an H100, every eager step faster, is a change
    compiled, eager = [704.2, 511.4, 413.6], [409.6, 295.9, 282.2]
    assert diff.fast_band(compiled) == (413.6, 511.4)
    assert diff.measurably_different(compiled, eager) and diff.fastest_agree(compiled, eager)
    # from 4 steps the band is the interquartile range: one slow step barely widens it
    spread, _ = diff.spread_and_difference([100, 100, 100, 100, 100, 9000], [50] * 6)
    assert spread == 0
    assert diff.measurably_different([100, 100, 100, 100, 100, 9000], [50] * 6)


def test_the_same_op_on_the_same_inputs_far_apart_is_the_machine_not_the_code(tmp_path, capsys):
    """02_linear on a shared CPU, every step of one run at 16 ms (no step stands out): its
    bias copy, 128 kB, took 7.0 ms a call there and 24 us in the other run. No change of
    code does that to one op on the same inputs: no verdict, and the reason."""
    a = steps_file(tmp_path / "a.json", [15900, 15600, 18000], copy_us=7000)
    b = steps_file(tmp_path / "b.json", [250, 240, 260], copy_us=24)
    assert main([str(a), str(b)]) == 0
    said = verdict_of(capsys.readouterr().out)
    assert said.startswith(
        "B is not measurably different: the same aten::copy_ on the same inputs took 7000.0 us "
        "a call in A and 24.0 us in B (292x): the machine was busy during"
    )
    assert "faster" not in said


def test_an_op_on_other_inputs_may_change_by_any_factor(tmp_path, capsys):
    a = steps_file(tmp_path / "a.json", [15900, 15600, 16000], copy_us=7000, dims=[[9999, 64]])
    b = steps_file(tmp_path / "b.json", [250, 240, 260], copy_us=24)
    assert main([str(a), str(b)]) == 0
    assert verdict_of(capsys.readouterr().out).startswith("B is faster")


def test_a_copy_slower_than_any_cpu_copies_says_the_machine_was_busy(tmp_path, capsys):
    """02_linear eager against compiled, both runs on a loaded CPU (every step at 20-32 ms):
    the 128 kB bias copy took 15 ms a call on both sides, 17 MB/s. The steps' difference is
    the wait for a core, not the code's: no verdict."""
    a = steps_file(tmp_path / "a.json", [31900, 31600, 35900], copy_us=15400)
    b = steps_file(tmp_path / "b.json", [19800, 18200, 21400], copy_us=15000)
    assert main([str(a), str(b)]) == 0
    said = verdict_of(capsys.readouterr().out)
    assert said.startswith(
        "B is not measurably different: A's and B's aten::copy_ moved 262 kB in 15.4 ms a call "
        "(17 MB/s, where a CPU copies GB/s): the machine was busy"
    )
    # the same copy at a quiet machine's 24 us (11 GB/s) is no sign of anything
    quiet = steps_file(tmp_path / "q.json", [250, 240, 260], copy_us=24)
    assert diff.starved_copy(load(quiet)) is None and diff.starved_copy(load(a))["us"] == 15400
