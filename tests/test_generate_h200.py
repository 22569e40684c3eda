"""The reader on 08_generate's real H200 traces (tests/fixtures/h200/08_generate: the 8b preset,
batch 1, prompt 512, bf16, a prefill step then 3 decode steps each): eager, CUDA graphs, and
compile + CUDA graphs. What they showed: docs/lessons/08_generate.md."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracereader
from tracereader.analyses import idle
from tracereader.commands import explain
from tracereader.judge import findings
from tracereader.trace import load as trace_reader

FOLDER = Path(__file__).parent / "fixtures/h200/08_generate"
STEM = "8b_b1_p512_n256_bf16_static_"
LAYERS = 32
GEMMS = 7 * LAYERS + 1  # q, k, v, o, gate, up, down per layer, and the head


@pytest.fixture(scope="module")
def traces():
    return {
        mode: trace_reader.load(FOLDER / f"{STEM}{mode}.json.gz")
        for mode in ("eager", "graphs_eager", "graphs_compile")
    }


@pytest.mark.parametrize("mode", ["eager", "graphs_eager", "graphs_compile"])
def test_prefill_and_decode_are_read_apart(traces, mode):
    trace = traces[mode]
    phases = tracereader.generation_steps(trace)
    assert [len(phases["prefill"]), len(phases["decode"])] == [1, 3]
    # prefill: the layers' GEMMs with M = batch x prompt, the head's with M = batch
    assert tracereader.gemm_rows(phases["prefill"][0]) == {512: 7 * LAYERS, 1: 1}
    read = tracereader.generation(trace)
    assert read["prefill"]["steps"] == 1 and read["decode"]["tokens"] == 3
    # prefill's 15.6 ms of GPU work is not taken for a slow token
    assert 15_000 < read["prefill"]["gpu_busy_us"] < 16_500
    assert read["decode"]["gpu_busy_us"] < 7_000
    # ranked findings: prefill is neither a cold start nor a step-to-step variation (the only
    # variation left, below the screen's 1% cut, is a 2 us kernel's 0.3-0.7 us between tokens)
    topics = [f.topic for f in findings.read(trace)]
    assert "generation" in topics and "cold start" not in topics and "variation" not in topics
    hidden = [f.message for f in findings.read(trace, everything=True) if f.topic == "variation"]
    assert all(" ms" not in m and "prefill" not in m for m in hidden), hidden


def test_eager_decode_is_launch_bound_the_gpu_waiting_most_of_a_token(traces):
    read = tracereader.generation(traces["eager"])
    decode = read["decode"]
    assert read["bound"] == "launch"
    assert decode["host_wait_us"] > 0.5 * decode["per_token_us"]["median"]  # 84% on the H200
    assert decode["kernels"] == 1257
    assert decode["launches"] == {"kernel": 1257, "copy": 33}  # each kernel from the host
    steps = tracereader.generation_steps(traces["eager"])["decode"]
    assert all(tracereader.gemm_rows(s) == {1: GEMMS} for s in steps)  # GEMVs at batch 1


@pytest.mark.parametrize(("mode", "kernels"), [("graphs_eager", 1257), ("graphs_compile", 620)])
def test_a_graph_replay_is_one_launch_per_token_and_gpu_bound(traces, mode, kernels):
    trace = traces[mode]
    steps = tracereader.generation_steps(trace)["decode"]
    assert all(tracereader.launch_calls(s) == {"graph": 1} for s in steps)
    read = tracereader.generation(trace)
    assert read["bound"] == "gpu" and read["decode"]["host_wait_us"] < 100
    assert read["decode"]["kernels"] == kernels  # the same kernels, replayed


@pytest.mark.parametrize(("mode", "low", "high"), [("graphs_eager", 7_000, 8_000),
                                                   ("graphs_compile", 5_500, 6_500)])  # fmt: skip
def test_a_graphs_token_takes_the_gpus_time_not_the_hosts_step(traces, mode, low, high):
    """The host queues a replay in 0.6-1.8 ms; the GPU runs the token in 6-7.7 ms. The reader's
    per-token time is the GPU's (the lesson's bench: 7.38 and 5.79 ms without the profiler)."""
    trace = traces[mode]
    steps = tracereader.generation_steps(trace)["decode"]
    assert max(s.dur for s in steps) < 2_000  # the host's step: sub-ms to 1.8 ms
    per_token = tracereader.generation(trace)["decode"]["per_token_us"]
    assert low < per_token["min"] <= per_token["median"] <= per_token["max"] < high
    assert per_token["median"] > tracereader.generation(trace)["decode"]["gpu_busy_us"]


def test_explain_puts_the_gpus_per_token_time_in_its_headline(capsys):
    assert explain.main([str(FOLDER / f"{STEM}graphs_compile.json.gz")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("generation: "))
    assert line.startswith("generation: decode 5984.3 us per token")
    assert "prefill 41.6 ms" in line  # its time as a token's: the longer of CPU step and GPU window


def test_compare_times_two_generations_by_their_tokens(capsys):
    """compare on two generations: the tokens' times, prefill apart (with it in the spread,
    5.98 against 7.65 ms read "not measurably different"), and a kernel group that only
    prefill runs in A (median 0 us a step) no division by zero."""
    from tracereader.commands import compare

    a, b = (str(FOLDER / f"{STEM}{mode}.json.gz") for mode in ("graphs_compile", "graphs_eager"))
    assert compare.main([a, b]) == 0
    verdict = capsys.readouterr().out.split("verdict: ", 1)[1]
    assert verdict.startswith("B is slower: step 5984.3 us -> 7649.4 us (1.28x")
    assert "runs where A's median step has none" in verdict


# The kernels changed (2026-11-26, later runs; provenance.json beside the traces): q, k, v and
# gate, up fused (--fuse), decode attention split across the SMs (--attention split), prefill
# compiled and replayed too; then Inductor's max-autotune (--autotune, with combo kernels since
# 2026-11-26 14:0xZ: 291 kernels a token instead of 355), on an H200 and an H100.
FUSED_SPLIT = FOLDER / f"{STEM}graphs_fused_split_compile.json.gz"
AUTOTUNE = {
    "H200": FOLDER / f"{STEM}graphs_fused_split_autotune_compile.json.gz",
    "H100": FOLDER.parent.parent
    / "h100/08_generate"
    / f"{STEM}graphs_fused_split_autotune_compile.json.gz",
}


def test_split_attention_is_read_as_attention_and_fused_gemms_as_fewer_gemms():
    trace = trace_reader.load(FUSED_SPLIT)
    phases = tracereader.generation_steps(trace)
    for step in phases["decode"]:  # qkv, o, gate_up, down per layer and the head
        assert step.count("gemm") == 4 * LAYERS + 1
        assert step.count("attention") == LAYERS  # decode_attention_partial_kernel
    read = tracereader.generation(trace)
    # 4.77 ms per token (the bench: 4.71) against the unfused, cuDNN-attention 5.98 ms
    assert 4_500 < read["decode"]["per_token_us"]["median"] < 5_000
    assert read["bound"] == "gpu"


@pytest.mark.parametrize("device", ["H200", "H100"])
def test_autotuned_gemms_are_gemms_and_a_replayed_prefill_takes_its_gpu_time(device):
    """max-autotune runs prefill's GEMMs as Triton templates (read as GEMMs: 96 templates and
    the 32 down projections on cuBLAS) and the GEMVs at one row (decode's, and prefill's head:
    its last position only) as Inductor reductions over the weight's transpose, read as GEMMs
    too: 4 a layer and the head, whatever norm or SiLU Inductor fused into them. The prefill
    is a graph replay: its host step takes ~1 ms, its kernels 12-13 ms, and the 2 warm-up
    prefills queued before it must not be counted in it (its first GPU window holds them)."""
    trace = trace_reader.load(AUTOTUNE[device])
    prefill = tracereader.generation_steps(trace)["prefill"][0]
    assert prefill.count("gemm") == 4 * LAYERS + 1
    for step in tracereader.generation_steps(trace)["decode"]:
        assert step.count("gemm") == 4 * LAYERS + 1  # qkv, o, gate_up, down; the head
    assert prefill.dur < 1_500
    read = tracereader.generation(trace)
    busy = read["prefill"]["gpu_busy_us"]
    assert 11_000 < busy <= read["prefill"]["wall_us"] < 1.15 * busy
    per_token = read["decode"]["per_token_us"]["median"]
    assert (4_400 < per_token < 4_700) if device == "H200" else (5_800 < per_token < 6_200)


def test_compare_reads_the_autotuned_generation_faster_by_its_tokens(capsys):
    from tracereader.commands import compare

    assert compare.main([str(FUSED_SPLIT), str(AUTOTUNE["H200"])]) == 0
    verdict = capsys.readouterr().out.split("verdict: ", 1)[1]
    assert verdict.startswith("B is faster: step 4771.6 us -> 4443.4 us")


def test_work_queued_before_the_recording_is_no_steps_idle_or_busy_time():
    """The autotuned generation's first recorded step (its prefill, a graph replay) starts while
    the warm-up's replays, whose launches the trace does not hold, still run: they are earlier
    work, not the prefill's busy time nor its wait on the host (it read 30.1 ms of window, 23.2
    busy and 6.5 host wait for a 12 ms prefill before)."""
    trace = trace_reader.load(AUTOTUNE["H200"])
    first = tracereader.generation_steps(trace)["prefill"][0]
    part = dict(zip(map(id, trace.steps), idle.split(trace), strict=True))[id(first)]
    assert part["host_wait_us"] < 50 and part["busy_us"] <= first.gpu_sum + 1
    assert 11_000 < part["window_us"] < 12_500


def test_single_block_kernels_are_a_finding_with_their_time():
    """At batch 1 a one-row reduction runs as one block: 66 a token in the autotuned decode
    (the norms' statistics, the split-K sums fused into them, the head's argmax over 128k
    logits, 33 us alone), one SM of 132 working for 5% of the GPU's time, counted over
    the decode steps (the prefill is another phase). A lone one-block
    kernel of a tiny problem (02_linear at batch 8: 2 us) is not worth a line."""
    for device, argmax_us in (("H200", "33.2 us"), ("H100", "18.4 us")):
        trace = trace_reader.load(AUTOTUNE[device])
        (found,) = [f for f in findings.read(trace) if f.topic == "one block"]
        assert found.message.startswith("66 kernels a step run as a single block (one SM of 132)")
        # the decode token's argmax: the prefill's (67.8 us on the H100) is another phase
        assert f"triton_red_fused_add_argmax_copy__index_copy_mm_18, {argmax_us}" in found.message
        assert 200 < found.us < 250
    tiny = trace_reader.load(FOLDER.parent / "02_linear" / "b8_in4_out6_bf16_eager.json.gz")
    assert not [f for f in findings.read(tiny, everything=True) if f.topic == "one block"]


def test_the_per_step_spreads_are_the_decode_steps_with_the_prefill_apart(capsys):
    """A prefill is another phase, not a slow decode step: the per-step table spreads over the
    3 decode tokens (GPU busy 4.30-4.33 ms), where over all 4 steps its max was the prefill's
    12 ms and read as variation."""
    from tracereader.reading import Reading

    summary = Reading(trace_reader.load(AUTOTUNE["H200"])).summary
    assert summary["phase"] == "decode" and summary["steps"] == 3
    assert 4_300 < summary["gpu_busy_us"]["min"] <= summary["gpu_busy_us"]["max"] < 4_400
    # the verdict reads the same steps: its window is the table's (over all 4 it read 4455 us)
    (bound,) = [f for f in findings.read(trace_reader.load(AUTOTUNE["H200"])) if f.topic == "bound"]
    window = summary["idle_us"]["window_us"]["median"]
    assert f"of its {window:.0f} us window per step" in bound.message
    assert explain.main([str(AUTOTUNE["H200"])]) == 0
    assert "per step (median [min - max] over 3 decode steps of the 4 recorded):" in (
        capsys.readouterr().out
    )


# Three more variants (2026-11-26, 16:37-16:42Z, two H200 machines; provenance.json): --compile
# alone, the cache that grows (--cache dynamic, eager) and transformers' own generate (--impl hf).
def _generation(mode: str):
    trace = trace_reader.load(FOLDER / f"{STEM.replace('static_', '')}{mode}.json.gz")
    return trace, tracereader.generation(trace)


def test_compile_without_graphs_fuses_kernels_but_still_waits_on_the_host(traces):
    """Inductor halves the kernels of a token (620 against eager's 1257) and the GPU's busy
    time falls, but each kernel is still launched from the host: launch-bound, told to add
    CUDA graphs."""
    trace, read = _generation("static_compile")
    eager = tracereader.generation(traces["eager"])["decode"]
    decode = read["decode"]
    assert read["bound"] == "launch"
    assert decode["launches"]["kernel"] == decode["kernels"] < eager["kernels"] / 1.5
    assert decode["gpu_busy_us"] < 0.85 * eager["gpu_busy_us"]
    (found,) = [f for f in findings.read(trace) if f.topic == "generation"]
    assert "CUDA graphs" in found.next


def test_a_growing_cache_attends_to_the_keys_written_so_far(traces):
    """The dynamic cache's attention reads the keys up to the token (one more each step), the
    static cache's all 768 positions it holds, masked; both launch-bound, eager."""
    trace, read = _generation("dynamic_eager")
    steps = tracereader.generation_steps(trace)["decode"]
    lengths = [set(tracereader.key_lengths(s)) for s in steps]
    assert all(len(n) == 1 for n in lengths)
    first = lengths[0].pop()
    assert 512 < first and [n.pop() for n in lengths[1:]] == [first + 1, first + 2]
    static = tracereader.generation_steps(traces["eager"])["decode"]
    assert all(set(tracereader.key_lengths(s)) == {768} for s in static)
    assert read["bound"] == "launch"


def test_transformers_generate_is_read_balanced_with_its_syncs_named():
    """transformers' compiled static-cache generate replays a CUDA graph per token, yet the GPU
    waits on the host 35% of it: the loop around the graph (32 kernels and 7 copies launched
    outside it, a scalar read per token). The [bound] finding and the generation's verdict say
    the same word (one rule), the sync finding names the scalar reads, and cuDNN's decode
    combine kernel counts as attention (it had read as a convolution)."""
    trace, read = _generation("hf_eager")
    phases = tracereader.generation_steps(trace)
    assert [len(phases["prefill"]), len(phases["decode"])] == [1, 3]
    decode = read["decode"]
    assert decode["launches"] == {"graph": 1, "kernel": 32, "copy": 7}
    assert read["bound"] == "balanced"
    assert 0.25 < decode["host_wait_us"] / decode["per_token_us"]["median"] < 0.45
    topics = {f.topic: f for f in findings.read(trace, everything=True)}
    assert topics["bound"].message.startswith("balanced")
    assert "balanced" in topics["generation"].message
    assert "item()" in topics["sync"].message
    for step in phases["decode"]:
        assert step.count("conv") == 0 and step.count("attention") == 2 * LAYERS


@pytest.mark.parametrize("device, token_us", [("H200", (4_100, 4_400)), ("H100", (5_550, 5_850))])
def test_gemv_decode_reads_as_gemms_without_the_single_block_kernels(device, token_us):
    """--gemv (H200 "U" 20:35Z, H100 "V" 20:40Z, 2026-11-26; combo kernels on):
    modules/decode_gemv.py's
    kernels read as the token's GEMMs, 4 a layer and the head, and the RMSNorms' single-block
    statistics kernels that --autotune's token spends 5% of its GPU time in are gone (each GEMV
    computes its norm): no "one block" finding, where the autotuned trace of the same kind of
    machine has one. The per-token time read is the bench's, within the profiler's cost."""
    gemv = AUTOTUNE[device].with_name(f"{STEM}graphs_fused_split_gemv_compile.json.gz")
    trace = trace_reader.load(gemv)
    for step in tracereader.generation_steps(trace)["decode"]:
        assert step.count("gemm") == 4 * LAYERS + 1 and step.count("attention") == LAYERS
    read = tracereader.generation(trace)
    per_token = read["decode"]["per_token_us"]["median"]
    assert read["bound"] == "gpu" and token_us[0] < per_token < token_us[1]
    assert "one block" not in {f.topic for f in findings.read(trace, everything=True)}
    autotuned = trace_reader.load(AUTOTUNE[device])
    assert "one block" in {f.topic for f in findings.read(autotuned, everything=True)}


@pytest.mark.parametrize("device", ["H200", "H100"])
def test_the_fused_gate_takes_a_gemm_and_a_kernel_out_of_each_layers_prefill(device):
    """--fused-gate (H200 "U" and H100 "V", 2026-11-26, each beside a --gemv trace of the
    same machine): the prompt's gate/up GEMM and its SiLU kernel become one Gluon kernel a
    layer, read as a hand-written Triton kernel beside 3 cuBLAS GEMMs a layer and the head's
    GEMV; decode is unchanged (4 GEMVs a layer and the head). Prefill's GPU time falls by at
    least 2% (2.4% H200, 3.2% H100), its kernels by 32 a step, and no elementwise SiLU kernel
    is left in it."""
    folder = AUTOTUNE[device].parent
    plain, gated = (trace_reader.load(folder / f"{STEM}graphs_fused_split_gemv{tail}.json.gz")
                    for tail in ("_compile", "_gate_compile"))  # fmt: skip
    before, after = (tracereader.generation_steps(t)["prefill"][0] for t in (plain, gated))
    assert after.count("gemm") == 3 * LAYERS + 1 and after.count("triton") == LAYERS
    assert before.count("gemm") == 4 * LAYERS + 1 and before.count("triton") == 0
    for step in tracereader.generation_steps(gated)["decode"]:
        assert step.count("gemm") == 4 * LAYERS + 1
    busy = [tracereader.generation(t)["prefill"]["gpu_busy_us"] for t in (plain, gated)]
    assert busy[1] < 0.98 * busy[0], busy
    names = [k.name for k in after.gpu]
    assert len(before.gpu) - len(after.gpu) >= LAYERS
    assert not any("silu" in n for n in names) and any("gluon" in n for n in names)


@pytest.mark.parametrize("device", ["H200", "H100"])
@pytest.mark.parametrize("gate", [False, True])
def test_the_lessons_guess_holds_on_its_gemv_and_fused_gate_traces(device, gate, capsys):
    """08_generate's own EXPECT and rows check, per phase, on the traces its --gemv and
    --fused-gate runs wrote (H200 U, H100 V): what --strict held on the GPU holds here."""
    from tests.helpers import load_script

    lesson = load_script("08_generate")
    cfg = lesson.llama.PRESETS["8b"]
    v = lesson.Variant(cfg, 1, 512, 768, "static", "ours", True, True, fused=True,
                       attention="split", gemv=True, fused_gate=gate)  # fmt: skip
    tail = "_gate_compile" if gate else "_compile"
    trace = trace_reader.load(
        AUTOTUNE[device].with_name(f"{STEM}graphs_fused_split_gemv{tail}.json.gz")
    )
    phases = tracereader.generation_steps(trace)
    for phase in lesson.PHASES:
        assert lesson.look(v, phase, lesson.EXPECT[phase](v), trace, phases[phase]), phase
    assert ("32 gate/up + SiLU kernels" in capsys.readouterr().out) == gate
