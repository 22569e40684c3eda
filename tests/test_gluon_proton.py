"""explain --proton: the per-warp reading of the gluon kernel's Proton trace, on a CPU.

Measured context (H100 run 2, 2026-11-26, torch 2.11.0+cu130, Triton 3.6.0; `03_fused_mlp.py
--batch 64 --seq 128 --dim 768 --hidden 3072 --proton --active 1`, the 128 x 128 pingpong, 132
blocks of 1 producer warp and 8 consumer warps), read from the whole 65 MB trace: a block spans
175.6 k cycles (median; 166.5-186.9). The producer waits for a free slot 65.2% of its block's span
(62.8-68.5% over the 132 producers). Each consumer warp waits for data 18.4% (median of the
blocks' means; 10.9-25.0% over the 1056 warps: consumer 0's warps 0-3 22.1%, consumer 1's warps
4-7 14.2%) and spends 18.1% in its epilogue (14.9-22.0%). Every warp's verdict agrees: loads
wait on compute (132 of 132 producers), compute waits on loads (1056 of 1056 consumer warps).
The fixture is 3 of those blocks (provenance_proton.json); its figures are within a point of
these. The lesson's former reading summed the scopes over the trace (33,462 units of data
waits over 1056 warps against 15,135 of slot waits over 132) and so said "the loads do not keep
up" alone.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest

from tests.helpers import ROOT
from tracereader.analyses import proton as gluon_proton_analysis
from tracereader.commands.explain import main as explain
from tracereader.names import proton as scopes
from tracereader.render.proton import summary
from tracereader.trace.proton import load

FIXTURE = (
    ROOT
    / "tests/fixtures/h100/03_fused_mlp"
    / "b64_s128_d768_h3072_bf16_gluon_eager_w1-1-1_proton_3blocks.chrome_trace.gz"
)


@pytest.fixture(scope="module")
def blocks():
    return gluon_proton_analysis.read(load(FIXTURE))


def test_fixture_is_small_with_its_provenance():
    assert FIXTURE.stat().st_size < 200 * 1024
    notes = json.loads((FIXTURE.parent / "provenance_proton.json").read_text())
    (entry,) = notes["traces"]
    assert entry["file"] == FIXTURE.name and "--proton" in entry["command"]


def test_every_block_has_one_producer_and_eight_consumer_warps(blocks):
    assert len(blocks) == 3
    for block in blocks:
        assert len(block.producers) == 1 and len(block.consumers) == 8
        assert 170 < block.span < 180  # k cycles (1000 MHz trace units)
        # Roles come from the scopes, not the warp numbers: the producer is warp 10 here.
        assert block.producers[0].name.startswith("warp 10")


def test_the_producer_waits_about_two_thirds_of_its_span_for_a_free_slot(blocks):
    for block in blocks:
        (producer,) = block.producers
        # 65% on the H100; a reading that swapped roles would give ~18%, one that summed
        # the consumers' waits ~150%.
        assert 0.60 < producer.waits < 0.70
        assert producer.epilogue == 0.0
        assert producer.verdict == gluon_proton_analysis.LOADS_WAIT


def test_each_consumer_warp_waits_for_data_and_runs_its_epilogue_about_a_fifth(blocks):
    for block in blocks:
        for warp in block.consumers:
            # Per warp, not summed over the block's 8 (which would read ~150% each).
            assert 0.10 < warp.waits < 0.26
            assert 0.14 < warp.epilogue < 0.23
            assert warp.verdict == gluon_proton_analysis.COMPUTE_WAITS
        assert 0.15 < statistics.fmean(w.waits for w in block.consumers) < 0.21
        assert 0.16 < statistics.fmean(w.epilogue for w in block.consumers) < 0.20


def test_the_lesson_prints_two_lines_per_warp(blocks):
    first, second = summary(blocks)
    assert "producer waits for a free slot 65%" in first
    assert re.search(r"each consumer warp waits for data 1[89]%", first)
    assert "epilogue 18%" in first
    assert "loads wait on compute (3 of 3 producers)" in second
    assert "compute waits on loads (24 of 24 consumer warps)" in second
    assert "the ring is full, yet data lands late" in second


def span(pid, tid, name, ts, dur):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}


def test_verdicts_follow_the_thresholds():
    # One block of 100 units: a producer waiting 20%, a consumer waiting for data 2%.
    events = [
        span("b", "warp 8", scopes.SLOT, 0, 20),
        span("b", "warp 0", scopes.DATA, 0, 2),
        span("b", "warp 0", scopes.EPILOGUE, 90, 10),
        {"ph": "M", "name": "process_name", "pid": "b"},  # metadata: not a scope
        span("b", "warp 0", "some other scope", 0, 100),
    ]
    (block,) = gluon_proton_analysis.read(events)
    assert block.span == 100
    assert block.producers[0].verdict == gluon_proton_analysis.NEITHER
    assert block.consumers[0].verdict == gluon_proton_analysis.NEITHER
    assert block.consumers[0].epilogue == pytest.approx(0.10)
    assert "neither waits much" in summary([block])[1]
    events[0]["dur"] = 60  # the producer now waits 60%: the tensor cores set the pace
    assert "the tensor cores set the pace" in summary(gluon_proton_analysis.read(events))[1]
    events[0]["dur"], events[1]["dur"] = 20, 30  # consumers wait 30%: loads do not keep up
    assert "the loads do not keep up" in summary(gluon_proton_analysis.read(events))[1]


def test_no_scopes_reads_as_one_line():
    assert gluon_proton_analysis.read([]) == []
    (line,) = summary([])
    assert "no scopes" in line


def test_the_scope_names_are_the_kernels():
    source = (ROOT / "modules/geglu/gluon.py").read_text()
    for name in (scopes.SLOT, scopes.DATA, scopes.EPILOGUE):
        assert source.count(f'pl.enter_scope("{name}")') == 1
        assert source.count(f'pl.exit_scope("{name}")') == 1


def test_command_line_reads_a_saved_trace(capsys):
    assert explain([str(FIXTURE), "--proton"]) == 0
    out = capsys.readouterr().out
    assert "producer waits for a free slot 65%" in " ".join(out.split())
    assert max(map(len, out.splitlines())) <= 100  # explain's width, as every other reading
    with pytest.raises(SystemExit) as stop:
        explain(["--proton"])
    assert stop.value.code == 2
    assert explain([str(FIXTURE.with_name("absent.chrome_trace")), "--proton"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_plain_kernels_warps_read_as_main_loop_then_epilogue():
    """--proton --kernel hopper: each of a block's warps times its main loop and its epilogue;
    all of them store at once, so the epilogue's share is the tensor cores' idle share."""
    main, epi = scopes.MAIN_LOOP, scopes.PLAIN_EPILOGUE
    events = []
    for warp in range(8):  # two tiles of 50 units: 40 in the main loop, 10 storing
        for t0 in (0, 50):
            events += [
                span("b", f"warp {warp}", main, t0, 40),
                span("b", f"warp {warp}", epi, t0 + 40, 10),
            ]
    (block,) = gluon_proton_analysis.read(events)
    assert not block.producers and not block.consumers and len(block.plain) == 8
    assert block.plain[0].waits == pytest.approx(0.8) and block.plain[0].epilogue == pytest.approx(
        0.2
    )
    head, reading = summary([block])
    assert "main loop 80%, epilogue 20% (8 warps)" in head
    assert reading.startswith(f"reading: {gluon_proton_analysis.EPILOGUE_STOPS} (8 of 8 warps)")
    for e in events:  # a short epilogue: 48 + 2 per tile
        e["ts"], e["dur"] = (e["ts"], 48) if e["name"] == main else (e["ts"] + 8, 2)
    assert "the main loop sets the pace" in summary(gluon_proton_analysis.read(events))[1]


@pytest.mark.slow  # two child processes compiling for sm_90 with Proton: ~60 s on two cores
def test_the_hopper_kernel_compiles_with_paired_proton_scopes_for_sm90(tmp_path):
    """What --proton --kernel hopper runs, compiled for sm_90 here with Proton's instrumentation
    (Proton's hook, the GPU's shared memory given): the unflattened loop's scopes pair and reach
    the PTX as timer reads; in the flattened loop (the hopper config's own) the compiler's
    peeling duplicates a start record, which is why record_proton unflattens it."""
    pytest.importorskip("triton.profiler.language")
    import os
    import subprocess
    import sys

    def compile_(*flags):
        env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "-".join(flags or ("plain",)))}
        return subprocess.run(
            [sys.executable, "-m", "tools.dev.kernel_lab.proton_compile", *flags], cwd=ROOT,
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    plain = compile_()
    assert plain.returncode == 0, plain.stderr[-2000:]
    reads = int(re.search(r"timer reads in the PTX: (\d+)", plain.stdout).group(1))
    assert reads >= 4 and "error:" not in plain.stderr  # two scopes, entered and left
    flattened = compile_("--flatten")
    assert "duplicate start record" in flattened.stderr
